"""Dynamic verification planned on the online acceptance estimate: its V1 wiring without an engine (the sampler's
device output as evidence, ngram's ragged host lists as available drafts, DFlash/DSpark scores combined), and in
vLLM's CPU engine for ngram, draft_model, EAGLE-3 and MTP (sync scheduling) and DFlash combined with it (async
scheduling): lossless against plain decoding of the same engine, ragged per-request lengths, at most one host
copy per step."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from engine_helpers import LENGTHS, ONE_OMP_THREAD, PROMPTS, K, assert_matches_plain, run, speculative

from ascend_spec.graph import BudgetController, CostProfile
from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator
from ascend_spec.vllm.cost_profiles import ENGINE_PROFILE_FORMAT
from ascend_spec.vllm.dynamic import DraftScores, DynamicVerifier
from ascend_spec.vllm.v1.dynamic_hooks import step_scores
from ascend_spec.vllm.v1.estimate_wiring import EstimateRows

# B requests with K = 3: the 8-token target graph costs what 1 token costs, the next one (16) 3x (as in
# test_vllm_dynamic.py): a batch of five cannot verify every draft, so the estimate decides who gets them.
STEP_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 3.0, 24: 4.0, 32: 5.0}
FLAT_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 24: 1.0, 32: 1.0}
DRAFT = {4: 0.2, 8: 0.2, 16: 0.2, 24: 0.2, 32: 0.2}


def _controller(target: dict) -> BudgetController:
    return BudgetController(
        CostProfile(DRAFT), CostProfile(target), max_drafts=K, draft_tokens_per_request=1, mode="sync"
    )


def _verifier(target: dict, slots: int = 8) -> DynamicVerifier:
    verifier = DynamicVerifier(_controller(target), None, backend="reference")
    verifier.estimate = EstimateRows(
        AcceptanceEstimator(slots, K, decay=1.0, trial_decay=1.0, prior_weight=1.0), backend="reference"
    )
    return verifier


def _sampler_output(rows: list[list[int]], width: int) -> SimpleNamespace:
    padded = [row + [-1] * (width - len(row)) for row in rows]
    return SimpleNamespace(sampled_token_ids=torch.tensor(padded, dtype=torch.int32))


def _metadata(drafts: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        num_draft_tokens=drafts, cu_num_draft_tokens=torch.tensor(np.cumsum(drafts), dtype=torch.int32)
    )


# ------------------------------------------------------------------------------------------- no engine


def test_the_sampler_output_on_the_device_is_the_evidence() -> None:
    """Rows a, b, c verified 2, 3, 1 drafts; the rejection sampler emitted 1, 4, 2 tokens (-1 after them): a
    rejected its first draft, b accepted all three, c accepted its one draft (bonus token included)."""
    rows = EstimateRows(AcceptanceEstimator(4, K, decay=1.0, trial_decay=1.0, population_decay=1.0))
    ids = ["a", "b", "c"]
    rows.observe(ids, _sampler_output([[5], [5, 6, 7, 8], [5, 6]], K + 1), _metadata([2, 3, 1]))
    est = rows.estimator
    slot = dict(zip(ids, rows.rows(ids).tolist()))
    assert est.hits[[slot["a"], slot["b"], slot["c"]]].tolist() == [[0, 0, 0], [1, 1, 1], [1, 0, 0]]
    assert est.trials[[slot["a"], slot["b"], slot["c"]]].tolist() == [[1, 0, 0], [1, 1, 1], [1, 0, 0]]
    assert est.population.tolist() == [[2, 1, 1], [3, 1, 1]]
    rows.observe(ids, _sampler_output([[1], [2], [3]], 1), _metadata([0, 0, 0]))  # a step without drafts
    rows.observe(ids, SimpleNamespace(sampled_token_ids=torch.zeros(3, 1)), None)  # a plain-sampled step
    assert est.steps == 3 and est.population.tolist() == [[2, 1, 1], [3, 1, 1]]  # decay 1: nothing changed


def test_ngram_lists_plan_only_the_drafts_each_request_has() -> None:
    """ngram's host lists of 3, 1 and 0 drafts on a target where verifying is free: every available draft is
    verified, none that does not exist, with one host copy; a step where no request has a draft plans nothing."""
    verifier = _verifier(FLAT_TARGET)
    ids = ["a", "b", "c"]
    drafter = SimpleNamespace()  # ngram's proposer: no take_draft_scores
    scores = step_scores(drafter, verifier, [[1, 2, 3], [4], []], ids)
    assert scores.kind == "estimate" and scores.label == "estimate"
    assert scores.values[:, 0].tolist() == [1.0, 1.0, 0.0]  # the prior (rate 1) where a draft exists
    assert verifier.lengths(scores, ids) == [3, 1, 0]
    assert verifier.reader.copies == 1 and verifier.stats.score_kinds == {"estimate": 1}
    assert step_scores(drafter, verifier, [[], [], []], ids) is None


def test_a_request_whose_drafts_fail_gets_fewer_than_one_whose_drafts_pass() -> None:
    """Five requests: a and b accept every draft, the others reject their first; on the step profile (8 tokens
    for the price of 1) the planner gives the three free drafts to a and b (the estimate's survivals ranked),
    the brute-force best total over the estimate's cumulative products."""
    verifier = _verifier(STEP_TARGET)
    ids = ["a", "b", "c", "d", "e"]
    for _ in range(4):
        emitted = [[5, 6, 7, 8], [5, 6, 7, 8], [5], [5], [5]]
        verifier.estimate.observe(ids, _sampler_output(emitted, K + 1), _metadata([K] * 5))
    drafts = torch.zeros(5, K, dtype=torch.int64)
    scores = step_scores(SimpleNamespace(), verifier, drafts, ids)
    lengths = verifier.lengths(scores, ids)
    surv = torch.cumprod(scores.values.double(), dim=1)
    ctl = verifier.controller
    objective = [ctl.step_cost(5, 0) / 5]
    ranked = torch.sort(surv.reshape(-1), descending=True).values
    objective += [ctl.step_cost(5, t) / (5 + float(ranked[:t].sum())) for t in range(1, 5 * K + 1)]
    assert sum(lengths) == int(np.argmin(objective)) == 3
    assert lengths[2:] == [0, 0, 0] and lengths[0] + lengths[1] == 3


def test_drafter_scores_are_combined_with_the_requests_record() -> None:
    """DSpark's head under estimate 'combine': q = sigmoid(head) x the request's observed / predicted ratio; the
    head's confidences are kept as the predictions its next evidence weighs."""
    verifier = _verifier(FLAT_TARGET)
    ids = ["a", "b"]
    head = torch.tensor([[2.0, 1.0, 0.0], [3.0, 3.0, 3.0]])
    drafter = SimpleNamespace(take_draft_scores=lambda: DraftScores("head", head, 2, K))
    scores = step_scores(drafter, verifier, torch.zeros(2, K, dtype=torch.int64), ids)
    conf = torch.sigmoid(head)
    torch.testing.assert_close(scores.values, conf)  # no evidence yet: ratio 1
    assert scores.label == "head+estimate"
    verifier.estimate.observe(ids, _sampler_output([[5], [5, 6, 7, 8]], K + 1), _metadata([3, 3]))
    est = verifier.estimate.estimator
    slots = verifier.estimate.rows(ids)
    torch.testing.assert_close(est.trials[slots], torch.stack([conf[0] * torch.tensor([1.0, 0, 0]), conf[1]]))
    g = est.population_rate()
    ratio_a = (0.0 + g[0]) / (conf[0, 0] + 1.0)
    again = step_scores(drafter, verifier, torch.zeros(2, K, dtype=torch.int64), ids)
    torch.testing.assert_close(again.values[0, 0], conf[0, 0] * ratio_a)
    verifier.lengths(again, ids)
    assert verifier.stats.score_kinds == {"head+estimate": 1}


def test_a_request_new_to_the_batch_starts_from_the_prior() -> None:
    rows = EstimateRows(
        AcceptanceEstimator(2, K, decay=1.0, trial_decay=1.0, population_decay=1.0, prior_weight=1.0)
    )
    rows.observe(["a", "b"], _sampler_output([[5], [5]], K + 1), _metadata([3, 3]))  # both reject draft 0
    first = rows.rows(["a", "b"]).tolist()
    rows.observe(["a", "c"], _sampler_output([[5], [5]], 1), _metadata([0, 0]))  # b left, c took its slot
    assert rows.rows(["a", "c"]).tolist() == first
    q = rows.estimator.estimate(rows.rows(["a", "c"]))
    g0 = float(rows.estimator.population_rate()[0])
    assert float(q[1, 0]) == pytest.approx(g0) and float(q[0, 0]) == pytest.approx(g0 / 2)


@pytest.mark.parametrize("method", ["ngram", "mtp", "eagle", "eagle3", "draft_model"])
def test_sequential_drafters_are_planned_at_one_token_per_request_and_forward(method: str) -> None:
    """The drafters without scores of their own get a draft dispatcher and a controller like the block drafters:
    Q = 1 (one token per request in each of the K forwards; ngram runs none), the draft graph keyed on B alone."""
    from ascend_spec.vllm.graphs import build_engine_graphs

    graphs = build_engine_graphs(method=method, num_spec_tokens=K, max_num_seqs=8, capture_sizes=None)
    assert graphs.draft_tokens_per_request == 1
    for b in range(1, 9):
        keys = {graphs.step(b, b + t)[0].key for t in range(b * K + 1)}
        assert keys == {("draft", "uniform", graphs.draft.buckets.pad(b))}


# ---------------------------------------------------------------------------------------------- engines


def _profile(path: Path) -> str:
    data = {
        "format": ENGINE_PROFILE_FORMAT,
        "target": CostProfile(STEP_TARGET).to_dict(),
        "draft": CostProfile(DRAFT).to_dict(),
    }
    path.write_text(json.dumps(data))
    return str(path)


def _plugin(profile: str, mode: str = "sync") -> dict:
    """The given step profile (made-up units: measured step corrections off), planned on the estimate."""
    return {"dynamic": {"mode": mode, "profile": profile, "measure_steps": False}}


def _check_estimate_steps(stats: dict, label: str, *, staged: bool, ragged: bool = True) -> None:
    assert stats["steps"] > 0 and stats["score_kinds"] == {label: stats["steps"]}
    if staged:  # async: every plan staged, nothing read in a step
        assert stats["staged_copies"] == stats["steps"] and stats["host_copies"] == 0
    else:  # sync: one host copy per planned step, never more
        assert stats["host_copies"] == stats["steps"] and stats["max_host_copies_per_step"] == 1
    assert stats["calibration"] is None  # the estimate replaces the survival calibration
    if ragged:
        assert stats["ragged_steps"] > 0 and stats["lengths"].get("0", 0) > 0
    assert max(int(n) for n in stats["lengths"]) <= K
    estimate = stats["estimate"]
    rates, trials = estimate["population_rate"], estimate["population_trials"]
    assert len(rates) == K and estimate["steps"] > 0
    # alone: acceptance rates; combined: observed / predicted ratios (above 1 where the drafter is underconfident)
    assert all(0.0 <= r <= (1.0 if label == "estimate" else float("inf")) for r in rates)
    assert trials[0] > 0  # the sampler's device output reached the estimate as evidence


@pytest.fixture(scope="module")
def plain_dense(engine_dir, dense_low_entropy):
    return run(engine_dir, dense_low_entropy, env=ONE_OMP_THREAD)


def _planned_on_estimate(engine_dir, tmp_path, models, spec: dict):  # noqa: ANN001, ANN202
    """One dense engine with ``spec``'s drafter planned on the estimate (the step-cost profile, one thread)."""
    return run(
        engine_dir,
        models,
        speculative=spec,
        plugin=_plugin(_profile(tmp_path / "step.json")),
        env=ONE_OMP_THREAD,
    )


@pytest.mark.slow
def test_ngram_planned_on_the_estimate_matches_plain(
    engine_dir, tmp_path, dense_low_entropy, plain_dense
) -> None:
    """ngram proposes 0..K drafts per request (host lists, some empty); the estimate scores them and the
    planner verifies ragged lengths, never more than a request has: the output is plain decoding's, with one
    host copy per planned step. (ngram's drafts on this low-entropy target are all accepted, so the
    population's rate stays at 1; vLLM runs host ngram under sync scheduling only.)"""
    ours = _planned_on_estimate(
        engine_dir, tmp_path, dense_low_entropy, speculative("ngram", dense_low_entropy)
    )
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    _check_estimate_steps(ours.dynamic, "estimate", staged=False)
    assert ours.num_accepted > 0 and ours.mean_verify_length < 1 + K
    # never more drafts planned than ngram had: every planned draft went to the target (the counters also hold
    # drafts of a request's last step, which it never verifies)
    planned = sum(int(n) * c for n, c in ours.dynamic["lengths"].items())
    assert 0 < ours.num_draft_tokens <= planned


@pytest.mark.slow
def test_draft_model_planned_on_the_estimate_matches_plain(
    engine_dir, tmp_path, dense_low_entropy, plain_dense
) -> None:
    """draft_model (V1's DraftModelProposer, the sequential path EAGLE / EAGLE-3 share; here the target drafts
    for itself, so every draft is accepted): ragged lengths planned on the estimate, one host copy per planned
    step, the output plain decoding's."""
    spec = {"method": "draft_model", "model": str(dense_low_entropy.target), "num_speculative_tokens": K}
    ours = _planned_on_estimate(engine_dir, tmp_path, dense_low_entropy, spec)
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    _check_estimate_steps(ours.dynamic, "estimate", staged=False)
    assert 0 < ours.num_accepted == ours.num_draft_tokens  # the target's own drafts


@pytest.mark.slow
def test_eagle3_planned_on_the_estimate_matches_plain(
    engine_dir, tmp_path, dense_low_entropy, plain_dense
) -> None:
    """EAGLE-3 (V1's EagleProposer on the target's aux hidden states, through the drafter's reduced vocabulary;
    tiny_models' drafter drafts the token the target just emitted): ragged lengths planned on the estimate, one
    host copy per planned step, the output plain decoding's. Its drafts pass where the target repeats a token and
    fail elsewhere, so the estimate tells requests apart: one whose drafts all fail verifies fewer drafts per
    verify step than one whose drafts all pass."""
    ours = _planned_on_estimate(
        engine_dir, tmp_path, dense_low_entropy, speculative("eagle3", dense_low_entropy)
    )
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    _check_estimate_steps(ours.dynamic, "estimate", staged=False)
    assert 0 < ours.num_accepted < ours.num_draft_tokens
    # drafts per verify step of the requests whose drafts all passed / all failed ([steps, drafts, accepted])
    rows = ours.request_drafts
    passing = [d / n for n, d, a in rows if n and a == d]
    failing = [d / n for n, d, a in rows if n and a == 0]
    assert passing and failing and max(failing) < min(passing), rows


@pytest.mark.slow
def test_dflash_combined_with_the_estimate_under_async_scheduling_matches_plain(
    engine_dir, tmp_path, dense_low_entropy, plain_dense
) -> None:
    """DFlash's max-softmax confidences times each request's observed / predicted acceptance (estimate
    'combine'), in V1's async scheduling on the CPU engine (cpu_async): the combined survivals are staged in
    the step (no host read), the lengths reach the scheduler, the output is plain decoding's."""
    plugin = _plugin(_profile(tmp_path / "step.json"), "async")
    plugin["dynamic"]["estimate"] = "combine"
    ours = run(
        engine_dir,
        dense_low_entropy,
        speculative=speculative("dflash", dense_low_entropy),
        plugin=plugin,
        async_scheduling=True,
        env=ONE_OMP_THREAD,
    )
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    stats = ours.dynamic
    _check_estimate_steps(stats, "logits+estimate", staged=True, ragged=False)
    # DFlash on this target is confident where it is wrong: the request's record pulls its first position down
    # (observed / predicted < 1), plans turn plain and the drafter is skipped between probes
    assert stats["estimate"]["population_rate"][0] < 1.0
    assert stats["plain_steps"] > 0 and stats["skipped_steps"] > 0
    # the scheduler took the plain plans: far fewer verify steps than V1's placeholders (every request, every
    # decode step) would give; none at all once the estimate (kept from the warm-up run) has learnt the drafter,
    # since a request no plan has reached yet verifies nothing either
    assert ours.num_drafts < sum(LENGTHS) / (1 + K)


@pytest.mark.slow
def test_mtp_planned_on_the_estimate_matches_plain_on_the_hybrid(
    engine_dir, tmp_path, hybrid_low_entropy
) -> None:
    """Qwen3.5's MTP head (the hybrid target's own drafter) planned on the estimate: ragged lengths through the
    GDN layers' one state slot per request, the output plain decoding's."""
    prompts = PROMPTS[:4]
    lengths = [16, 10, 18, 8]
    plain = run(engine_dir, hybrid_low_entropy, prompts=prompts, max_tokens=lengths, env=ONE_OMP_THREAD)
    ours = run(
        engine_dir,
        hybrid_low_entropy,
        speculative=speculative("mtp", hybrid_low_entropy),
        plugin=_plugin(_profile(tmp_path / "step.json")),
        prompts=prompts,
        max_tokens=lengths,
        env=ONE_OMP_THREAD,
    )
    assert_matches_plain(plain, ours, allow_ties=False)
    _check_estimate_steps(ours.dynamic, "estimate", staged=False)
    assert ours.gdn_slots_per_request == 1
