"""The host model's repeat forms (Mul with a stride-0 operand, Brcb + MulAddDst, WholeReduceSum): what the GDN
kernel's state updates rely on, against torch, and the limits the model refuses (mask, operand range)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from ascend_spec.ascendc import host_model

PROBE = Path(__file__).parent / "host_model_kernels" / "repeat_probe.cpp"


def run(
    op: int, mask: int = 64, repeats: int = 16
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(op)
    a, x, s = (
        torch.randn(16, 64, generator=gen),
        torch.randn(64, generator=gen),
        torch.randn(16, generator=gen),
    )
    out = torch.zeros(16, 64)
    ptr = host_model.tensor_ptr
    args = [
        ptr(a),
        ptr(x),
        ptr(s),
        ptr(out),
        ctypes.c_int32(op),
        ctypes.c_int32(mask),
        ctypes.c_int32(repeats),
    ]
    with host_model.count_instructions() as counts:
        host_model.launch(PROBE, "repeat_probe_host", args, tensors=[a, x, s, out])
    assert counts["vector_instructions"] == (2 if op == 1 else 1)  # one instruction per call, repeats and all
    return a, x, s, out


@pytest.mark.parametrize("mask", [64, 40])
def test_mul_with_a_stride0_operand_multiplies_every_row(mask: int) -> None:
    a, x, _, out = run(0, mask)
    want = a.clone()
    want[:, :mask] = a[:, :mask] * x[:mask]
    assert torch.equal(out, want)


@pytest.mark.parametrize("mask", [64, 9])
def test_brcb_and_mul_add_dst_add_a_rank_one_update(mask: int) -> None:
    a, x, s, out = run(1, mask)
    want = a.clone()
    want[:, :mask] = s[:, None] * x[None, :mask] + a[:, :mask]
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mask", [64, 33])
def test_whole_reduce_sum_sums_each_repeat(mask: int) -> None:
    a, _, _, out = run(2, mask)
    torch.testing.assert_close(out.reshape(-1)[:16], a[:, :mask].sum(dim=1), rtol=1e-5, atol=1e-5)


def test_repeat_forms_refuse_a_mask_past_one_repeat() -> None:
    with pytest.raises(RuntimeError, match="continuous mask 65 outside 1..64"):
        run(0, mask=65)


def test_repeat_forms_refuse_repeats_past_the_operand() -> None:
    with pytest.raises(RuntimeError, match="past the tensor's"):
        run(3, repeats=17)
