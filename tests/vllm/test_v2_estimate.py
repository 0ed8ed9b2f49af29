"""The acceptance estimate wired into Model Runner V2's dynamic verification, without an engine: a stand-in
speculator whose ``propose`` carries the plugin's wrapper, driven in V2's call order (``add_request`` for a new
request; the next step's input preparation; ``propose`` with the step's device ``num_sampled`` /
``num_rejected``; ``record_confidences`` with the speculator's ``draft_token_confidence_probs``).

Oracles: the estimate's float64 reference rule (``tests/helpers.py``) applied to the same accepted counts, and
Model Runner V1's sync-mode planner on the reference's survivals for the device split. Plus: no tensor value
read on the host in the step (the guard of test_v2_dynamic_manager.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import EstimateReference, NoHostRead, stand_in_budget_manager
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph import BudgetController, CostProfile
from ascend_spec.vllm.dynamic import DynamicVerifier
from ascend_spec.vllm.v2.dynamic_hooks import _estimate_rows, _wrap_propose

K = 3
MAX_REQS = 6
# 8 target tokens cost what 1 costs, 16 cost 3x: a batch of five cannot verify every draft for free
TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 3.0, 32: 5.0}
DRAFT = {1: 0.2, 2: 0.2, 4: 0.2, 8: 0.2}
# the estimator's defaults (AcceptanceEstimator)
DECAY, TRIAL_DECAY, POPULATION_DECAY, PRIOR_WEIGHT, INITIAL_RATE = 0.97, 0.8, 0.99, 0.5, 1.0


class _Speculator:
    """V2's speculator as the runner sees it: ``propose`` returns [B, K] drafts; a scored drafter (DFlash-like)
    writes its conditional confidences into ``draft_token_confidence_probs`` while it proposes, ngram's has no
    such buffer."""

    def __init__(self, confidences: torch.Tensor | None = None) -> None:
        self.num_speculative_steps = K
        self.own = confidences
        self.runs = 0
        if confidences is not None:
            self.draft_token_confidence_probs = torch.empty(MAX_REQS, K)

    def propose(self, input_batch, *args, **kwargs) -> torch.Tensor:  # noqa: ANN001, ANN002, ANN003
        self.runs += 1
        b = input_batch.num_reqs
        if self.own is not None:
            self.draft_token_confidence_probs[:b] = self.own[:b]
        return torch.zeros(b, K, dtype=torch.int64)


def _controller() -> BudgetController:
    return BudgetController(
        CostProfile(DRAFT), CostProfile(TARGET), max_drafts=K, draft_tokens_per_request=1, backend="reference"
    )


def _engine(method: str = "ngram", estimate: str = "auto", confidences: torch.Tensor | None = None):  # noqa: ANN202
    """A stand-in V2 runner with the plugin's manager, estimate and propose wrapper, as build_manager sets them."""
    speculator = _Speculator(confidences)
    runner = SimpleNamespace(
        max_num_reqs=MAX_REQS,
        device="cpu",
        speculator=speculator,
        adaptive_verification=None,
        vllm_config=SimpleNamespace(speculative_config=SimpleNamespace(method=method)),
        model_state=SimpleNamespace(num_new_sampled_tokens_per_step=1),
    )
    _wrap_propose(runner, speculator)
    rows, label = _estimate_rows(runner, SimpleNamespace(dynamic=SimpleNamespace(estimate=estimate)), K)
    verifier = DynamicVerifier(_controller(), None, backend="reference")
    runner.adaptive_verification = stand_in_budget_manager(verifier, MAX_REQS, K, label, estimate=rows)
    return runner


def _batch(slots: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        num_reqs=len(slots),
        req_ids=[f"s{s}" for s in slots],
        idx_mapping=torch.tensor(slots, dtype=torch.int64),
    )


def _sample_and_propose(runner, slots: list[int], sampled: list[int], rejected: list[int]) -> None:  # noqa: ANN001
    """V2's sample_tokens after the rejection sampler: propose (positional, as the runner calls it), then
    record_confidences with the speculator's buffer."""
    batch = _batch(slots)
    num_sampled = torch.tensor(sampled, dtype=torch.int32)
    num_rejected = torch.tensor(rejected, dtype=torch.int32)
    speculator = runner.speculator
    speculator.propose(batch, {}, {}, torch.zeros(len(slots), 4), None, num_sampled, num_rejected, None)
    runner.adaptive_verification.record_confidences(speculator.draft_token_confidence_probs, batch)


def _reference() -> EstimateReference:
    return EstimateReference(
        MAX_REQS, K, DECAY, POPULATION_DECAY, PRIOR_WEIGHT, INITIAL_RATE, trial_decay=TRIAL_DECAY
    )


@st.composite
def _steps(draw):  # noqa: ANN001, ANN202
    """Steps of a batch over request slots: per row its verified drafts v, accepted a <= v (a prefill chunk:
    nothing sampled), and now and then a new request in a slot."""
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        slots = draw(st.lists(st.integers(0, MAX_REQS - 1), min_size=1, max_size=MAX_REQS, unique=True))
        rows = []
        for slot in slots:
            if draw(st.integers(0, 5)) == 0:
                rows.append((slot, None, None))  # a prefill chunk: num_sampled = num_rejected = 0
                continue
            v = draw(st.integers(0, K))
            rows.append((slot, v, draw(st.integers(0, v))))
        added = draw(st.lists(st.sampled_from(slots), max_size=2, unique=True))
        steps.append((rows, added))
    return steps


@pytest.mark.parametrize("combine", [False, True])
@settings(max_examples=30, deadline=None)
@given(steps=_steps())
def test_the_estimate_after_v2_steps_equals_the_float64_rule(combine: bool, steps) -> None:  # noqa: ANN001
    """ngram (no scores: the estimate alone) and DFlash under 'combine' (its confidences rescaled): after every
    step the confidences V2 hands record_confidences, and the survivals the manager keeps per request slot, are
    the reference rule's on the same accepted counts (accepted = num_sampled - 1, verified = accepted +
    num_rejected); a request added to a slot starts from the population's prior."""
    own = torch.tensor([[0.9, 0.7, 0.5], [0.6, 0.6, 0.6], [1.0, 0.2, 0.9]] * 2)[:MAX_REQS]
    runner = (
        _engine("dflash", "combine", confidences=own) if combine else _engine("ngram")
    )  # a DFlash-like buffer
    manager = runner.adaptive_verification
    ref = _reference()
    for rows, added in steps:
        for slot in added:  # V2's add_requests, before the step's inputs
            manager.add_request(slot)
            ref.reset([slot])
        slots = [r[0] for r in rows]
        sampled = [0 if v is None else a + 1 for _, v, a in rows]
        rejected = [0 if v is None else v - a for _, v, a in rows]
        _sample_and_propose(runner, slots, sampled, rejected)
        ref.observe([(s, v, a) for s, v, a in rows if v is not None])
        want = ref.estimate(slots, own[: len(slots)].numpy().astype(np.float64) if combine else None, None)
        got = runner.speculator.draft_token_confidence_probs[: len(slots)]
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-6)
        survival = manager._survival[torch.tensor(slots)]
        np.testing.assert_allclose(survival.double().numpy(), np.cumprod(want, axis=1), rtol=1e-5, atol=1e-6)
    assert manager.verifier.stats.host_copies == 0
    assert manager.verifier.stats.staged_copies == len(steps)


def test_the_device_split_follows_each_requests_record() -> None:
    """Five requests of ngram: two accept every draft, three reject their first. After four steps the plan
    (host total from the staged survivals, device split) gives every free draft to the two: the lengths V1's
    planner gives on the reference estimate's survivals."""
    runner = _engine("ngram")
    manager = runner.adaptive_verification
    slots, ids = [4, 0, 2, 5, 1], [f"s{s}" for s in [4, 0, 2, 5, 1]]
    ref = _reference()
    for s in slots:
        manager.add_request(s)
    for _ in range(4):
        _sample_and_propose(runner, slots, [K + 1, K + 1, 1, 1, 1], [0, 0, K, K, K])
        ref.observe([(s, K, K) for s in slots[:2]] + [(s, K, 0) for s in slots[2:]])
    total_tokens = manager.get_num_tokens(dict.fromkeys(ids, 1 + K), {r: [-1] * K for r in ids})
    b = len(slots)
    manager.compact_batch(np.full(b, K, np.int32), np.full(b, 1 + K, np.int32), np.zeros(b + 1))
    _, qsl, total = manager.reallocate_drafts(ids, torch.tensor(slots))
    counts = ((qsl[1 : b + 1] - qsl[:b]) - 1).tolist()
    want_total, want = _controller().plan_lengths(np.cumprod(ref.estimate(slots, None, None), axis=1))
    assert (total, counts) == (want_total, want) and total_tokens == b + total
    assert 0 < total < b * K and counts[2:] == [0, 0, 0]
    assert manager.verifier.stats.score_kinds == {"estimate": 1}


def test_a_plain_step_and_a_skipped_drafter_only_age_the_evidence() -> None:
    """A step verifying nothing (the plain sampler: num_rejected 0) is no evidence; with the drafter skipped
    (the no-draft option) the wrapper still ages the estimate, and V2's record_confidences stages nothing."""
    runner = _engine("ngram")
    manager, speculator = runner.adaptive_verification, runner.speculator
    estimator = manager.estimate.estimator
    _sample_and_propose(runner, [0, 1], [1, K + 1], [K, 0])
    before = estimator._state.clone()
    _sample_and_propose(runner, [0, 1], [1, 1], [0, 0])  # a plain step
    torch.testing.assert_close(estimator._state, before * _decays())
    manager.verifier.skip_drafter = lambda: True
    _sample_and_propose(runner, [0, 1], [1, 1], [0, 0])
    torch.testing.assert_close(estimator._state, before * _decays() ** 2)
    assert speculator.runs == 2 and estimator.steps == 3 and manager.verifier.stats.staged_copies == 2


def _decays() -> torch.Tensor:
    scale = torch.full((MAX_REQS + 2, 1), DECAY)
    scale[MAX_REQS + 1] = POPULATION_DECAY  # the population's row (after the spare slot)
    return scale


def test_masked_rows_land_in_the_spare_slot() -> None:
    """A batch row V2 masks (idx_mapping -1) is evidence of no request's slot."""
    runner = _engine("ngram")
    estimator = runner.adaptive_verification.estimate.estimator
    counts = torch.tensor([1, 1], dtype=torch.int32), torch.tensor([K, K], dtype=torch.int32)
    runner.speculator.propose(_batch([3, -1]), {}, {}, None, None, *counts)
    assert estimator.trials[3].tolist() == [1.0, 0.0, 0.0]
    assert estimator.trials[MAX_REQS].tolist() == [1.0, 0.0, 0.0]  # the spare slot, no request's
    assert float(estimator.trials[:MAX_REQS].sum()) == 1.0


def test_no_host_read_in_the_estimate_step(monkeypatch) -> None:  # noqa: ANN001
    """The wrapper's update and score, the record step and the device split read no tensor value on the host
    (value checks off, as in an engine step)."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    runner = _engine("ngram")
    manager = runner.adaptive_verification
    slots, ids = [0, 3, 4], ["s0", "s3", "s4"]
    with NoHostRead():
        for s in slots:
            manager.add_request(s)
        _sample_and_propose(runner, slots, [K + 1, 1, 2], [0, K, K - 1])
    manager.get_num_tokens(dict.fromkeys(ids, 1 + K), {r: [-1] * K for r in ids})  # host: landed copies only
    with NoHostRead():
        manager.compact_batch(np.full(3, K, np.int32), np.full(3, 1 + K, np.int32), np.zeros(4))
        _, _, total = manager.reallocate_drafts(ids, torch.tensor(slots))
        _sample_and_propose(runner, slots, [2, 1, 1], [0, 1, 0])
    assert 0 < total < 3 * K
    assert manager.verifier.stats.host_copies == 0


def test_scored_drafters_keep_their_own_scores_unless_combined() -> None:
    """DFlash / DSpark without 'combine': no estimate, their own label; ngram's speculator gets the buffer V2
    hands record_confidences."""
    runner = _engine("dflash", "auto", confidences=torch.full((MAX_REQS, K), 0.5))
    assert runner.adaptive_verification.estimate is None
    assert runner.adaptive_verification.score_kind == "logits"
    ngram = _engine("ngram")
    assert ngram.speculator.draft_token_confidence_probs.shape == (MAX_REQS, K)
    with pytest.raises(ValueError, match="req_idx must be a request slot"):
        ngram.adaptive_verification.estimate.reset(MAX_REQS)
