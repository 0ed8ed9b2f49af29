"""Run AscendC kernels from ``csrc/kernels/`` on CPU tensors through the host model of the AscendC API.

Each kernel source is compiled once with g++ (``-DASCEND_SPEC_HOST_MODEL -I csrc/host_model``) into a
shared library cached by content hash; its ``extern "C"`` host entry computes the same tiling the NPU binding
computes and launches the kernel block by block. Before a launch every tensor argument is registered as a GM
region, so a kernel that touches memory outside its tensors fails loudly instead of corrupting memory, and the
Unified Buffer size of the chosen SoC bounds what the kernel's TPipe may allocate.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ascend_spec.backend import BackendUnavailableError, host_compiler
from ascend_spec.paths import CSRC_DIR, cache_dir

HOST_MODEL_DIR = CSRC_DIR / "host_model"
KERNELS_DIR = CSRC_DIR / "kernels"
SOC_ENV = "ASCEND_SPEC_HOST_MODEL_SOC"


@dataclass(frozen=True)
class SocSpec:
    """What the host model needs to know of a chip: the UB bytes per vector core a tiling may use (what
    ``GetCoreMemSize(UB)`` reports there) and the vector core count."""

    name: str
    ub_bytes: int
    vector_cores: int


# Atlas A2 (910B1/B2: 24 AI cores x 2 vector cores; B3/B4: 20 x 2) and A3 (910_93): 192 KiB of physical Unified
# Buffer per vector core, of which GetCoreMemSize(UB) reports 196352 bytes: asc-devkit's platform_ascendc.cpp
# subtracts a 256-byte kfc reserve (LOCAL_RESERV_SIZE) for SocVersion::ASCEND910B, which Ascend910_93 maps to too.
USABLE_UB_BYTES = 192 * 1024 - 256
SOCS: dict[str, SocSpec] = {
    spec.name: spec
    for spec in (
        SocSpec("ascend910b1", USABLE_UB_BYTES, 48),
        SocSpec("ascend910b2", USABLE_UB_BYTES, 48),
        SocSpec("ascend910b3", USABLE_UB_BYTES, 40),
        SocSpec("ascend910b4", USABLE_UB_BYTES, 40),
        SocSpec("ascend910_9391", USABLE_UB_BYTES, 48),
        SocSpec("ascend910_9392", USABLE_UB_BYTES, 48),
    )
}
DEFAULT_SOC = "ascend910b2"

# What a launch issued, summed over its blocks (csrc/host_model/hm_core.h Counters, in its order): vector
# instructions and the 256-byte repeats they cover, scalar UB / GM accesses, DMA bursts and bytes per direction
# (MTE2: GM -> UB, MTE3: UB -> GM, UB -> UB), and the blocks run. Counts only: the model has no timing.
COUNTERS = (
    "vector_instructions", "vector_repeats", "scalar_ub_reads", "scalar_ub_writes", "scalar_gm_reads",
    "scalar_gm_writes", "mte2_bursts", "mte2_bytes", "mte3_bursts", "mte3_bytes", "ub_copy_bursts",
    "ub_copy_bytes", "blocks",
)  # fmt: skip
_count_scopes: list[dict[str, int]] = []

# The dtype codes the kernels' entry points dispatch on (kDtypeF32/kDtypeBf16/kDtypeF16 in
# csrc/kernels/kernel_utils.h; torch_binding.cpp's DtypeCode maps them the same way on the NPU).
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@contextlib.contextmanager
def count_instructions() -> Iterator[dict[str, int]]:
    """Sum :data:`COUNTERS` (plus ``launches``) over every host-model launch inside the ``with`` block."""
    totals = dict.fromkeys((*COUNTERS, "launches"), 0)
    _count_scopes.append(totals)
    try:
        yield totals
    finally:
        del _count_scopes[next(i for i, s in enumerate(_count_scopes) if s is totals)]


def _add_counters(lib: ctypes.CDLL) -> None:
    values = (ctypes.c_int64 * len(COUNTERS))()
    n = lib.ascend_spec_hm_counters(values, len(COUNTERS))
    assert n == len(COUNTERS), (
        f"the host model reports {n} counters, host_model.COUNTERS names {len(COUNTERS)}"
    )
    for totals in _count_scopes:
        for name, value in zip(COUNTERS, values):
            totals[name] += value
        totals["launches"] += 1


def soc_spec(name: str | None = None) -> SocSpec:
    """The SoC the host model imitates: ``name``, else ``$ASCEND_SPEC_HOST_MODEL_SOC``, else 910B2."""
    name = (name or os.environ.get(SOC_ENV) or DEFAULT_SOC).lower()
    if name not in SOCS:
        raise ValueError(f"unknown SoC {name!r} for the AscendC host model; known: {sorted(SOCS)}")
    return SOCS[name]


def _source_hash(source: Path, compiler: str) -> str:
    digest = hashlib.sha256(compiler.encode())
    files = sorted(HOST_MODEL_DIR.glob("*.h")) + sorted(KERNELS_DIR.glob("*.h")) + [source]
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def kernel_source(kernel: str | Path) -> Path:
    """``csrc/kernels/<kernel>.cpp`` for a kernel name; a path is taken as it is (tests' own kernels)."""
    source = Path(kernel) if isinstance(kernel, Path) else KERNELS_DIR / f"{kernel}.cpp"
    if not source.is_file():
        raise FileNotFoundError(f"no AscendC kernel source {source}")
    return source


@functools.cache
def load_kernel(kernel: str | Path) -> ctypes.CDLL:
    """Compile (once, cached on disk by content hash) and load a kernel source under the host model."""
    compiler = host_compiler()
    if compiler is None:
        raise BackendUnavailableError("the AscendC host model needs a C++ compiler (g++ or clang++) on PATH")
    source = kernel_source(kernel)
    target = cache_dir("host_model") / f"{source.stem}-{_source_hash(source, compiler)}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            tmp_lib = Path(tmp) / target.name
            cmd = [
                compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Werror=return-type",
                "-DASCEND_SPEC_HOST_MODEL", f"-I{HOST_MODEL_DIR}", f"-I{KERNELS_DIR}",
                str(source), "-o", str(tmp_lib),
            ]  # fmt: skip
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"host-model build of {source.name} failed:\n{result.stderr[-4000:]}")
            os.replace(tmp_lib, target)
    lib = ctypes.CDLL(str(target))
    lib.ascend_spec_hm_configure.argtypes = [ctypes.c_uint64, ctypes.c_int]
    lib.ascend_spec_hm_register_gm.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.ascend_spec_hm_last_error.restype = ctypes.c_char_p
    lib.ascend_spec_hm_counters.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    lib.ascend_spec_hm_counters.restype = ctypes.c_int32
    return lib


def _slots_apart(t: torch.Tensor) -> bool:
    """True for a state pool whose slots (``t[i]``) are each dense but lie ``t.stride(0)`` elements apart, as a
    layer's states in an engine's wider per-block buffer: the kernels address them with a slot stride."""
    return t.dim() >= 2 and t.shape[0] > 0 and t[0].is_contiguous() and t.stride(0) >= t[0].numel() > 0


def tensor_ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    """GM address of a contiguous CPU tensor, or of a pool with dense slots apart (nullptr for None)."""
    if t is None:
        return ctypes.c_void_p(0)
    if t.device.type != "cpu" or not (t.is_contiguous() or _slots_apart(t)):
        raise ValueError("host-model kernels take contiguous CPU tensors (or state pools of dense slots)")
    return ctypes.c_void_p(t.data_ptr())


@contextlib.contextmanager
def written_in_place(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """A contiguous tensor for a kernel to write in place of ``t``: ``t`` itself when contiguous, else a work
    copy that is copied back into ``t`` after the block (host-model kernels address GM as dense buffers)."""
    work = t if t.is_contiguous() else t.contiguous()
    yield work
    if work is not t:
        t.copy_(work)


@contextlib.contextmanager
def slots_in_place(pool: torch.Tensor) -> Iterator[torch.Tensor]:
    """A state pool for a kernel that takes a slot stride: ``pool`` itself when it is dense or its slots are
    (each slot's bytes alone become valid GM: :func:`launch`), else a dense work copy written back after."""
    if pool.is_contiguous() or _slots_apart(pool):
        yield pool
    else:
        with written_in_place(pool) as work:
            yield work


def arguments_struct(
    name: str, pointers: Sequence[str], ints: Sequence[str], floats: Sequence[str] = ()
) -> type:
    """A ctypes mirror of a kernel's arguments struct (csrc/kernels/<op>_tiling.h): pointer fields, then int64
    fields, then float fields, in declaration order. :func:`launch` checks its size against the C++ struct."""
    fields = [(f, ctypes.c_void_p) for f in pointers] + [(f, ctypes.c_int64) for f in ints]
    fields += [(f, ctypes.c_float) for f in floats]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def _check_struct(lib: ctypes.CDLL, kernel: str | Path, args: ctypes.Structure) -> None:
    stem = kernel_source(kernel).stem
    size_of = getattr(lib, f"{stem}_args_bytes")
    size_of.restype = ctypes.c_uint64
    if size_of() != ctypes.sizeof(args):
        raise RuntimeError(
            f"{type(args).__name__} has {ctypes.sizeof(args)} bytes but csrc/kernels/{stem}_tiling.h's arguments "
            f"struct has {size_of()}: the ctypes mirror no longer matches the C++ struct"
        )


def launch(
    kernel: str | Path,
    entry: str,
    args: Sequence[object] | ctypes.Structure,
    *,
    tensors: Sequence[torch.Tensor],
    soc: str | SocSpec | None = None,
    reverse_blocks: bool = False,
) -> None:
    """Call ``entry`` of the kernel library with ``args``: the op's arguments struct (passed by pointer, its size
    checked against the C++ struct) or, for tests' own kernels, a list of ctypes values.

    ``tensors`` are every tensor the kernel may touch; only their bytes are valid GM. The entry's first
    argument is always the vector core count of the SoC (the tiling splits work over it), prepended here.
    """
    spec = soc if isinstance(soc, SocSpec) else soc_spec(soc)
    lib = load_kernel(kernel)
    if isinstance(args, ctypes.Structure):
        _check_struct(lib, kernel, args)
        args = [ctypes.byref(args)]
    lib.ascend_spec_hm_configure(spec.ub_bytes, int(reverse_blocks))
    lib.ascend_spec_hm_clear_gm()
    for t in tensors:
        if not t.numel():
            continue
        if t.is_contiguous():
            lib.ascend_spec_hm_register_gm(ctypes.c_void_p(t.data_ptr()), t.numel() * t.element_size())
        else:  # a pool of dense slots apart: the bytes between slots belong to someone else
            slot_bytes, step = t[0].numel() * t.element_size(), t.stride(0) * t.element_size()
            for i in range(t.shape[0]):
                lib.ascend_spec_hm_register_gm(ctypes.c_void_p(t.data_ptr() + i * step), slot_bytes)
    try:
        fn = getattr(lib, entry)
        fn.restype = ctypes.c_int
        status = fn(ctypes.c_uint32(spec.vector_cores), *args)
    finally:
        lib.ascend_spec_hm_clear_gm()
    if status != 0:
        message = lib.ascend_spec_hm_last_error().decode(errors="replace")
        raise RuntimeError(f"AscendC host model: {kernel_source(kernel).stem}: {message}")
    if _count_scopes:
        _add_counters(lib)
