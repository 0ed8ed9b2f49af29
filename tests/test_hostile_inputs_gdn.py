"""verify_gated_delta_rule / verify_causal_conv1d and their flushes on every backend against the reference, on
the inputs an engine really passes: any strided view of every input (state indices as a column of a block table,
int32 or int64), out-of-range state indices with value checks on (a ValueError naming the row) and off (padding:
nothing read, nothing written, zero outputs), ``cu_seqlens[-1] < T`` with checks off (the uncovered output rows
are zeros, never what ``out`` held), ``cu_seqlens[-1] > T`` with checks off (rows clamped to the T tokens) and
empty batches. Every buffer sits inside guard canaries
(tests/strided_layouts.py): a write outside a tensor's own elements fails the test.

The expected values are the reference's on dense copies with every out-of-range index replaced by -1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_spec.backend import BACKENDS, CHECKS_ENV
from ascend_spec.gdn import allocate_records, flush_pending, verify_gated_delta_rule
from ascend_spec.gdn.records import GDNRecords
from ascend_spec.gdn.verify_causal_conv1d import (
    ConvRecords,
    allocate_conv_records,
    flush_conv_pending,
    verify_causal_conv1d,
)
from tests.helpers import assert_close
from tests.strided_layouts import Layout, Placed, check_all, draw_layout, draw_state_pool_layout, place

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
L = 3  # record capacity per slot


@contextlib.contextmanager
def value_checks(on: bool) -> Iterator[None]:
    saved = os.environ.get(CHECKS_ENV)
    os.environ[CHECKS_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CHECKS_ENV, None)
        else:
            os.environ[CHECKS_ENV] = saved


def draw_rows(draw: st.DrawFn, num_slots: int, checks: bool, idx_dtype: torch.dtype):
    """State indices (distinct slots, -1 padding, and with checks off out-of-range values), lengths, T."""
    num_rows = draw(st.integers(0, 4))
    free = list(range(num_slots))
    out_of_range = [num_slots, num_slots + 3, -2, -9]
    if idx_dtype == torch.int64:
        out_of_range += [2**31 + 1, 2**32 + 1, -(2**33)]
    idx = []
    for _ in range(num_rows):
        kind = draw(st.sampled_from(["slot", "slot", "pad", "bad"]))
        if kind == "slot" and free:
            idx.append(free.pop(draw(st.integers(0, len(free) - 1))))
        elif kind == "bad":
            idx.append(draw(st.sampled_from(out_of_range)))
        else:
            idx.append(-1)
    lens = [draw(st.integers(0, L)) for _ in range(num_rows)]
    # Checks off only: tokens past cu_seqlens[-1] (extra > 0: zero outputs) or fewer tokens than cu_seqlens claims
    # (extra < 0: rows are clamped to the T tokens, nothing outside x or out is touched).
    extra = 0 if checks else draw(st.integers(-2, 2))
    return idx, lens, max(0, sum(lens) + extra)


def index_view(draw: st.DrawFn, values: list[int], dtype: torch.dtype, name: str) -> Placed:
    """A 1-D index tensor as a strided view (e.g. a column of a wider table) inside canaries."""
    return place(torch.tensor(values, dtype=dtype), draw_layout(draw, 1), name)


def expected_indices(idx: list[int], num_slots: int) -> torch.Tensor:
    return torch.tensor([i if 0 <= i < num_slots else -1 for i in idx], dtype=torch.int64)


def has_out_of_range(idx: list[int], num_slots: int) -> bool:
    return any(not -1 <= i < num_slots for i in idx)


# ------------------------------------------------------------------------------------------ gated delta rule


def random_gdn_records(gen: torch.Generator, num_slots: int, h: int, hv: int, dk: int, dv: int) -> GDNRecords:
    rec = allocate_records(num_slots, L, hv, dk, dv, num_k_heads=h)
    rec.k.copy_(torch.randn(rec.k.shape, generator=gen) * 0.3)
    rec.g.copy_(-torch.rand(rec.g.shape, generator=gen))
    rec.u.copy_(torch.randn(rec.u.shape, generator=gen) * 0.3)
    rec.bank.copy_(torch.randint(0, 2, (num_slots,), generator=gen, dtype=torch.int32))
    rec.num_recorded.copy_(torch.randint(0, L + 1, (num_slots,), generator=gen, dtype=torch.int32))
    return rec


def placed_records(rec: GDNRecords, draw: st.DrawFn) -> tuple[GDNRecords, list[Placed]]:
    """Records inside canaries (dense: the op requires contiguous records)."""
    parts = [place(t, draw_layout(draw, t.dim(), contiguous=True), f"records.{n}") for n, t in
             zip(("k", "g", "u", "bank", "num_recorded"), rec.tensors())]  # fmt: skip
    return GDNRecords(*(p.view for p in parts)), parts


def assert_same_gdn_records(got: GDNRecords, want: GDNRecords) -> None:
    """Bank and counts exactly; each slot's live records (its last call's tokens) to fp32 rounding."""
    assert torch.equal(got.bank, want.bank) and torch.equal(got.num_recorded, want.num_recorded)
    for s in range(want.num_slots):
        n, b = int(want.num_recorded[s]), int(want.bank[s])
        assert_close(got.k[s, b, :n], want.k[s, b, :n], atol=1e-6)
        assert_close(got.g[s, b, :n], want.g[s, b, :n], atol=1e-6)
        assert_close(got.u[s, :n], want.u[s, :n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("checks", [True, False], ids=["checks", "unchecked"])
@SETTINGS
@given(data=st.data())
def test_gated_delta_rule_any_layout_and_slot(backend, checks, data):
    draw = data.draw
    idx_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    cu_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    num_slots, h = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2]))
    hv, dk, dv = 2, 8, 16  # Dk != Dv: a swapped k/v stride shows
    idx, lens, num_tokens = draw_rows(draw, num_slots, checks, idx_dtype)
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(num_tokens, h, dk, generator=gen)
    k = torch.randn(num_tokens, h, dk, generator=gen) * 0.4
    v = torch.randn(num_tokens, hv, dv, generator=gen)
    g = -torch.rand(num_tokens, hv, generator=gen) * 2
    if num_tokens and draw(st.booleans()):  # full forgets and huge decays among the gates
        g.view(-1)[draw(st.integers(0, g.numel() - 1))] = draw(st.sampled_from([float("-inf"), -20000.0]))
    beta = torch.rand(num_tokens, hv, generator=gen)
    pool = torch.randn(num_slots, hv, dk, dv, generator=gen)
    rec = random_gdn_records(gen, num_slots, h, hv, dk, dv)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    slots = expected_indices(idx, num_slots)
    pending = [draw(st.integers(0, int(rec.num_recorded[s]))) if s >= 0 else draw(st.integers(0, 3)) for s in
               slots.tolist()]  # fmt: skip

    # The reference on dense copies, out-of-range indices as padding.
    want_pool, want_rec = pool.clone(), GDNRecords(*(t.clone() for t in rec.tensors()))
    with value_checks(num_tokens == cu[-1]):  # a mismatch passes only with checks off
        want_o = verify_gated_delta_rule(
            q, k, v, g, beta, cu_seqlens=torch.tensor(cu), state_pool=want_pool, state_indices=slots,
            records=want_rec, pending=torch.tensor(pending, dtype=torch.int32), backend="reference",
        )  # fmt: skip
    assert not bool(want_o[min(cu[-1], num_tokens) :].any()), "the reference left uncovered rows non-zero"

    inputs = {
        name: place(t, draw_layout(draw, t.dim()), name)
        for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))
    }
    # Slots dense [HV, Dk, Dv], or vLLM's and vllm-ascend's layout: dense [HV, Dv, Dk] viewed transposed.
    pool_layout = draw_state_pool_layout(draw, value_major=True)
    pool_p = place(pool, pool_layout, "state_pool")
    got_pool = pool_p.view
    if draw(st.booleans()):  # slots apart in a wider pool: only the slot stride differs
        wide_layout = Layout(pool_layout.perm, (1,) * 4, 0, 1)
        wide = place(torch.cat((pool, torch.full_like(pool, float("nan"))), dim=1), wide_layout, "state_pool")
        pool_p, got_pool = wide, wide.view[:, :hv]
    assert got_pool.stride()[1:] in ((dk * dv, dv, 1), (dk * dv, 1, dk))
    got_rec, rec_parts = placed_records(rec, draw)
    idx_p = index_view(draw, idx, idx_dtype, "state_indices")
    cu_p = index_view(draw, cu, cu_dtype, "cu_seqlens")
    pend_p = index_view(draw, pending, torch.int32, "pending")
    out_p = place(torch.full((num_tokens, hv, dv), float("nan")), None, "out")
    call = dict(
        cu_seqlens=cu_p.view, state_pool=got_pool, state_indices=idx_p.view, records=got_rec,
        pending=pend_p.view, backend=backend, out=out_p.view,
    )  # fmt: skip
    tensors = [inputs[n].view for n in ("q", "k", "v", "g", "beta")]
    everything = [*inputs.values(), pool_p, *rec_parts, idx_p, cu_p, pend_p, out_p]
    with value_checks(checks):
        if checks and has_out_of_range(idx, num_slots):
            bad = next(i for i, s in enumerate(idx) if not -1 <= s < num_slots)
            with pytest.raises(ValueError, match=rf"state_indices\[{bad}\] = {idx[bad]} is out of range"):
                verify_gated_delta_rule(*tensors, **call)
            check_all(*everything)
            return
        verify_gated_delta_rule(*tensors, **call)
    check_all(*everything)
    assert_close(out_p.view, want_o, rtol=1e-5, atol=1e-5)
    assert_close(got_pool, want_pool, rtol=1e-5, atol=1e-5)
    assert_same_gdn_records(got_rec, want_rec)
    assert pend_p.view.tolist() == pending, "verify must not modify pending"

    # Then a flush of the same rows (strided pending, reset on the reference's schedule).
    flush_pending_values = [
        draw(st.integers(0, int(want_rec.num_recorded[s]))) if s >= 0 else 0 for s in slots.tolist()
    ]
    want_pend = torch.tensor(flush_pending_values, dtype=torch.int32)
    flush_pending(want_pool, slots, want_rec, want_pend, backend="reference")
    fpend_p = index_view(draw, flush_pending_values, torch.int32, "pending (flush)")
    with value_checks(checks):
        flush_pending(got_pool, idx_p.view, got_rec, fpend_p.view, backend=backend)
    check_all(*everything, fpend_p)
    assert_close(got_pool, want_pool, rtol=1e-5, atol=1e-5)
    assert_same_gdn_records(got_rec, want_rec)
    assert fpend_p.view.tolist() == [0] * len(idx)


# --------------------------------------------------------------------------------------------------- conv1d


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("checks", [True, False], ids=["checks", "unchecked"])
@SETTINGS
@given(data=st.data())
def test_causal_conv1d_any_layout_and_slot(backend, checks, data):
    draw = data.draw
    idx_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    cu_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    num_slots, channels, width = (
        draw(st.integers(1, 4)),
        draw(st.sampled_from([5, 16])),
        draw(st.integers(2, 4)),
    )
    idx, lens, num_tokens = draw_rows(draw, num_slots, checks, idx_dtype)
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x = torch.randn(num_tokens, channels, generator=gen)
    weight = torch.randn(channels, width, generator=gen) / width
    bias = torch.randn(channels, generator=gen) * 0.1 if draw(st.booleans()) else None
    pool = torch.randn(num_slots, channels, width - 1, generator=gen)
    rec = allocate_conv_records(num_slots, L, channels, width, dtype=torch.float32)
    rec.x.copy_(torch.randn(rec.x.shape, generator=gen))
    rec.num_recorded.copy_(torch.randint(0, L + 1, (num_slots,), generator=gen, dtype=torch.int32))
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    slots = expected_indices(idx, num_slots)
    pending = [draw(st.integers(0, int(rec.num_recorded[s]))) if s >= 0 else draw(st.integers(0, 3)) for s in
               slots.tolist()]  # fmt: skip
    silu = draw(st.booleans())
    activation = "silu" if silu else None

    want_pool = pool.clone()
    want_rec = ConvRecords(rec.x.clone(), rec.num_recorded.clone(), width)
    with value_checks(num_tokens == cu[-1]):  # a mismatch passes only with checks off
        want_y = verify_causal_conv1d(
            x, weight, bias, cu_seqlens=torch.tensor(cu), conv_state_pool=want_pool, state_indices=slots,
            records=want_rec, pending=torch.tensor(pending, dtype=torch.int32), activation=activation,
            backend="reference",
        )  # fmt: skip
    assert not bool(want_y[min(cu[-1], num_tokens) :].any()), "the reference left uncovered rows non-zero"

    x_p = place(x, draw_layout(draw, 2), "x")
    w_p = place(weight, draw_layout(draw, 2), "weight")
    b_p = None if bias is None else place(bias, draw_layout(draw, 1), "bias")
    pool_p = place(pool, draw_layout(draw, 3), "conv_state_pool")
    rx_p = place(rec.x, draw_layout(draw, 3, contiguous=True), "records.x")
    rn_p = place(rec.num_recorded, draw_layout(draw, 1, contiguous=True), "records.num_recorded")
    got_rec = ConvRecords(rx_p.view, rn_p.view, width)
    idx_p = index_view(draw, idx, idx_dtype, "state_indices")
    cu_p = index_view(draw, cu, cu_dtype, "cu_seqlens")
    pend_p = index_view(draw, pending, torch.int32, "pending")
    out_p = place(torch.full((num_tokens, channels), float("nan")), None, "out")
    everything = [p for p in (x_p, w_p, b_p, pool_p, rx_p, rn_p, idx_p, cu_p, pend_p, out_p) if p is not None]
    call = dict(
        cu_seqlens=cu_p.view, conv_state_pool=pool_p.view, state_indices=idx_p.view, records=got_rec,
        pending=pend_p.view, activation=activation, backend=backend, out=out_p.view,
    )  # fmt: skip
    with value_checks(checks):
        if checks and has_out_of_range(idx, num_slots):
            bad = next(i for i, s in enumerate(idx) if not -1 <= s < num_slots)
            with pytest.raises(ValueError, match=rf"state_indices\[{bad}\] = {idx[bad]} is out of range"):
                verify_causal_conv1d(x_p.view, w_p.view, None if b_p is None else b_p.view, **call)
            check_all(*everything)
            return
        verify_causal_conv1d(x_p.view, w_p.view, None if b_p is None else b_p.view, **call)
    check_all(*everything)
    assert_close(out_p.view, want_y, rtol=1e-5, atol=1e-5)
    assert_close(pool_p.view, want_pool)
    assert torch.equal(got_rec.num_recorded, want_rec.num_recorded)
    for s in range(num_slots):
        n = int(want_rec.num_recorded[s])
        assert_close(got_rec.x[s, :n], want_rec.x[s, :n])
    assert pend_p.view.tolist() == pending, "verify must not modify pending"

    reset = draw(st.booleans())
    flush_values = [
        draw(st.integers(0, int(want_rec.num_recorded[s]))) if s >= 0 else 0 for s in slots.tolist()
    ]
    want_pend = torch.tensor(flush_values, dtype=torch.int32)
    flush_conv_pending(want_pool, slots, want_rec, want_pend, reset_pending=reset, backend="reference")
    fpend_p = index_view(draw, flush_values, torch.int32, "pending (flush)")
    with value_checks(checks):
        flush_conv_pending(
            pool_p.view, idx_p.view, got_rec, fpend_p.view, reset_pending=reset, backend=backend
        )
    check_all(*everything, fpend_p)
    assert_close(pool_p.view, want_pool)
    assert torch.equal(got_rec.num_recorded, want_rec.num_recorded)
    assert fpend_p.view.tolist() == want_pend.tolist()


# ------------------------------------------------------------------------------------ replay numerics (g <= 0)

GATES = st.one_of(
    st.sampled_from([float("-inf"), -20000.0, -88.0, -30.0, -1e-30, 0.0, -0.0]),
    st.floats(-5.0, 0.0, allow_nan=False),
)


def f64_replay(
    state: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor, n: int
) -> torch.Tensor:
    """The recurrence itself in float64: ``S <- exp(g_t) S + k_t u_t^T`` token by token (GQA by repeat)."""
    rep = u.shape[1] // k.shape[1]
    s = state.double()
    for t in range(n):
        k_t = k[t].double().repeat_interleave(rep, dim=0)
        s = s * torch.exp(g[t].double())[:, None, None] + k_t[:, :, None] * u[t].double()[:, None, :]
    return s


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_flush_replay_is_stable_for_every_gate(backend, data):
    """Full forgets (g = -inf) and huge decays (g = -20000) replay within float64-oracle tolerance, finite."""
    draw = data.draw
    num_slots, h, hv, dk, dv = 2, 1, 2, 8, 8
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    rec = allocate_records(num_slots, L, hv, dk, dv, num_k_heads=h)
    rec.k.copy_(torch.randn(rec.k.shape, generator=gen))
    rec.u.copy_(torch.randn(rec.u.shape, generator=gen))
    gates = torch.tensor([draw(GATES) for _ in range(rec.g.numel())]).view(rec.g.shape)
    rec.g.copy_(gates)
    rec.bank.copy_(torch.tensor([draw(st.integers(0, 1)) for _ in range(num_slots)], dtype=torch.int32))
    rec.num_recorded.fill_(L)
    pool = torch.randn(num_slots, hv, dk, dv, generator=gen)
    pending = [draw(st.integers(0, L)) for _ in range(num_slots)]
    want = [
        f64_replay(pool[s], rec.k[s, int(rec.bank[s])], rec.g[s, int(rec.bank[s])], rec.u[s], pending[s])
        for s in range(num_slots)
    ]
    flush_pending(
        pool, torch.arange(num_slots), rec, torch.tensor(pending, dtype=torch.int32), backend=backend
    )
    assert bool(torch.isfinite(pool).all())
    for s in range(num_slots):
        scale = float(want[s].abs().max()) or 1.0
        assert_close(pool[s], want[s], atol=2e-6 * scale)
