"""Backend selection shared by every public op.

Each op exists three times: ``reference`` (vectorised PyTorch, the oracle), ``triton`` (GPUs, NPUs through
triton-ascend, CPU tensors under ``TRITON_INTERPRET=1``) and ``ascendc`` (the AscendC kernels in ``csrc/``: the
compiled extension on NPU tensors, the host model of the AscendC API on CPU tensors). A fourth, ``cpu``, is the
CPU engine's fast path: native C++ kernels (``csrc/cpu/``, compiled with the host compiler at first use) for the
ops an engine runs per layer and step (:data:`NATIVE_CPU_OPS`: the GDN verify pair, ~200 PyTorch operator calls
per layer as the reference, the drafter's ``prepare_block_slots``, ~40, and dynamic verification's
``max_softmax_confidence``); for every other op the ``cpu`` entry of :data:`DISPATCH` is its reference.

``auto`` picks by device: NPU -> ascendc when the extension loaded, else triton; CUDA -> triton; CPU -> cpu for
:data:`NATIVE_CPU_OPS` when a C++ compiler is on PATH, else reference. ``ASCEND_SPEC_BACKEND`` overrides ``auto`` (never an explicit choice). An explicit backend that
cannot run here raises :class:`BackendUnavailableError` saying what is missing.

Dispatch: :data:`DISPATCH` holds one table per op (backend name -> ``module:function``); every op folder
(``ascend_spec/<package>/<op>/``) has ``reference.py``, ``triton.py`` and ``ascendc.py``, each defining the same
function that takes the op's normalised-arguments object (and its outputs). :func:`dispatch` resolves the
backend and imports the module on first use, so ``TRITON_INTERPRET`` is read only when a Triton kernel is needed.

Checks that must read device values (and so would synchronise the host with the device, breaking graph
capture) run only when :func:`value_checks_enabled` says so: ``ASCEND_SPEC_CHECKS=1``/``0`` forces them on/off; by
default they are on for CPU tensors and off elsewhere.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import Any, Literal

import torch

Backend = Literal["reference", "triton", "ascendc", "cpu"]
BACKENDS: tuple[str, ...] = ("reference", "triton", "ascendc", "cpu")
#: Public ops whose ``cpu`` backend is a native kernel of csrc/cpu/ (the others' ``cpu`` entry is their reference).
NATIVE_CPU_OPS = frozenset(
    {
        "prepare_block_slots",
        "max_softmax_confidence",
        "max_softmax_partials",
        "verify_gated_delta_rule",
        "flush_pending",
        "verify_causal_conv1d",
        "flush_conv_pending",
    }
)
BACKEND_ENV = "ASCEND_SPEC_BACKEND"
CHECKS_ENV = "ASCEND_SPEC_CHECKS"


def _per_backend(package: str, function: str, *, native_cpu: bool = False) -> dict[str, str]:
    """``backend -> module:function`` of one op folder; ``cpu`` is ``cpu.py`` with a native kernel, else the
    reference."""
    table = {b: f"{package}.{b}:{function}" for b in BACKENDS}
    if not native_cpu:
        table["cpu"] = table["reference"]
    return table


# op -> {backend -> "module:function"}. Each function takes the op's arguments object (and its outputs).
DISPATCH: dict[str, dict[str, str]] = {
    "prepare_block_slots": _per_backend(
        "ascend_spec.ops.prepare_block_slots", "prepare_block_slots", native_cpu=True
    ),
    "max_softmax_partials": _per_backend(
        "ascend_spec.ops.max_softmax_confidence", "max_softmax_partials", native_cpu=True
    ),
    "allocate_verify_budget": _per_backend(
        "ascend_spec.ops.allocate_verify_budget", "allocate_verify_budget"
    ),
    "verify_gated_delta_rule": _per_backend(
        "ascend_spec.gdn.verify_gated_delta_rule", "verify_gated_delta_rule", native_cpu=True
    ),
    "verify_causal_conv1d": _per_backend(
        "ascend_spec.gdn.verify_causal_conv1d", "verify_causal_conv1d", native_cpu=True
    ),
}


def own_backends(op: str) -> tuple[str, ...]:
    """The backends of ``op`` with an implementation of their own (``cpu`` left out where its entry is the
    reference): what the tests compare, so no test runs the reference against itself."""
    table = DISPATCH[op]
    return tuple(b for b in BACKENDS if b == "reference" or table[b] != table["reference"])


class BackendUnavailableError(RuntimeError):
    """An explicitly requested backend cannot run on this machine or on these tensors."""


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_interpret_enabled() -> bool:
    """True when Triton kernels run in the interpreter (the only way they run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=1)
def ascendc_extension_loaded() -> bool:
    """True when the compiled CANN extension registered ``torch.ops._C_ascend_spec``."""
    try:
        # torch_npu registers the "npu" (PrivateUse1) device the extension's kernels bind to: load it first.
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    try:
        from ascend_spec import _C_ascend_spec  # noqa: F401  (built by setup.py only where CANN exists)
    except ImportError:
        return False
    return hasattr(torch.ops, "_C_ascend_spec")


def host_compiler() -> str | None:
    """The C++ compiler the AscendC host model and the native CPU kernels use (``CXX`` or g++/clang++ on PATH)."""
    return _find_compiler(os.environ.get("CXX"))


@functools.lru_cache(maxsize=8)
def _find_compiler(cxx: str | None) -> str | None:
    """PATH lookups cost ~50 us: done once per ``CXX`` value (the cpu backend is resolved every call)."""
    if cxx and shutil.which(cxx):
        return cxx
    for name in ("g++", "clang++"):
        if shutil.which(name):
            return name
    return None


def resolve_backend(backend: str, device: torch.device, *, op: str) -> Backend:
    """Return the backend that runs ``op`` on ``device``, or raise saying why the requested one cannot."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be one of 'auto', {', '.join(map(repr, BACKENDS))}; got {backend!r}")
    if backend == "auto":
        env = os.environ.get(BACKEND_ENV, "").strip()
        if env and env != "auto":
            if env not in BACKENDS:
                raise ValueError(f"{BACKEND_ENV} must be one of {', '.join(BACKENDS)} or auto; got {env!r}")
            backend = env
        else:
            backend = _auto_backend(device, op)
    _require_runnable(backend, device, op=op)
    return backend  # type: ignore[return-value]


def implementation(op: str, backend: str) -> Callable[..., Any]:
    """The function that runs ``op`` on ``backend`` (imported on first use)."""
    module, _, function = DISPATCH[op][backend].partition(":")
    return getattr(importlib.import_module(module), function)


def dispatch(op: str, backend: str, device: torch.device, *, caller: str | None = None) -> Callable[..., Any]:
    """Resolve ``backend`` for ``device`` and return the implementation of ``op`` there.

    ``caller`` names the public op in errors when it differs from the table entry (``max_softmax_confidence``
    runs ``max_softmax_partials``, ``flush_pending`` runs the verify kernel pair in its flush mode).
    """
    return implementation(op, resolve_backend(backend, device, op=caller or op))


def _auto_backend(device: torch.device, op: str) -> str:
    if device.type == "npu":
        return "ascendc" if ascendc_extension_loaded() else "triton"
    if device.type == "cuda":
        return "triton"
    if device.type == "cpu" and op in NATIVE_CPU_OPS and host_compiler() is not None:
        return "cpu"
    return "reference"


def _require_runnable(backend: str, device: torch.device, *, op: str) -> None:
    where = f"{op}: backend {backend!r} on {device.type} tensors"
    if backend == "reference":
        return
    if device.type == "meta":
        raise BackendUnavailableError(
            f"{where}: meta tensors hold no data for a kernel to run on; use backend='reference' (or 'auto') "
            "to trace shapes, or the AscendC op's Meta implementation (torch.ops._C_ascend_spec) under graph capture"
        )
    if backend == "cpu":
        if device.type != "cpu":
            raise BackendUnavailableError(f"{where}: the cpu backend runs on CPU tensors")
        if op in NATIVE_CPU_OPS and host_compiler() is None:
            raise BackendUnavailableError(
                f"{where} compiles its native kernel (csrc/cpu/), which needs g++ or clang++"
            )
        return
    if backend == "triton":
        if not triton_importable():
            raise BackendUnavailableError(f"{where} needs the 'triton' package (pip install triton)")
        if device.type == "cpu" and not triton_interpret_enabled():
            raise BackendUnavailableError(
                f"{where} needs TRITON_INTERPRET=1 in the environment before the kernels are first imported"
            )
        return
    if backend == "ascendc":
        if device.type == "npu":
            if not ascendc_extension_loaded():
                raise BackendUnavailableError(
                    f"{where} needs the compiled extension ascend_spec._C_ascend_spec; build it with CANN "
                    "installed (ASCEND_HOME_PATH, SOC_VERSION set, COMPILE_CUSTOM_KERNELS=1)"
                )
            return
        if device.type == "cpu":
            if host_compiler() is None:
                raise BackendUnavailableError(
                    f"{where} uses the AscendC host model, which needs g++ or clang++"
                )
            return
        raise BackendUnavailableError(
            f"{where}: AscendC kernels run on NPU tensors or, via the host model, CPU"
        )


def value_checks_enabled(device: torch.device) -> bool:
    """Whether checks that read device values (host syncs) should run for tensors on ``device``."""
    env = os.environ.get(CHECKS_ENV, "").strip()
    if env in ("0", "1"):
        return env == "1"
    if env:
        raise ValueError(f"{CHECKS_ENV} must be 0 or 1; got {env!r}")
    return device.type == "cpu"
