"""The online acceptance estimate (ascend_spec.vllm.acceptance_estimate) against a float64 reference of the same
rule, its index math under hypothesis (slots, positions, partial and zero drafts, resets), its convergence to the
true rates of synthetic Bernoulli acceptances, and the request-slot map."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import EstimateReference
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator, RequestSlots


def _ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@st.composite
def _programs(draw):  # noqa: ANN001, ANN202
    s = draw(st.integers(1, 6))
    k = draw(st.integers(1, 5))
    ops = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["observe", "observe", "estimate", "estimate", "idle", "reset"]))
        slots = draw(
            st.lists(st.integers(0, s - 1), min_size=0 if kind == "reset" else 1, max_size=s, unique=True)
        )
        if kind == "observe":
            rows = []
            for slot in slots:
                v = draw(st.integers(0, k))
                rows.append((slot, v, draw(st.integers(0, v + 1))))  # v + 1: clipped to v
            ops.append(("observe", rows))
        elif kind == "estimate":
            conf = None
            if draw(st.booleans()):
                conf = np.array(
                    [[draw(st.floats(0.0, 1.0, width=32)) for _ in range(k)] for _ in slots], dtype=np.float32
                )
            available = draw(
                st.none() | st.lists(st.integers(0, k), min_size=len(slots), max_size=len(slots))
            )
            ops.append(("estimate", slots, conf, available))
        else:
            ops.append((kind, slots))
    return s, k, ops


@given(
    program=_programs(),
    decay=st.sampled_from([0.5, 0.9, 1.0]),
    trial_decay=st.sampled_from([0.5, 0.8, 1.0]),
    population_decay=st.sampled_from([0.9, 0.99]),
    n0=st.sampled_from([0.5, 1.0, 3.0]),
    r0=st.sampled_from([0.0, 0.6, 1.0]),
)
@settings(max_examples=150, deadline=None)
def test_estimator_matches_the_float64_reference(  # noqa: ANN001
    program, decay, trial_decay, population_decay, n0, r0
) -> None:
    s, k, ops = program
    est = AcceptanceEstimator(
        s,
        k,
        decay=decay,
        trial_decay=trial_decay,
        population_decay=population_decay,
        prior_weight=n0,
        initial_rate=r0,
    )
    ref = EstimateReference(s, k, decay, population_decay, n0, r0, trial_decay=trial_decay)
    for op in ops:
        if op[0] == "observe":
            rows = op[1]
            est.observe(_ids([r[0] for r in rows]), _ids([r[1] for r in rows]), _ids([r[2] for r in rows]))
            ref.observe(rows)
        elif op[0] == "idle":
            est.observe()
            ref.observe(None)
        elif op[0] == "reset":
            est.reset(_ids(op[1]))
            ref.reset(op[1])
        else:
            _, slots, conf, available = op
            got = est.estimate(
                _ids(slots),
                None if conf is None else torch.from_numpy(conf),
                None if available is None else _ids(available),
            )
            want = ref.estimate(slots, conf, available)
            assert got.dtype == torch.float32 and got.shape == (len(slots), k)
            np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(est.hits.numpy(), ref.h, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(est.trials.numpy(), ref.n, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(est.population.numpy(), np.stack([ref.hh, ref.nn]), rtol=2e-5, atol=1e-5)


def _simulate(
    true_rates: np.ndarray, conf: np.ndarray | None, steps: int, seed: int, decay: float
) -> np.ndarray:
    """Every slot verifies K drafts each step, accepted draft by draft with its true conditional rate; returns
    the mean estimate [S, K] over the last three quarters of the steps."""
    s, k = true_rates.shape
    est = AcceptanceEstimator(s, k, decay=decay, trial_decay=1.0)
    rng = np.random.default_rng(seed)
    slots = torch.arange(s)
    verified = torch.full((s,), k, dtype=torch.int64)
    total = np.zeros((s, k))
    kept = 0
    for step in range(steps):
        q = est.estimate(slots, None if conf is None else torch.from_numpy(conf)).numpy()
        if step >= steps // 4:
            total += q
            kept += 1
        passes = rng.random((s, k)) < true_rates
        accepted = np.where(passes.all(axis=1), k, passes.argmin(axis=1))  # first rejection
        est.observe(slots, verified, torch.from_numpy(accepted))
    return total / kept


@given(rates=st.lists(st.floats(0.35, 0.95), min_size=4, max_size=4), seed=st.integers(0, 2**16))
@settings(max_examples=4, deadline=None, derandomize=True)  # a statistical bound: fixed draws
def test_estimate_converges_to_each_requests_true_rate(rates: list[float], seed: int) -> None:
    """Four requests with their own conditional acceptance at the first two positions: each request's estimate
    settles on its own rate (not the population's mean). (Position 1 is tried only after position 0 passed:
    with rates from 0.35 each request has ~70 decayed trials there, its estimate within a few hundredths.)"""
    true = np.array([[p, 0.8] for p in rates])
    mean = _simulate(true, None, steps=1600, seed=seed, decay=0.99)
    np.testing.assert_allclose(mean, true, atol=0.06)


def test_combined_estimate_converges_to_the_true_rate_whatever_the_drafters_confidence() -> None:
    """With the drafter's confidences c (over- and under-confident, constant per request) the estimate c * r
    converges to the observed rate: r learns observed / predicted per request."""
    true = np.array([[0.2, 0.5], [0.7, 0.9], [0.5, 0.3]])
    conf = np.array([[0.9, 0.9], [0.35, 0.45], [0.5, 0.6]], dtype=np.float32)
    mean = _simulate(true, conf, steps=2000, seed=3, decay=0.99)
    np.testing.assert_allclose(mean, true, atol=0.06)


def test_partial_drafts_are_no_evidence_and_rejections_are() -> None:
    """A request that verified 1 of K drafts and accepted it gave evidence at position 0 only: positions 1.. keep
    the prior; one that verified 3 and accepted 0 failed at position 0 and nothing was decided after it."""
    est = AcceptanceEstimator(
        2, 3, decay=1.0, trial_decay=1.0, population_decay=1.0, prior_weight=1.0, initial_rate=1.0
    )
    est.observe(_ids([0, 1]), _ids([1, 3]), _ids([1, 0]))
    assert est.hits.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert est.trials.tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    q = est.estimate(_ids([0, 1]))
    g0 = (1.0 + 1.0) / (2.0 + 1.0)  # the population: one success, two trials, one pseudo-trial at rate 1
    torch.testing.assert_close(q[:, 0], torch.tensor([(1 + g0) / 2, g0 / 2]))
    torch.testing.assert_close(q[:, 1:], torch.ones(2, 2))  # no evidence past position 0: the prior (rate 1)


def test_a_reused_slot_starts_from_the_population_prior() -> None:
    est = AcceptanceEstimator(2, 2, decay=1.0)
    for _ in range(5):
        est.observe(_ids([0, 1]), _ids([2, 2]), _ids([0, 2]))  # slot 0 always rejects, slot 1 always accepts
    before = est.estimate(_ids([0, 1]))
    assert before[0, 0] < 0.3 < 0.9 < before[1, 0]
    est.reset(_ids([0]))
    after = est.estimate(_ids([0]))
    torch.testing.assert_close(after[0], est.population_rate().clamp(max=1.0))


def test_evidence_ages_while_a_request_verifies_nothing() -> None:
    """A rejected request that then verifies nothing drifts back to the prior, so the plan tries it again."""
    est = AcceptanceEstimator(1, 1, decay=0.8, trial_decay=1.0, population_decay=1.0)
    for _ in range(3):
        est.observe(_ids([0]), _ids([1]), _ids([0]))
    low = float(est.estimate(_ids([0]))[0, 0])
    for _ in range(20):
        est.observe()
    high = float(est.estimate(_ids([0]))[0, 0])
    g = float(est.population_rate()[0])
    assert low < high and high == pytest.approx(g, abs=0.02)


def _trials_until_dropped(trial_decay: float, history: int = 100, below: float = 0.3) -> int:
    """A request accepted at position 0 for ``history`` steps, then rejected every step: its trials until its
    estimate falls below ``below`` (the population alone keeps a high prior: it saw mostly successes)."""
    est = AcceptanceEstimator(
        1, 1, decay=0.97, trial_decay=trial_decay, population_decay=1.0, prior_weight=0.5
    )
    one = _ids([0])
    for _ in range(history):
        est.observe(one, _ids([1]), _ids([1]))
    for trials in range(1, 200):
        est.observe(one, _ids([1]), _ids([0]))
        if float(est.estimate(one)[0, 0]) < below:
            return trials
    raise AssertionError("the estimate never dropped")


def test_a_request_whose_drafts_stop_being_accepted_is_noticed_within_a_few_trials() -> None:
    """Ageing by trial bounds what a long history weighs: with the default ``trial_decay`` (0.8) a request accepted
    for 100 steps that then fails every draft stops being planned within a handful of its own trials, where ageing
    by time alone (``trial_decay`` 1, ``decay`` 0.97) takes several times as many."""
    fast = _trials_until_dropped(0.8)
    slow = _trials_until_dropped(1.0)
    assert fast <= 8 and slow >= 3 * fast, (fast, slow)


def test_time_ageing_does_not_touch_the_rows_a_step_verified_twice() -> None:
    """In one step a row that verified drafts ages by ``decay`` and ``trial_decay`` once each, the others by
    ``decay`` only; the population by ``population_decay`` alone."""
    est = AcceptanceEstimator(3, 2, decay=0.9, trial_decay=0.5, population_decay=1.0)
    est.observe(_ids([0, 1, 2]), _ids([2, 2, 2]), _ids([2, 2, 2]))
    before = est.hits.clone()
    population = est.population.clone()
    est.observe(
        _ids([0, 2]), _ids([1, 0]), _ids([0, 0])
    )  # slot 0 rejects its one draft, slot 2 verified none
    torch.testing.assert_close(est.hits, before * torch.tensor([[0.9 * 0.5], [0.9], [0.9]]))
    torch.testing.assert_close(est.trials[0], torch.tensor([0.9 * 0.5 + 1.0, 0.9 * 0.5]))
    torch.testing.assert_close(est.population, population + torch.tensor([[0.0, 0.0], [1.0, 0.0]]))


def test_request_slots_keep_release_and_reuse() -> None:
    slots = RequestSlots(3)
    assert slots.assign(["a", "b"]) == ([0, 1], [0, 1])
    assert slots.assign(["b", "a"]) == ([1, 0], [])  # rows moved: the same slots, nothing reset
    assert slots.assign(["b", "c", "d"]) == ([1, 0, 2], [0, 2])  # a left: its slot goes to c (reset)
    with pytest.raises(ValueError, match="does not fit 3 estimator slots"):
        slots.assign(["w", "x", "y", "z"])
    with pytest.raises(ValueError, match="req_ids must be distinct"):
        slots.assign(["b", "b"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 0.0}, "decay must be a number in (0, 1]; got 0.0"),
        ({"population_decay": 1.5}, "population_decay must be a number in (0, 1]; got 1.5"),
        ({"trial_decay": -0.1}, "trial_decay must be a number in (0, 1]; got -0.1"),
        ({"prior_weight": 0}, "prior_weight must be a positive number of pseudo-trials; got 0"),
        ({"initial_rate": True}, "initial_rate must be a number in [0, 1]; got True"),
    ],
)
def test_bad_settings_name_the_argument(kwargs: dict, message: str) -> None:
    import re

    with pytest.raises(ValueError, match=re.escape(message)):
        AcceptanceEstimator(2, 2, **kwargs)


def test_bad_step_inputs_name_the_argument() -> None:
    est = AcceptanceEstimator(2, 2)
    with pytest.raises(ValueError, match="verified must have shape"):
        est.observe(_ids([0, 1]), _ids([1]), _ids([0, 0]))
    with pytest.raises(ValueError, match="slots must have dtype"):
        est.estimate(torch.tensor([0.0]))
    with pytest.raises(ValueError, match="confidence must have shape"):
        est.estimate(_ids([0]), torch.ones(1, 3))
