"""allocate_verify_budget, max_softmax_confidence and prepare_block_slots on every backend against the reference
(and float64), on the inputs an engine really passes: any strided view of every input (capacities and block
tables as column views, int32 or int64), out-of-contract values with value checks on (a ValueError naming the
entry) and off (clamped identically on every backend), empty batches, every temperature the op accepts, meta
tensors. Every buffer sits inside guard canaries (tests/strided_layouts.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_spec.backend import BACKENDS, CHECKS_ENV, BackendUnavailableError, own_backends
from ascend_spec.ops import (
    allocate_verify_budget,
    max_softmax_confidence,
    max_softmax_partials,
    prepare_block_slots,
)
from ascend_spec.ops.allocate_verify_budget import VerifyAllocation, verify_allocation_layout
from ascend_spec.ops.max_softmax_confidence import MAX_TEMPERATURE, MIN_TEMPERATURE, MaxSoftmaxPartials
from tests.helpers import assert_close
from tests.strided_layouts import check_all, draw_layout, place

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
SMALL_SETTINGS = settings(SETTINGS, max_examples=8)


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


# ------------------------------------------------------------------------------------- allocate_verify_budget


@pytest.mark.parametrize("backend", own_backends("allocate_verify_budget"))
@pytest.mark.parametrize("checks", [True, False], ids=["checks", "unchecked"])
@pytest.mark.parametrize("cap_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("mode", ["none", "in range", "wild"])
@SMALL_SETTINGS
@given(data=st.data())
def test_verify_budget_any_layout_and_capacity(backend, checks, cap_dtype, mode, data):
    draw = data.draw
    b, k = draw(st.integers(1 if mode == "wild" else 0, 5)), draw(st.integers(1, 5))
    levels = [1.0, 0.9, 0.5, 0.5, 0.25, 0.0]  # few distinct values: ties across requests and positions
    conf = torch.tensor([[draw(st.sampled_from(levels)) for _ in range(k)] for _ in range(b)]).view(b, k)
    survival = torch.cumprod(conf, dim=1).to(draw(st.sampled_from([torch.float32, torch.float16])))
    wild = (
        [-1, -(2**31) - 5, k + 1, 2**31 + 7, 2**40]
        if cap_dtype == torch.int64
        else [-1, -9, k + 1, 2**31 - 1]
    )
    caps = None
    if mode != "none":
        caps = [draw(st.integers(0, k)) for _ in range(b)]
        if mode == "wild":  # out of [0, K], past int32 for int64: a ValueError, or clamped with checks off
            for i in draw(st.lists(st.integers(0, b - 1), min_size=1, max_size=b)):
                caps[i] = draw(st.sampled_from(wild))
    max_budget = draw(st.integers(0, b * k + 2))
    budget_value = draw(st.integers(0, max_budget))
    budget = torch.tensor(budget_value, dtype=cap_dtype) if draw(st.booleans()) else budget_value
    if mode == "wild" and not checks and isinstance(budget, torch.Tensor) and draw(st.booleans()):
        raw = draw(
            st.sampled_from(
                [-3, max_budget + 4] + ([2**31 + 3, -(2**40)] if cap_dtype == torch.int64 else [])
            )
        )
        budget = torch.tensor(raw, dtype=cap_dtype)  # a device budget out of [0, max_budget]: clamped
        budget_value = min(max(raw, 0), max_budget)

    clean = None if caps is None else torch.tensor(caps, dtype=torch.int64).clamp(0, k)
    with value_checks(True):
        want = allocate_verify_budget(
            survival.clone(), budget_value, capacities=clean, max_budget=max_budget, backend="reference"
        )

    surv_p = place(survival, draw_layout(draw, 2), "survival")
    caps_p = (
        None
        if caps is None
        else place(torch.tensor(caps, dtype=cap_dtype), draw_layout(draw, 1), "capacities")
    )
    layout = verify_allocation_layout(b, k, max_budget)
    outs = {f: place(torch.full(shape, -99, dtype=dt), None, f"out.{f}") for f, (shape, dt) in layout.items()}
    out = VerifyAllocation(**{f: p.view for f, p in outs.items()})
    placed = [p for p in (surv_p, caps_p, *outs.values()) if p is not None]
    with value_checks(checks):
        call = dict(
            capacities=None if caps_p is None else caps_p.view, max_budget=max_budget, backend=backend
        )
        bad = [i for i, c in enumerate(caps or []) if not 0 <= c <= k]
        if checks and bad:
            with pytest.raises(ValueError, match=rf"capacities\[{bad[0]}\] = {caps[bad[0]]}"):
                allocate_verify_budget(surv_p.view, budget, out=out, **call)
            check_all(*placed)
            return
        got = allocate_verify_budget(surv_p.view, budget, out=out, **call)
    check_all(*placed)
    assert got is out
    for field in layout:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_verify_budget_accepts_an_empty_batch(backend):
    got = allocate_verify_budget(torch.ones(0, 4), 3, backend=backend)
    assert got.num_drafts.shape == (0,) and got.query_lens.shape == (0,) and got.draft_index.shape == (0,)
    assert got.query_start_loc.tolist() == [0]


# ------------------------------------------------------------------------------------- max_softmax_confidence

TEMPERATURES = st.one_of(
    st.sampled_from([MIN_TEMPERATURE, MAX_TEMPERATURE, 1e-30, 1e30, 1e-3, 1.0, 7.5, 1e6]),
    st.floats(1e-2, 1e2),
)


def f64_confidence(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    x = logits.double()
    m = x.amax(dim=-1, keepdim=True)
    return 1.0 / torch.exp((x - m) / temperature).sum(dim=-1)


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data())
def test_max_softmax_any_layout_and_temperature(backend, data):
    draw = data.draw
    n, v = draw(st.integers(0, 4)), draw(st.integers(1, 70))
    temperature = draw(TEMPERATURES)
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    logits = (torch.randn(n, v, generator=gen) * draw(st.sampled_from([0.01, 1.0, 30.0]))).to(dtype)
    want = f64_confidence(logits, temperature)
    x_p = place(logits, draw_layout(draw, 2), "logits")
    out_p = place(torch.full((n,), float("nan")), None, "out")
    got = max_softmax_confidence(x_p.view, temperature=temperature, backend=backend, out=out_p.view)
    parts = {f: place(torch.full((n,), float("nan")), None, f"out.{f}") for f in ("row_max", "row_sumexp")}
    m, s = max_softmax_partials(
        x_p.view, temperature=temperature, backend=backend,
        out=MaxSoftmaxPartials(parts["row_max"].view, parts["row_sumexp"].view),
    )  # fmt: skip
    check_all(x_p, out_p, *parts.values())
    assert got is out_p.view
    assert_close(got, want, rtol=2e-6, atol=1e-7)
    assert_close(m, logits.double().amax(dim=-1) if n else torch.zeros(0))
    assert_close(1.0 / s, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize(
    "temperature", [MIN_TEMPERATURE / 2, 2.9e-39, 1e-45, MAX_TEMPERATURE * 2, 7e44, 3e38, float("inf"), 0.0]
)
def test_temperatures_outside_the_computable_range_are_refused(backend, temperature):
    """1/T must be a normal float32 on every backend: the same ValueError everywhere, never a silent 0."""
    logits = torch.randn(2, 5)
    for call in (max_softmax_confidence, max_softmax_partials):
        with pytest.raises(ValueError, match="temperature must be"):
            call(logits, temperature=temperature, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "ascendc"])
def test_max_softmax_accumulation_at_large_vocabularies(backend):
    """Sums of 2.6e5 terms near 1 (logits within 1e-3 of the max) within 1e-6 relative of float64: the AscendC
    per-tile sum is a pairwise tree, not a running sum (which was 1.6e-5 off). (Triton's online rescaling, one
    exp-multiply per tile whenever the running max grows, is at about 2e-6 on a rising row: not held to 1e-6.)"""
    v = 262144
    logits = torch.stack(
        (torch.linspace(0.0, -1e-3, v), torch.linspace(-1e-3, 0.0, v), torch.randn(v) * 1e-2)
    )
    got = max_softmax_confidence(logits, backend=backend)
    assert_close(got, f64_confidence(logits, 1.0), rtol=1e-6)


# ----------------------------------------------------------------------------------------- prepare_block_slots


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(data=st.data())
def test_block_slots_any_layout(backend, data):
    draw = data.draw
    b, q, block_size = draw(st.integers(0, 4)), draw(st.integers(2, 4)), draw(st.sampled_from([2, 4]))
    pages = 4
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    positions = torch.randint(0, pages * block_size - q - 1, (b,), generator=gen)
    ids = torch.randint(0, 1000, (b,), generator=gen).to(draw(st.sampled_from([torch.int32, torch.int64])))
    table = torch.randperm(64, generator=gen)[: b * pages].view(b, pages).to(torch.int32)
    ctx = torch.minimum(torch.randint(0, 3, (b,), generator=gen), positions) if draw(st.booleans()) else None
    rope = torch.randint(3, 50, (3, b), generator=gen) if draw(st.booleans()) else None
    pos_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    kw = dict(block_size=block_size, num_query_tokens=q, mask_token_id=7)
    want = prepare_block_slots(ids, positions.to(pos_dtype), table, rope_positions=rope, context_lens=ctx,
                               backend="reference", **kw)  # fmt: skip
    ids_p = place(ids, draw_layout(draw, 1), "anchor_token_ids")
    pos_p = place(positions.to(pos_dtype), draw_layout(draw, 1), "anchor_positions")
    table_p = place(table, draw_layout(draw, 2), "block_table")
    ctx_p = None if ctx is None else place(ctx, draw_layout(draw, 1), "context_lens")
    rope_p = None if rope is None else place(rope, draw_layout(draw, 2), "rope_positions")
    got = prepare_block_slots(
        ids_p.view, pos_p.view, table_p.view, rope_positions=None if rope_p is None else rope_p.view,
        context_lens=None if ctx_p is None else ctx_p.view, backend=backend, **kw,
    )  # fmt: skip
    check_all(*(p for p in (ids_p, pos_p, table_p, ctx_p, rope_p) if p is not None))
    for field in want.__dataclass_fields__:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


# ------------------------------------------------------------------------------------------------ meta tensors


@pytest.mark.parametrize("backend", ["triton", "ascendc"])
def test_kernels_on_meta_tensors_say_why_they_cannot_run(backend):
    meta = torch.device("meta")
    calls = [
        lambda: max_softmax_confidence(torch.empty(2, 8, device=meta), backend=backend),
        lambda: allocate_verify_budget(torch.empty(2, 3, device=meta), 2, backend=backend),
        lambda: prepare_block_slots(
            torch.empty(2, dtype=torch.int64, device=meta), torch.empty(2, dtype=torch.int64, device=meta),
            torch.empty(2, 3, dtype=torch.int32, device=meta), block_size=4, num_query_tokens=3, mask_token_id=1,
            backend=backend,
        ),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(BackendUnavailableError, match="meta tensors"):
            call()
