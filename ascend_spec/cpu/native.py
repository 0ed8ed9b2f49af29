"""Build and load the native CPU kernels of ``csrc/cpu/`` (the ``cpu`` backend).

Why native: the CPU engine runs the two GDN verify ops once per GDN layer per step; as PyTorch they are ~200
operator calls per layer (0.5 ms at one request, ~4x vLLM's own C++ path), as one C++ call each they cost what
their arithmetic costs. Each source is compiled once with the host compiler (``-O3 -march=native -fopenmp``) into
a shared library cached by content hash (sources, compiler, flags and the CPU's feature flags), like the AscendC
host model (:mod:`ascend_spec.ascendc.host_model`), and called through ctypes with one arguments struct of int64
fields (pointers, sizes, element strides, dtype codes). OpenMP: the libraries link ``libgomp.so.1``, the runtime
torch's CPU wheel already loaded, and take torch's thread count per call.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ascend_spec.backend import BackendUnavailableError, host_compiler
from ascend_spec.paths import CSRC_DIR, cache_dir

CPU_KERNELS_DIR = CSRC_DIR / "cpu"
FLAGS = ("-std=c++17", "-O3", "-march=native", "-shared", "-fPIC", "-Wall", "-Werror=return-type")
# OpenMP threads where the toolchain has libgomp; else the same kernels single-threaded (the simd pragmas only).
THREADING = (("-fopenmp",), ("-fopenmp-simd",))

# Dtype codes of csrc/cpu/cpu_common.h (the same as the AscendC kernels') and its index codes.
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
INDEX_CODES = {torch.int32: 0, torch.int64: 1}


def _cpu_features() -> str:
    """The CPU's feature flags (a library built with -march=native is only reused on the same features)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.machine() + platform.processor()


def _library_hash(source: Path, compiler: str, flags: tuple[str, ...]) -> str:
    digest = hashlib.sha256(" ".join((compiler, *flags, _cpu_features())).encode())
    for path in [*sorted(CPU_KERNELS_DIR.glob("*.h")), source]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def load(kernel: str) -> ctypes.CDLL:
    """Compile (once, cached on disk) and load ``csrc/cpu/<kernel>.cpp``."""
    compiler = host_compiler()
    if compiler is None:
        raise BackendUnavailableError(
            f"the cpu backend of {kernel} needs a C++ compiler (g++ or clang++) on PATH"
        )
    source = CPU_KERNELS_DIR / f"{kernel}.cpp"
    if not source.is_file():
        raise FileNotFoundError(f"no native CPU kernel source {source}")
    errors = []
    for threading in THREADING:
        flags = (*FLAGS, *threading)
        target = cache_dir("cpu") / f"{kernel}-{_library_hash(source, compiler, flags)}.so"
        if target.exists() or _build(compiler, flags, source, target, errors):
            break
    else:
        raise RuntimeError(f"native CPU build of {source.name} failed:\n" + "\n".join(errors))
    return ctypes.CDLL(str(target))


def _build(compiler: str, flags: tuple[str, ...], source: Path, target: Path, errors: list[str]) -> bool:
    """Compile into a temporary file and move it into place (concurrent builders never see half a library)."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp_lib = Path(tmp) / target.name
        cmd = [compiler, *flags, f"-I{CPU_KERNELS_DIR}", str(source), "-o", str(tmp_lib)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            errors.append(f"{' '.join(cmd)}:\n{result.stderr[-3000:]}")
            return False
        os.replace(tmp_lib, target)
    return True


def arguments_struct(name: str, ints: Sequence[str], floats: Sequence[str] = ()) -> type[ctypes.Structure]:
    """A ctypes mirror of a kernel's arguments struct: int64 fields, then double fields, in declaration order."""
    fields = [(f, ctypes.c_int64) for f in ints] + [(f, ctypes.c_double) for f in floats]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


@functools.cache
def entry(kernel: str, struct: type[ctypes.Structure]) -> ctypes._CFuncPtr:
    """``<kernel>_cpu(const Args*)`` of the loaded library, after checking the struct mirrors the C++ one."""
    lib = load(kernel)
    size_of = getattr(lib, f"{kernel}_args_bytes")
    size_of.restype = ctypes.c_uint64
    if size_of() != ctypes.sizeof(struct):
        raise RuntimeError(
            f"{struct.__name__} has {ctypes.sizeof(struct)} bytes but csrc/cpu/{kernel}.cpp's arguments struct has "
            f"{size_of()}: the ctypes mirror no longer matches the C++ struct"
        )
    fn = getattr(lib, f"{kernel}_cpu")
    fn.argtypes = [ctypes.POINTER(struct)]
    fn.restype = ctypes.c_int
    return fn


@functools.cache
def bound(kernel: str, struct: type[ctypes.Structure]) -> Callable[[ctypes.Structure], None]:
    """``<kernel>_cpu`` as a callable of a filled ``struct``, raising on a non-zero status (for callers that keep
    one arguments struct and call it every step)."""
    fn = entry(kernel, struct)

    def run(args: ctypes.Structure) -> None:
        status = fn(ctypes.byref(args))
        if status != 0:
            raise RuntimeError(f"native CPU kernel {kernel} failed with status {status}")

    return run


def call(kernel: str, args: ctypes.Structure) -> None:
    bound(kernel, type(args))(args)


def ptr(t: torch.Tensor | None) -> int:
    """Address of a CPU tensor's first element (0 for None)."""
    return 0 if t is None else t.data_ptr()
