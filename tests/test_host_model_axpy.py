"""The host model's Axpy (count form, dst = src * scalar + dst): what the GDN kernel's row updates rely on."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from ascend_spec.ascendc import host_model

PROBE = Path(__file__).parent / "host_model_kernels" / "axpy_probe.cpp"


def run(a: float, count: int, mode: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.arange(64, dtype=torch.float32) * 0.25 - 3
    y0 = torch.linspace(-1, 1, 64)
    y = y0.clone()
    ptr = host_model.tensor_ptr
    args = [ptr(x), ptr(y), ctypes.c_float(a), ctypes.c_int32(count), ctypes.c_int32(mode)]
    host_model.launch(PROBE, "axpy_probe_host", args, tensors=[x, y])
    return x, y0, y


@pytest.mark.parametrize("count", [64, 40, 1])
def test_axpy_accumulates_the_first_count_elements(count):
    x, y0, y = run(-1.5, count)
    want = y0.clone()
    want[:count] = x[:count] * -1.5 + y0[:count]
    assert torch.equal(y, want)


def test_axpy_rejects_unaligned_operand():
    with pytest.raises(RuntimeError, match="not 32-byte aligned"):
        run(2.0, 8, mode=1)
