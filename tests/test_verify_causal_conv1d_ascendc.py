"""The AscendC conv kernel under the host model: several channel tiles and units per core, blocks in reverse
order, every SoC the host model knows; always against the reference (states and records bit-exact)."""

from __future__ import annotations

import pytest
import torch

from ascend_spec.ascendc import host_model
from ascend_spec.gdn.verify_causal_conv1d import (
    allocate_conv_records,
    flush_conv_pending,
    verify_causal_conv1d,
)
from ascend_spec.gdn.verify_causal_conv1d import ascendc as _ascendc_conv1d


def run_pair(*, channels, width, dtype, rec_dtype, rows_per_step, seed=0, layout="channel", apart=False):
    """Drive reference and ascendc side by side over a few steps; compare outputs, pools, records, pending.

    ``layout``: the AscendC pool's slots stored ``[C, W-1]`` ("channel") or ``[W-1, C]`` viewed transposed
    ("token", vLLM's default conv layout); ``apart``: its slots lie in a wider buffer between NaN slots of
    someone else's, which must stay untouched (the host model also refuses any access to their bytes)."""
    gen = torch.Generator().manual_seed(seed)
    S, L = 8, 20
    weight = torch.randn(channels, width, generator=gen) / width
    bias = torch.randn(channels, generator=gen) * 0.1
    inner = (channels, width - 1) if layout == "channel" else (width - 1, channels)
    big = torch.full((S, 2 if apart else 1, *inner), float("nan"), dtype=dtype)
    slots = big[:, -1]
    pools = [torch.randn(S, channels, width - 1, generator=gen).to(dtype)]
    pools.append(slots if layout == "channel" else slots.transpose(1, 2))
    assert _ascendc_conv1d.slot_layout(pools[1]) == layout
    pools[1].copy_(pools[0])
    recs = [allocate_conv_records(S, L, channels, width, dtype=rec_dtype) for _ in range(2)]
    accepted = [0] * S
    for step, rows in enumerate(rows_per_step):
        lens = [(3 * s + 5 * step) % (L + 1) if s >= 0 else 2 for s in rows]
        cu = torch.tensor([0, *lens], dtype=torch.int32).cumsum(0).to(torch.int32)
        x = torch.randn(int(cu[-1]), channels, generator=gen).to(dtype)
        idx = torch.tensor(rows, dtype=torch.int32)
        ys = []
        for backend, pool, rec in (("reference", pools[0], recs[0]), ("ascendc", pools[1], recs[1])):
            pending = torch.tensor([accepted[s] if s >= 0 else 0 for s in rows], dtype=torch.int32)
            ys.append(
                verify_causal_conv1d(
                    x,
                    weight,
                    bias,
                    cu_seqlens=cu,
                    conv_state_pool=pool,
                    state_indices=idx,
                    records=rec,
                    pending=pending,
                    backend=backend,
                )  # fmt: skip
            )
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(ys[1], ys[0], rtol=tol, atol=tol)
        assert torch.equal(pools[1], pools[0])
        assert torch.equal(recs[1].x, recs[0].x) and torch.equal(recs[1].num_recorded, recs[0].num_recorded)
        for s, n in zip(rows, lens):
            if s >= 0 and n > 0:
                accepted[s] = 1 + (s + step) % n
    idx = torch.arange(S, dtype=torch.int32)
    pend = []
    for backend, pool, rec in (("reference", pools[0], recs[0]), ("ascendc", pools[1], recs[1])):
        pending = torch.tensor(accepted, dtype=torch.int32)
        flush_conv_pending(pool, idx, rec, pending, backend=backend)
        pend.append(pending)
    assert torch.equal(pools[1], pools[0]) and torch.equal(pend[1], pend[0])
    assert torch.equal(recs[1].num_recorded, recs[0].num_recorded)
    if apart:
        assert big[:, 0].isnan().all(), "a slot the launch does not own was written"


@pytest.mark.parametrize(
    ("layout", "apart", "dtype"),
    [
        ("token", False, torch.float32),
        ("token", True, torch.bfloat16),
        ("channel", True, torch.float32),
    ],
)
def test_slot_layouts_in_place_and_slots_apart(layout, apart, dtype):
    """vLLM's default conv layout (token-major slots, vllm-ascend's) in place, and slots a wider stride apart in
    either layout: the kernel reads and writes each owned slot through the pool's strides (a 16-bit pool through
    the staging casts), bit-exact with the reference."""
    steps = [[1, 0, -1, 5], [0, 1, 3], [2, 3, 1, 0, 7]]
    run_pair(channels=40, width=4, dtype=dtype, rec_dtype=torch.float32, rows_per_step=steps, layout=layout,
             apart=apart)  # fmt: skip


@pytest.mark.parametrize("reverse", [False, True])
def test_several_tiles_and_units_per_core(monkeypatch, reverse):
    # 1100 channels at W = 6 need two channel tiles (the tiling shrinks them to fit 192 KiB of UB); the
    # (tile, row) units are spread tile-major over the blocks.
    monkeypatch.setattr(_ascendc_conv1d, "REVERSE_BLOCKS", reverse)
    assert _ascendc_conv1d.tile_channels(1100, 6, torch.bfloat16, torch.float32, torch.bfloat16) < 1100
    steps = [[3, -1, 0, 5, 7, 1, 2], [2, 0, 3], [7, 6, 5, 4, 3, 2, 1, 0]]
    run_pair(channels=1100, width=6, dtype=torch.bfloat16, rec_dtype=torch.float32, rows_per_step=steps)


@pytest.mark.parametrize("soc", sorted(host_model.SOCS))
def test_every_soc(monkeypatch, soc):
    monkeypatch.setattr(_ascendc_conv1d, "SOC", soc)
    run_pair(
        channels=40, width=4, dtype=torch.float32, rec_dtype=torch.float32, rows_per_step=[[1, 0], [0, 1]]
    )


def test_many_rows_over_few_cores(monkeypatch):
    """More units than vector cores: each core walks several (tile, row) units in order."""
    monkeypatch.setattr(_ascendc_conv1d, "SOC", "ascend910b4")  # 40 vector cores
    rows = list(range(8))
    steps = [rows, rows[::-1], rows[2:] + [-1] * 40]
    run_pair(channels=24, width=3, dtype=torch.float16, rec_dtype=torch.float16, rows_per_step=steps)
