"""BudgetController against brute force over every T, monotonicity, no-draft, sync/async modes, seed literals."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.backend import own_backends
from ascend_spec.graph import BudgetController, CostProfile, reference_split, split_budget


# -- an independent oracle -------------------------------------------------------------------------------------
def oracle_cost(costs: dict, n: int) -> float:
    """Step function by linear scan; eager above the top: slope of the two largest buckets."""
    sizes = sorted(costs)
    for s in sizes:
        if n <= s:
            return costs[s]
    top = sizes[-1]
    slope = costs[top] / top if len(sizes) == 1 else (costs[top] - costs[sizes[-2]]) / (top - sizes[-2])
    return costs[top] + slope * (n - top)


def take_best(survival: torch.Tensor, total: int) -> torch.Tensor:
    """The split rule written out: stable sort of all survivals, the first T win, count them per request."""
    b, k = survival.shape
    order = torch.sort(survival.reshape(-1).double(), descending=True, stable=True).indices[
        : min(total, b * k)
    ]
    return torch.bincount(torch.div(order, k, rounding_mode="floor"), minlength=b).to(torch.int32)


def brute_force(draft: dict, verify: dict, q: int, survival: list[list[float]]):
    """Every T in 0..B*K: time per token; T = 0 is plain decoding. Returns (best objective, all objectives)."""
    b = len(survival)
    vals = sorted((v for row in survival for v in row), reverse=True)
    objs = [oracle_cost(verify, b) / b]
    acc = 0.0
    for t in range(1, len(vals) + 1):
        acc += vals[t - 1]
        objs.append((oracle_cost(draft, b * q) + oracle_cost(verify, b + t)) / (b + acc))
    return min(objs), objs


@st.composite
def costs_st(draw, max_size=48, strict=False):
    sizes = sorted(draw(st.sets(st.integers(1, max_size), min_size=1, max_size=6)))
    lo = 0.01 if strict else 0.0
    steps = draw(st.lists(st.floats(lo, 50.0), min_size=len(sizes), max_size=len(sizes)))
    out, total = {}, draw(st.floats(0.1, 50.0))
    for s, d in zip(sizes, steps):
        total += d
        out[s] = total
    return out


@st.composite
def survival_st(draw, b=None, k=None):
    b = b or draw(st.integers(1, 6))
    k = k or draw(st.integers(1, 5))
    conf = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))  # exact ties too
    rows = []
    for _ in range(b):
        p, row = 1.0, []
        for c in draw(st.lists(conf, min_size=k, max_size=k)):
            p *= c
            row.append(p)
        rows.append(row)
    return rows


def make(draft, verify, k, q, **kw):
    return BudgetController(
        CostProfile(draft), CostProfile(verify), max_drafts=k, draft_tokens_per_request=q, **kw
    )


@settings(max_examples=60, deadline=None)
@given(costs_st(), costs_st(), survival_st(), st.integers(1, 4))
def test_sync_plan_matches_brute_force_over_every_t(draft, verify, survival, q):
    b, k = len(survival), len(survival[0])
    ctl = make(draft, verify, k, q)
    plan = ctl.plan(torch.tensor(survival, dtype=torch.float32))
    best, objs = brute_force(draft, verify, q, torch.tensor(survival, dtype=torch.float32).double().tolist())
    chosen = plan.expected_cost / plan.expected_tokens
    assert chosen == pytest.approx(best, rel=1e-9)
    assert chosen == pytest.approx(objs[plan.total_budget], rel=1e-9)
    assert plan.speculate == (plan.total_budget > 0)
    # never slower per token than plain decoding
    assert chosen <= oracle_cost(verify, b) / b * (1 + 1e-12)
    # the split: counts sum to T, each a prefix, equal to the reference "take the T best, count per request"
    assert int(plan.num_drafts.sum()) == plan.total_budget
    assert torch.equal(
        plan.num_drafts, take_best(torch.tensor(survival, dtype=torch.float32), plan.total_budget)
    )
    assert plan.query_start_loc.tolist() == [0, *torch.cumsum(plan.num_drafts + 1, 0).tolist()]
    assert plan.target_tokens == b + plan.total_budget
    want = [r * k + i for r in range(b) for i in range(int(plan.num_drafts[r]))]
    assert plan.draft_index.tolist() == want
    # the chosen T is a bucket fill point or lies in the eager range
    if plan.speculate:
        assert plan.total_budget in ctl.candidates(b)


def test_talk_split_4_3_1_gives_offsets_0_5_9_11():
    survival = torch.tensor(
        [[0.9, 0.8, 0.7, 0.6, 0.1], [0.85, 0.75, 0.65, 0.2, 0.1], [0.5, 0.3, 0.2, 0.1, 0.05]]
    )
    ref = reference_split(survival, 8)
    assert ref.num_drafts.tolist() == [4, 3, 1]
    assert ref.query_lens.tolist() == [5, 4, 2]
    assert ref.query_start_loc.tolist() == [0, 5, 9, 11]
    assert ref.draft_index.tolist() == [0, 1, 2, 3, 5, 6, 7, 10]  # b*K + i, request by request
    # the async controller with recent totals 8, 8, 8 and a graph of exactly 3 + 8 = 11 tokens does the same
    ctl = make({16: 1.0}, {4: 5.0, 11: 6.0, 16: 9.0}, 5, 5, mode="async")
    for _ in range(3):
        ctl.record_total(8)
    assert ctl.planned_total(3) == 8
    plan = ctl.plan(survival)
    assert plan.total_budget == 8 and plan.target_tokens == 11 and plan.target_bucket == 11
    assert plan.num_drafts.tolist() == [4, 3, 1] and plan.query_start_loc.tolist() == [0, 5, 9, 11]
    assert plan.draft_index.tolist() == [0, 1, 2, 3, 5, 6, 7, 10]


def test_talk_predict_total_10_12_10_is_11():
    ctl = make({8: 1.0}, {8: 1.0}, 9, 9, mode="async")
    assert ctl.predict_total(4) == 36  # no history yet: verify everything (B * K)
    for t in (10, 12, 10):
        ctl.record_total(t)
    assert ctl.predict_total(4) == 11
    assert ctl.predict_total(1) == 9  # capped at B * K
    ctl.record_total(20)  # history=3: the window is now 12, 10, 20
    assert ctl.recent_totals == [12, 10, 20] and ctl.predict_total(4) == 14
    with pytest.raises(ValueError, match="total must be >= 0; got -1"):
        ctl.record_total(-1)


def test_no_draft_when_verification_is_expensive():
    survival = torch.tensor([[0.9, 0.8], [0.9, 0.8], [0.9, 0.8], [0.9, 0.8]])
    cheap = make({8: 0.5}, {4: 10.0, 8: 11.0, 12: 12.0}, 2, 2)
    assert cheap.plan(survival).speculate
    dear = make({8: 0.5}, {4: 10.0, 8: 100.0, 12: 120.0}, 2, 2)
    plan = dear.plan(survival)
    assert not plan.speculate and plan.total_budget == 0 and plan.num_drafts.tolist() == [0, 0, 0, 0]
    assert plan.expected_tokens == 4.0 and plan.expected_cost == 10.0  # plain decoding: no drafter cost
    assert plan.query_start_loc.tolist() == [0, 1, 2, 3, 4] and plan.draft_tokens == 0
    # zero survivals: drafting cannot pay
    assert not cheap.plan(torch.zeros(4, 2)).speculate


def test_fills_the_bucket():
    # B = 4, K = 4: 4 + 5 = 9 tokens and 4 + 12 = 16 tokens run the same 16 graph -> take 12
    ctl = make({16: 1.0}, {4: 10.0, 16: 12.0, 32: 40.0}, 4, 4)
    plan = ctl.plan(torch.full((4, 4), 0.5).cumprod(1))
    assert plan.total_budget == 12 and plan.target_bucket == 16
    assert ctl.candidates(4) == [12, 16]


def test_eager_range_is_searched_token_by_token():
    ctl = make({64: 1.0}, {4: 40.0, 8: 44.0}, 3, 3)  # above 8 tokens: eager, 1 ms per token
    assert ctl.candidates(4) == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    plan = ctl.plan(torch.tensor([[0.99, 0.98, 0.2]] * 4))
    assert plan.target_bucket is None and plan.total_budget == 8  # the 0.2 drafts cost more than they give


# -- monotonicity --------------------------------------------------------------------------------------------
def _objective(ctl, survival, t):
    b = len(survival)
    vals = sorted((v for row in survival.tolist() for v in row), reverse=True)
    return ctl.step_cost(b, t) / (b + sum(vals[:t]))


@settings(max_examples=50, deadline=None)
@given(costs_st(strict=True), costs_st(strict=True), survival_st(), st.floats(0.05, 0.95), st.integers(1, 3))
def test_cheaper_verify_increments_never_lower_the_budget(draft, verify, survival, alpha, q):
    """V'(n) = V(B) + alpha (V(n) - V(B)): every extra verified token cheaper, plain decoding unchanged."""
    b, k = len(survival), len(survival[0])
    s = torch.tensor(survival, dtype=torch.float64)
    base = make(draft, verify, k, q)
    v0 = base.verify_cost.cost(b)
    cheaper = make(draft, {n: v0 + alpha * (c - v0) for n, c in verify.items()}, k, q)
    t0, t1 = base.plan(s).total_budget, cheaper.plan(s).total_budget
    # a violation can only be a floating-point tie between the two budgets
    assert t1 >= t0 or _objective(cheaper, s, t1) == pytest.approx(_objective(cheaper, s, t0), rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(costs_st(strict=True), costs_st(strict=True), survival_st(), st.floats(1.0, 3.0), st.integers(1, 3))
def test_higher_survival_never_lowers_the_budget(draft, verify, survival, gamma, q):
    b, k = len(survival), len(survival[0])
    s = torch.tensor(survival, dtype=torch.float64)
    ctl = make(draft, verify, k, q)
    plan = ctl.plan(s)
    t0 = plan.total_budget
    # (a) every survival scaled up (same order)
    top = float(s.max())
    g = min(gamma, 1.0 / top) if top > 0 else gamma
    s_up = s * g
    t1 = ctl.plan(s_up).total_budget
    assert t1 >= t0 or _objective(ctl, s_up, t1) == pytest.approx(_objective(ctl, s_up, t0), rel=1e-9)
    # (b) drafts outside the chosen set raised, up to the weakest chosen one
    chosen = torch.arange(k).expand(b, k) < plan.num_drafts.long()[:, None]
    floor = float(s[chosen].min()) if t0 else 1.0
    s_tail = torch.where(chosen, s, torch.clamp(s * gamma, max=floor))
    t2 = ctl.plan(s_tail).total_budget
    assert t2 >= t0 or _objective(ctl, s_tail, t2) == pytest.approx(_objective(ctl, s_tail, t0), rel=1e-9)


def test_uniformly_cheaper_verify_can_stop_speculation():
    """Why the monotonicity above is about the extra tokens: scale the whole verify cost down and the fixed
    drafter cost dominates, so plain decoding wins (documented in docs/controller.md)."""
    s = torch.tensor([[0.9]])
    assert make({1: 5.0}, {64: 10.0}, 1, 1).plan(s).speculate  # 15 / 1.9 = 7.9 ms < 10 ms per token
    assert not make({1: 5.0}, {64: 2.0}, 1, 1).plan(s).speculate  # 7 / 1.9 = 3.7 ms > 2 ms per token


# -- async mode -------------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(costs_st(), costs_st(), survival_st(), st.lists(st.integers(0, 30), max_size=4))
def test_async_split_on_device_and_ideal_total_recorded(draft, verify, survival, history):
    b, k = len(survival), len(survival[0])
    s = torch.tensor(survival, dtype=torch.float32)
    ctl = make(draft, verify, k, 2, mode="async")
    for t in history:
        ctl.record_total(t)
    planned = ctl.planned_total(b)  # what the host knows before the drafter runs
    plan = ctl.plan(s)
    assert plan.total_budget == planned and plan.target_tokens == b + planned
    assert plan.speculate == (planned > 0)
    assert torch.equal(plan.num_drafts, take_best(s, planned))
    vals = sorted(s.reshape(-1).tolist(), reverse=True)
    assert float(plan.expected_tokens) == pytest.approx(b + sum(vals[:planned]), rel=1e-6)
    # this step's own best total (found on the device) is what the sync search picks
    sync = make(draft, verify, k, 2).plan(s)
    assert ctl.recent_totals[-1] == sync.total_budget
    # planned_total fills the predicted total's bucket (never a different graph)
    pred = ctl.predict_total(b)
    if pred:
        assert ctl.verify_cost.buckets.pad(b + pred) == ctl.verify_cost.buckets.pad(b + ctl.planned_total(b))
    # stage_totals: the same plan, the best total left to the caller (recorded nowhere until it hands it back)
    staged = make(draft, verify, k, 2, mode="async")
    staged.stage_totals = True
    for t in history:
        staged.record_total(t)
    again = staged.plan(s)
    assert torch.equal(again.num_drafts, plan.num_drafts) and again.total_budget == plan.total_budget
    assert staged.recent_totals == list(history)[-staged.history :] and staged._pending == []
    assert int(staged.staged_total) == sync.total_budget


@settings(max_examples=40, deadline=None)
@given(survival_st(), st.integers(0, 40), st.sampled_from(own_backends("allocate_verify_budget")))
def test_split_on_every_backend_is_the_take_best_rule(survival, total, backend):
    s = torch.tensor(survival, dtype=torch.float32)
    total = min(total, s.numel())
    split, ref = split_budget(s, total, backend=backend), reference_split(s, total)
    num = take_best(s, total)
    assert torch.equal(split.num_drafts, num) and torch.equal(ref.num_drafts, num)
    assert split.query_start_loc.tolist() == [0, *torch.cumsum(num + 1, 0).tolist()]
    k = s.shape[1]
    assert split.draft_index.tolist() == [r * k + i for r in range(s.shape[0]) for i in range(int(num[r]))]
    assert torch.equal(split.draft_index, ref.draft_index)


# -- explain and bad input ---------------------------------------------------------------------------------------
def test_explain_thresholds_are_the_marginal_rule():
    # buckets at every B * (1 + k): C(k) = D + V(B (1 + k)) exactly, no padding effects
    b, k = 4, 5
    verify = {b * (1 + i): 20.0 + 3.0 * i + 0.5 * i * i for i in range(k + 2)}
    ctl = make({b * k: 2.0}, verify, k, k)
    surv = [0.9, 0.7, 0.5, 0.3, 0.15]
    ex = ctl.explain(b, surv)
    g = [1.0 + sum(surv[:i]) for i in range(k + 1)]
    c = [2.0 + verify[b * (1 + i)] for i in range(k + 1)]
    for row in ex.rows:
        i = row.k
        assert row.cost == c[i] and row.delta_cost == pytest.approx(c[i + 1] - c[i])
        assert row.threshold == pytest.approx(g[i] * (c[i + 1] - c[i]) / c[i])
        # p_{k+1} > G(k) dC / C(k)  <=>  C(k+1) / G(k+1) < C(k) / G(k)
        assert row.add == (c[i + 1] / g[i + 1] < c[i] / g[i])
    # with uniform rows the plan stops where the rule first says stop (the ratio is unimodal here)
    depth = next((r.k for r in ex.rows if not r.add), k)
    assert ctl.plan(torch.tensor([surv] * b)).total_budget == b * depth
    text = ex.format()
    assert "p_{k+1} > threshold" in text and "B=4" in text


def test_talk_threshold_example():
    """From the talk: at BS=256 going from 5 to 9 candidates costs 230 -> 330, i.e. 25 per position; at C(8) = 305 the
    9th position needs p_9 > G(8) * 25 / 305, which is the talk's 45% when G(8) = 5.49."""
    b = 256
    verify = {b * (1 + i): 230.0 + 25.0 * (i - 5) for i in range(5, 10)}
    ctl = make({b * 9: 0.0}, verify, 9, 9)
    row = ctl.explain(b).rows[8]
    assert (row.cost, row.delta_cost) == (305.0, 25.0)
    assert 5.49 * row.ratio == pytest.approx(0.45, abs=1e-3)


@pytest.mark.parametrize(
    "survival, match",
    [
        (torch.ones(3), "survival must have 2 dimensions"),
        (torch.ones(2, 3, dtype=torch.int64), "survival must have dtype in"),
        (torch.ones(2, 4), r"survival must have shape \[B, 3\] \(max_drafts\); got \[2, 4\]"),
        (torch.ones(0, 3), "at least one request"),
        (torch.tensor([[0.5, 0.6, 0.1]]), "must not increase along a request's drafts.*request 0 has 0.5"),
        (torch.tensor([[1.5, 0.6, 0.1]]), r"survival must lie in \[0, 1\]"),
        (torch.tensor([[float("nan"), 0.6, 0.1]]), "survival must be finite"),
        ([[0.5, 0.4, 0.3]], "survival must be a torch.Tensor"),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bad_survival(survival, match, mode):
    with pytest.raises(ValueError, match=match):
        make({8: 1.0}, {8: 1.0}, 3, 3, mode=mode).plan(survival)


def test_bad_controller_arguments():
    p = CostProfile({8: 1.0})
    with pytest.raises(ValueError, match="draft_cost must be a CostProfile; got dict"):
        BudgetController({8: 1.0}, p, max_drafts=2, draft_tokens_per_request=2)
    with pytest.raises(ValueError, match="verify_cost must be a CostProfile"):
        BudgetController(p, None, max_drafts=2, draft_tokens_per_request=2)
    with pytest.raises(ValueError, match="max_drafts must be >= 1; got 0"):
        BudgetController(p, p, max_drafts=0, draft_tokens_per_request=2)
    with pytest.raises(ValueError, match="draft_tokens_per_request must be >= 1"):
        BudgetController(p, p, max_drafts=2, draft_tokens_per_request=0)
    with pytest.raises(ValueError, match="mode must be one of .*'sync', 'async'.*; got 'v3'"):
        BudgetController(p, p, max_drafts=2, draft_tokens_per_request=2, mode="v3")
    with pytest.raises(ValueError, match="history must be >= 1; got 0"):
        BudgetController(p, p, max_drafts=2, draft_tokens_per_request=2, history=0)
    with pytest.raises(ValueError, match="num_reqs must be given before the first plan"):
        BudgetController(p, p, max_drafts=2, draft_tokens_per_request=2).explain()


# -- the engine's lean sync path --------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(
    costs_st(strict=True),
    costs_st(strict=True),
    survival_st(),
    st.integers(1, 4),
    st.one_of(st.none(), st.lists(st.floats(0.05, 3.0), min_size=5, max_size=5)),
    st.sampled_from([(0.0, 0.0), (0.4, 0.1), (-0.05, 0.3)]),
)
def test_plan_lengths_is_plan_on_the_calibrated_survivals(draft, verify, survival, q, factors, corrections):
    """plan_lengths(s, f) (bounds for full blocks and plain decoding, else the sorted search) gives the total and
    the split of plan() on min(1, s * f) made non-increasing, with and without measured step corrections."""
    import numpy as np

    s = np.asarray(survival, dtype=np.float32)
    b, k = s.shape
    f = None if factors is None else np.asarray(factors[:k])
    lean, full = make(draft, verify, k, q), make(draft, verify, k, q)
    for ctl in (lean, full):
        if corrections != (0.0, 0.0):
            ctl.set_step_corrections(b, *corrections)
    calibrated = s.astype(np.float64)
    if f is not None:
        calibrated = np.minimum.accumulate(np.minimum(calibrated * f, 1.0), axis=1)
    plan = full.plan(torch.from_numpy(calibrated))
    total, lengths = lean.plan_lengths(s, f)
    assert total == plan.total_budget
    assert lengths == plan.num_drafts.tolist()
    assert lean.recent_totals == [total]


def test_plan_lengths_bounds_settle_full_and_plain_steps_without_searching(monkeypatch) -> None:
    """A sure drafter is verified in full, a useless one not at all, and neither step sorts the survivals."""
    import numpy as np

    ctl = make({4: 0.2, 32: 0.3}, {1: 1.0, 8: 1.0, 16: 1.2, 32: 1.5}, 3, 4)
    full_above, plain_below = ctl.lean_bounds(4)
    assert 0.0 < full_above < 1.0 and plain_below > 0.0
    monkeypatch.setattr(np, "argsort", lambda *a, **kw: pytest.fail("searched"))
    assert ctl.plan_lengths(np.full((4, 3), 0.999, np.float32)) == (12, [3, 3, 3, 3])
    assert ctl.plan_lengths(np.full((4, 3), 1e-4, np.float32)) == (0, [0, 0, 0, 0])
    # factors below 1 (a drafter observed to be wrong) turn the sure survivals into a plain plan
    assert ctl.plan_lengths(np.full((4, 3), 0.999, np.float32), np.full(3, 1e-4)) == (0, [0, 0, 0, 0])


def test_step_corrections_change_the_costs_and_are_checked() -> None:
    ctl = make({4: 0.2, 32: 0.3}, {1: 1.0, 8: 1.0, 16: 1.2, 32: 1.5}, 3, 4)
    surv = torch.full((4, 3), 0.3)
    assert ctl.plan(surv).speculate  # (0.3 + 1.2) ms / (4 + 3.6) < 1 ms / 4 per token on the profiles alone
    ctl.set_step_corrections(4, 1.0, 0.1)  # the engine measured 1 ms more per speculative step, 0.1 per plain
    assert ctl.step_cost(4, 0) == pytest.approx(1.1) and ctl.step_cost(4, 12) == pytest.approx(
        0.3 + 1.2 + 1.0
    )
    assert ctl.step_corrections(4) == (1.0, 0.1) and ctl.step_corrections(2) == (0.0, 0.0)
    assert not ctl.plan(surv).speculate
    with pytest.raises(ValueError, match=r"plain_ms must leave plain decoding's cost > 0 at B=4"):
        ctl.set_step_corrections(4, 0.0, -1.0)
    with pytest.raises(ValueError, match=r"speculative_ms must leave a speculative step's cost > 0 at B=4"):
        ctl.set_step_corrections(4, -2.0, 0.0)
    with pytest.raises(ValueError, match=r"step corrections must be finite"):
        ctl.set_step_corrections(4, float("nan"), 0.0)


def test_an_eager_targets_plan_stops_inside_a_bucket():
    # The bucketed profile makes 4 + 1 tokens as dear as 4 + 4 (the 8-token graph); an eager target
    # (per_token) pays 1.5 ms for each verified token, so a total that stops inside a bucket can win.
    verify = CostProfile({4: 10.0, 8: 16.0, 16: 28.0})
    survival = torch.tensor([[0.95, 0.05, 0.01]] * 4).cumprod(1)
    draft = CostProfile({16: 1.0})
    bucketed = BudgetController(draft, verify, max_drafts=3, draft_tokens_per_request=4)
    eager = BudgetController(draft, verify.per_token(), max_drafts=3, draft_tokens_per_request=4)
    assert bucketed.plan(survival).total_budget == 4  # the 8-token bucket's fill point
    plan = eager.plan(survival)
    assert plan.total_budget == 4 and plan.num_drafts.tolist() == [1, 1, 1, 1]
    weak = torch.tensor([[0.95, 0.05, 0.01]] * 2 + [[0.3, 0.1, 0.01]] * 2).cumprod(1)
    # bucketed, the 8-token graph with all four drafts (17 ms / 6.5 tokens) loses to plain decoding (2.5 ms a
    # token); eager, the two strong drafts alone (14 ms / 5.9 tokens) beat it: 1.5 ms each buys 0.95 of a token
    assert bucketed.plan(weak).total_budget == 0
    plan = eager.plan(weak)
    assert plan.total_budget == 2 and plan.num_drafts.tolist() == [1, 1, 0, 0]
