"""SurvivalCalibration: observed / predicted acceptance per draft position, applied to the next plans."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph.calibration import SurvivalCalibration


def test_without_evidence_survivals_are_unchanged() -> None:
    cal = SurvivalCalibration(3)
    s = np.array([[0.9, 0.5, 0.1], [1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(cal.apply(s), s)
    np.testing.assert_array_equal(cal.factors, np.ones(3))


def test_a_confident_wrong_drafter_is_scaled_down_per_position() -> None:
    cal = SurvivalCalibration(3, decay=0.9, prior=2.0)
    predicted = np.full((4, 3), 0.9) ** np.arange(1, 4)  # 0.9, 0.81, 0.729 for every request
    for _ in range(50):
        cal.apply(predicted)
        cal.observe(predicted, np.full(4, 3), np.array([1, 0, 0, 0]))  # one first draft accepted in four
    # f_i = (A_i + n0) / (P_i + n0) with A, P the decayed sums: each plan decays, then its step adds.
    steady = sum(0.9**j for j in range(50))
    a = np.array([1.0, 0.0, 0.0]) * steady
    p = predicted.sum(axis=0) * steady
    np.testing.assert_allclose(cal.factors, (a + 2.0) / (p + 2.0), rtol=1e-9)
    out = cal.apply(predicted)
    assert (out[:, 0] < 0.3).all() and (out[:, 1:] < 0.06).all()  # observed: 0.25, then 0


def test_a_perfect_drafter_keeps_full_survivals() -> None:
    cal = SurvivalCalibration(3)
    predicted = np.full((2, 3), 0.999)
    for _ in range(20):
        cal.apply(predicted)
        cal.observe(predicted, np.array([3, 3]), np.array([3, 3]))
    assert (cal.factors >= 1.0).all()
    np.testing.assert_array_equal(cal.apply(predicted), np.minimum(predicted * cal.factors, 1.0))


def test_only_verified_positions_count() -> None:
    cal = SurvivalCalibration(3, decay=0.5, prior=1.0)
    cal.observe(np.array([[0.8, 0.6, 0.4]]), np.array([1]), np.array([1]))
    np.testing.assert_allclose(cal.predicted, [0.8, 0.0, 0.0])
    np.testing.assert_allclose(cal.observed, [1.0, 0.0, 0.0])


def test_evidence_ages_so_a_drafter_is_tried_again() -> None:
    cal = SurvivalCalibration(2, decay=0.8, prior=1.0)
    wrong = np.array([[0.95, 0.9]])
    for _ in range(10):
        cal.apply(wrong)
        cal.observe(wrong, np.array([2]), np.array([0]))
    low = cal.factors.copy()
    assert (low < 0.3).all()
    for _ in range(40):  # plans that verify nothing (plain decoding): no observations, only decay
        cal.apply(wrong)
    assert (cal.factors > 0.95).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4),
    st.lists(st.floats(0.0, 3.0), min_size=4, max_size=4),
)
def test_calibrated_survivals_stay_survivals(row: list[float], factors: list[float]) -> None:
    k = len(row)
    cal = SurvivalCalibration(k, prior=1.0)
    cal.predicted[:] = 1.0  # in place: the sums are bound by address
    cal.observed[:] = np.asarray(factors) * 2 - 1  # factors (observed + 1) / 2 before the decay
    s = np.minimum.accumulate(np.asarray([row]), axis=1)
    out = cal.apply(s)
    assert ((out >= 0) & (out <= 1)).all()
    assert (np.diff(out, axis=1) <= 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_drafts": 0}, "max_drafts must be >= 1"),
        ({"max_drafts": 3, "decay": 1.0}, "decay must be a float in (0, 1); got 1.0"),
        ({"max_drafts": 3, "prior": 0}, "prior must be a positive number of pseudo-observations; got 0"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SurvivalCalibration(**kwargs)


def test_bad_observations_are_refused() -> None:
    cal = SurvivalCalibration(3)
    with pytest.raises(ValueError, match=re.escape("predicted must have shape [N, 3]; got [2, 2]")):
        cal.observe(np.zeros((2, 2)), np.array([1, 1]), np.array([0, 0]))
    with pytest.raises(ValueError, match=re.escape("verified must lie in [0, 3]; got [4]")):
        cal.observe(np.zeros((1, 3)), np.array([4]), np.array([0]))
    with pytest.raises(ValueError, match=re.escape("accepted must lie in [0, verified]")):
        cal.observe(np.zeros((1, 3)), np.array([1]), np.array([2]))
    with pytest.raises(ValueError, match=re.escape("verified and accepted must have shape [1]")):
        cal.observe(np.zeros((1, 3)), np.array([1, 1]), np.array([0]))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.lists(
                st.tuples(st.integers(0, k), st.integers(0, k), st.floats(0.0, 1.0)), min_size=1, max_size=9
            ),
        )
    )
)
def test_accumulate_is_observe_without_its_checks(case) -> None:  # noqa: ANN001
    """The engine's unchecked entry adds exactly what observe() adds, ragged and full-block steps alike."""
    k, rows = case
    verified = np.array([max(v, a) for v, a, _ in rows], dtype=np.int64)
    accepted = np.array([min(v, a) for v, a, _ in rows], dtype=np.int64)
    predicted = np.cumprod(np.array([[p] * k for *_, p in rows], dtype=np.float32), axis=1)
    checked, unchecked = SurvivalCalibration(k), SurvivalCalibration(k)
    for cal in (checked, unchecked):
        cal.next_factors()
    checked.observe(predicted, verified, accepted)
    unchecked.accumulate(predicted, verified, accepted)
    np.testing.assert_allclose(unchecked.predicted, checked.predicted, rtol=1e-12)
    np.testing.assert_array_equal(unchecked.observed, checked.observed)
    full = np.full(len(rows), k, dtype=np.int64)  # the full-block shortcut
    checked.observe(predicted, full, accepted)
    unchecked.accumulate(predicted, full, accepted)
    np.testing.assert_allclose(unchecked.predicted, checked.predicted, rtol=1e-12)
    np.testing.assert_array_equal(unchecked.observed, checked.observed)


def test_deferred_bookkeeping_is_applied_before_the_next_plan_or_a_read() -> None:
    """defer() then next_factors() = accumulate() then next_factors(); a read of the sums, a second defer or an
    accumulate apply what is pending first; take_pending hands it over once."""
    rng = np.random.default_rng(1)
    k = 4
    now, later = SurvivalCalibration(k), SurvivalCalibration(k)
    for _ in range(6):
        rows = np.cumprod(rng.uniform(0.2, 1.0, (3, k)).astype(np.float32), axis=1)
        verified = rng.integers(1, k + 1, 3)
        accepted = np.minimum(verified, rng.integers(0, k + 1, 3))
        now.accumulate(rows, verified, accepted)
        later.defer(rows, verified, accepted)
        np.testing.assert_allclose(later.next_factors(), now.next_factors(), rtol=1e-12)
    rows = np.full((1, k), 0.5, np.float32)
    one, zero = np.array([k]), np.array([0])
    later.defer(rows, one, zero)
    assert later.observed.sum() == pytest.approx(now.observed.sum())  # the read applied it (nothing observed)
    assert later.predicted.sum() == pytest.approx(now.predicted.sum() + 0.5 * k)
    assert later.take_pending() is None
    later.defer(rows, one, one)
    later.defer(rows, one, zero)  # the first is applied, the second pending
    assert later.take_pending()[2] is zero
    assert later.observed.sum() == pytest.approx(now.observed.sum() + k)  # all k accepted once
