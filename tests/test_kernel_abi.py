"""The Python side of every AscendC kernel's ABI matches the C++ side: the arguments structs (ctypes mirrors of
csrc/kernels/<op>_tiling.h) and the kernel modes (csrc/kernels/kernel_modes.h)."""

from __future__ import annotations

import ctypes
import importlib
import re

import pytest
import torch

from ascend_spec.ascendc import host_model
from ascend_spec.backend import host_compiler
from ascend_spec.gdn.protocol import KernelMode
from ascend_spec.paths import CSRC_DIR

pytestmark = pytest.mark.skipif(host_compiler() is None, reason="needs a C++ compiler")

RUNNERS = {
    "prepare_block_slots": "ascend_spec.ops.prepare_block_slots.ascendc",
    "max_softmax_confidence": "ascend_spec.ops.max_softmax_confidence.ascendc",
    "allocate_verify_budget": "ascend_spec.ops.allocate_verify_budget.ascendc",
    "verify_gated_delta_rule": "ascend_spec.gdn.verify_gated_delta_rule.ascendc",
    "verify_causal_conv1d": "ascend_spec.gdn.verify_causal_conv1d.ascendc",
}


def test_every_kernel_has_a_runner_with_an_arguments_mirror() -> None:
    kernels = sorted(p.stem for p in (CSRC_DIR / "kernels").glob("*.cpp"))
    assert kernels == sorted(RUNNERS)


@pytest.mark.parametrize("kernel", sorted(RUNNERS))
def test_arguments_mirror_has_the_size_of_the_cpp_struct(kernel: str) -> None:
    runner = importlib.import_module(RUNNERS[kernel])
    size_of = getattr(host_model.load_kernel(kernel), f"{kernel}_args_bytes")
    size_of.restype = ctypes.c_uint64
    assert size_of() == ctypes.sizeof(runner.KernelArgs)
    # The struct names match too (one name per struct on both sides).
    header = (CSRC_DIR / "kernels" / f"{kernel}_tiling.h").read_text()
    assert f"struct {runner.KernelArgs.__name__} {{" in header


def test_a_drifted_mirror_is_refused_before_the_launch() -> None:
    from ascend_spec.ops.allocate_verify_budget import ascendc

    short = host_model.arguments_struct("AllocateVerifyBudgetArgs", ["survival"], ["numReqs"])
    t = torch.zeros(1)
    with pytest.raises(RuntimeError, match="ctypes mirror no longer matches"):
        host_model.launch(ascendc.KERNEL, "allocate_verify_budget_host", short(), tensors=[t])


def test_tiling_structs_live_at_global_scope() -> None:
    """CANN's launch-stub generator declares the kernels' struct types at global scope (`struct X;`)."""
    for header in (CSRC_DIR / "kernels").glob("*_tiling.h"):
        text = header.read_text()
        before_namespace = text.split("namespace ascend_spec {", 1)[0]
        structs = re.findall(r"^struct (\w+) \{", text, flags=re.M)
        assert structs and all(f"struct {name} {{" in before_namespace for name in structs), header.name


def test_kernel_modes_match_the_cpp_enum() -> None:
    text = (CSRC_DIR / "kernels" / "kernel_modes.h").read_text()
    cpp = {name: int(value) for name, value in re.findall(r"kMode(\w+) = (\d+)", text)}
    assert cpp == {
        "Verify": KernelMode.VERIFY,
        "Flush": KernelMode.FLUSH,
        "FlushAndReset": KernelMode.FLUSH_AND_RESET,
    }
