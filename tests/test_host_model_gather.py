"""The host model's Gather (count form, byte offsets): what the conv kernel's state transposes rely on."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from ascend_spec.ascendc import host_model

PROBE = Path(__file__).parent / "host_model_kernels" / "gather_probe.cpp"
N = 64


def run(offsets: torch.Tensor, mode: int = 0, base: int = 0) -> torch.Tensor:
    x = torch.arange(N, dtype=torch.float32) * 0.5
    off = offsets.to(torch.int64).to(torch.int32).contiguous()  # uint32 bits; values < 2**31
    y = torch.full((N,), float("nan"))
    ptr = host_model.tensor_ptr
    args = [ptr(x), ptr(off), ptr(y), ctypes.c_int32(mode), ctypes.c_uint32(base)]
    host_model.launch(PROBE, "gather_probe_host", args, tensors=[x, off, y])
    return x, y


def test_gather_transposes_with_byte_offsets():
    # A [8, 8] -> [8, 8] transpose: y[k * 8 + c] = x[c * 8 + k].
    k, c = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    x, y = run(((c * 8 + k) * 4).reshape(-1))
    assert torch.equal(y, x.view(8, 8).T.reshape(-1))


def test_gather_base_address_shifts_every_offset():
    x, y = run(torch.zeros(N, dtype=torch.int64), base=12)
    assert torch.equal(y, torch.full((N,), float(x[3])))


@pytest.mark.parametrize(("mode", "message"), [(1, "not aligned to the element size"), (2, "Gather source")])
def test_gather_rejects_bad_offsets(mode, message):
    with pytest.raises(RuntimeError, match=message):
        run(torch.arange(N) * 4, mode=mode)
