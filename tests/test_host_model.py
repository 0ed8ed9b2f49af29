"""The AscendC host model runs correct kernels exactly and rejects what the chip would reject."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from ascend_spec.ascendc import host_model

PROBE = Path(__file__).parent / "host_model_kernels" / "rules_probe.cpp"
BLOCKS, N = 4, 512


def run_probe(mode: int, *, extra_ub: int = 0, soc=None, reverse: bool = False):
    x = torch.linspace(-3, 1, N, dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    stats = torch.zeros(2 * BLOCKS, dtype=torch.float32)
    ptr = host_model.tensor_ptr
    args = [
        ctypes.c_uint32(BLOCKS), ptr(x), ptr(y), ptr(stats), ctypes.c_int32(N), ctypes.c_int32(mode),
        ctypes.c_uint32(extra_ub),
    ]  # fmt: skip
    host_model.launch(PROBE, "rules_probe_host", args, tensors=[x, y, stats], soc=soc, reverse_blocks=reverse)
    return x, y, stats


@pytest.mark.parametrize("reverse", [False, True])
def test_correct_kernel_matches_torch(reverse: bool) -> None:
    x, y, stats = run_probe(0, reverse=reverse)
    expected = torch.exp(x + 1)
    torch.testing.assert_close(y, expected)
    per_block = expected.view(BLOCKS, -1)
    torch.testing.assert_close(stats.view(BLOCKS, 2)[:, 0], per_block.max(1).values)
    torch.testing.assert_close(stats.view(BLOCKS, 2)[:, 1], per_block.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "mode, message",
    [
        (1, "not a multiple of 32"),
        (2, "not 32-byte aligned"),
        (3, "DeQue on an empty TQue"),
        (4, "still allocated or queued"),
        (5, "outside every tensor"),
        (6, "SetFlag without a matching WaitFlag"),
        (7, "past the buffer size .* given to SetGlobalBuffer"),
    ],
)
def test_rule_violations_are_reported(mode: int, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        run_probe(mode)


def test_a_pool_of_slots_apart_registers_each_slot_alone() -> None:
    """``slots_in_place`` keeps a pool whose dense slots lie apart in a wider buffer (an engine's per-block
    buffer); only the slots' bytes are valid GM, so a kernel that writes it as one dense range (the probe's y,
    N floats from the first slot) reaches the bytes between slots and is refused before it writes them."""
    x = torch.linspace(-3, 1, N, dtype=torch.float32)
    big = torch.full((BLOCKS, 2, N // BLOCKS), float("nan"))
    stats = torch.zeros(2 * BLOCKS, dtype=torch.float32)
    with host_model.slots_in_place(big[:, 1]) as y:
        assert y.data_ptr() == big[:, 1].data_ptr() and not y.is_contiguous()  # in place, not a copy
        ptr = host_model.tensor_ptr
        args = [ctypes.c_uint32(BLOCKS), ptr(x), ptr(y), ptr(stats), ctypes.c_int32(N), ctypes.c_int32(0),
                ctypes.c_uint32(0)]  # fmt: skip
        with pytest.raises(RuntimeError, match="outside every tensor"):
            host_model.launch(PROBE, "rules_probe_host", args, tensors=[x, y, stats])
    assert big[:, 0].isnan().all()
    with host_model.slots_in_place(big[:, :, ::2]) as work:  # slots not dense: a dense work copy
        assert work.is_contiguous() and work.data_ptr() != big.data_ptr()


def test_unified_buffer_capacity_is_per_soc() -> None:
    used = 2 * 256 + 256 + 256 + 64  # the probe's own queues and buffers
    spec = host_model.soc_spec("ascend910b2")
    run_probe(0, extra_ub=spec.ub_bytes - used)  # exactly fills the 192 KiB
    with pytest.raises(RuntimeError, match="Unified Buffer overflow"):
        run_probe(0, extra_ub=spec.ub_bytes - used + 32)
    bigger = host_model.SocSpec("test-256k", 256 * 1024, 8)
    run_probe(0, extra_ub=spec.ub_bytes, soc=bigger)


def test_unknown_soc_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown SoC 'ascend999'"):
        host_model.soc_spec("ascend999")


def test_build_error_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "broken_kernel.cpp"
    bad.write_text('#include "kernel_operator.h"\nthis is not C++;\n')
    with pytest.raises(RuntimeError, match="host-model build of broken_kernel.cpp failed"):
        host_model.load_kernel(bad)
