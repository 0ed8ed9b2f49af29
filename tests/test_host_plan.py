"""The controller's compiled host arithmetic (csrc/cpu/host_plan.cpp) against its NumPy forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ascend_spec.backend import host_compiler
from ascend_spec.graph.calibration import SurvivalCalibration
from ascend_spec.graph.host_plan import (
    FULL,
    PLAIN,
    SEARCH,
    HostPlan,
    StepPlan,
    numpy_accumulate,
    numpy_bounds,
    numpy_factors,
)

pytestmark = pytest.mark.skipif(host_compiler() is None, reason="the compiled form needs a C++ compiler")


def _survivals(draw, b: int, k: int) -> np.ndarray:  # noqa: ANN001
    conf = draw(hnp.arrays(np.float32, (b, k), elements=st.floats(0.0, 1.0, width=32)))
    return np.cumprod(conf, axis=1, dtype=np.float32)


@st.composite
def plans(draw):  # noqa: ANN001, ANN201
    b, k = draw(st.integers(1, 40)), draw(st.integers(1, 16))
    factors = draw(
        st.none() | hnp.arrays(np.float64, (k,), elements=st.floats(0.01, 4.0, allow_subnormal=False))
    )
    return _survivals(draw, b, k), factors


@settings(max_examples=150, deadline=None)
@given(plans())
def test_bounds_match_numpy(case) -> None:  # noqa: ANN001
    survival, factors = case
    got = HostPlan(survival.shape[1], native=True).bounds(survival, factors)
    want = numpy_bounds(survival, factors)
    assert got[0] == pytest.approx(want[0], rel=1e-12, abs=0)  # a min of the same products: exact in practice
    assert got[1] == pytest.approx(want[1], rel=1e-5, abs=1e-9)  # fp32 NumPy column sums vs fp64 here


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 16).flatmap(lambda k: st.tuples(st.just(k), st.integers(0, 30), st.data())))
def test_factors_and_accumulate_match_numpy(case) -> None:  # noqa: ANN001
    k, n, data = case
    rows = _survivals(data.draw, n, k) if n else np.zeros((0, k), np.float32)
    verified = np.array(data.draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), dtype=np.int64)
    accepted = np.minimum(
        verified, np.array(data.draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), np.int64)
    )
    start = data.draw(hnp.arrays(np.float64, (2, k), elements=st.floats(0.0, 50.0)))
    native = HostPlan(k, native=True)
    sums = [start[0].copy(), start[1].copy(), np.zeros(k)]
    native.bind_sums(*sums)
    if n:
        native.accumulate(rows, verified, accepted)
    got = native.factors(0.9, 1.5)
    want_p, want_o = start[0].copy(), start[1].copy()
    if n:
        numpy_accumulate(rows, verified, accepted, want_p, want_o)
    want = numpy_factors(want_p, want_o, 0.9, 1.5)
    np.testing.assert_allclose(sums[0], want_p, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sums[1], want_o, rtol=1e-12)  # counts added one at a time here
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got is sums[2]


def test_calibration_and_controller_run_the_compiled_form_and_numpy_agrees() -> None:
    """The same plans and observations through a compiled and a NumPy calibration: same factors."""
    k = 3
    compiled, plain = SurvivalCalibration(k), SurvivalCalibration(k)
    plain._host = HostPlan(k, native=False)
    plain._host.bind_sums(plain.predicted, plain.observed, plain._factors)
    with pytest.raises(AttributeError):
        compiled.predicted = np.zeros(k)  # bound by address: never replaced
    assert compiled._host.native and not plain._host.native
    rng = np.random.default_rng(0)
    for _ in range(30):
        rows = np.cumprod(rng.uniform(0.3, 1.0, (5, k)).astype(np.float32), axis=1)
        verified = rng.integers(0, k + 1, 5)
        accepted = np.minimum(verified, rng.integers(0, k + 1, 5))
        np.testing.assert_allclose(compiled.next_factors(), plain.next_factors(), rtol=1e-12)
        compiled.observe(rows, verified, accepted)
        plain.observe(rows, verified, accepted)
    np.testing.assert_allclose(compiled.factors, plain.factors, rtol=1e-12)


def test_a_bad_mode_is_an_error_not_a_silent_no_op() -> None:
    host = HostPlan(3, native=True)
    host._args.mode = 7
    with pytest.raises(RuntimeError, match="native CPU kernel host_plan failed with status 2"):
        host._run()


def test_other_layouts_take_the_numpy_form() -> None:
    host = HostPlan(3, native=True)

    def refuse(args):  # noqa: ANN001, ANN202 - any native call fails the test
        raise AssertionError("the compiled routine ran on a layout it does not take")

    host._fn = refuse
    s64 = np.cumprod(np.full((2, 3), 0.9), axis=1)  # float64: NumPy
    assert host.bounds(s64, None) == numpy_bounds(s64, None)
    cols = np.asfortranarray(s64.astype(np.float32))
    assert host.bounds(cols, np.ones(3)) == numpy_bounds(cols, np.ones(3))


@st.composite
def steps(draw):  # noqa: ANN001, ANN201
    """A step: survivals, a calibration's start (or none), the last step's deferred bookkeeping, the bounds."""
    b, k = draw(st.integers(1, 24)), draw(st.integers(1, 12))
    survival = _survivals(draw, b, k)
    calibrate = draw(st.booleans())
    start = draw(hnp.arrays(np.float64, (2, k), elements=st.floats(0.0, 50.0))) if calibrate else None
    n = draw(st.integers(0, 20)) if calibrate else 0
    rows = _survivals(draw, n, k) if n else np.zeros((0, k), np.float32)
    verified = np.array(draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), dtype=np.int64)
    accepted = np.minimum(
        verified, np.array(draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), np.int64)
    )
    bounds = draw(
        st.tuples(st.floats(0.0, 1.2) | st.just(np.inf), st.floats(0.0, 3.0 * b * k) | st.just(np.inf))
    )
    return survival, start, (rows, verified, accepted), bounds


@settings(max_examples=150, deadline=None)
@given(steps())
def test_step_plan_matches_its_parts(case) -> None:  # noqa: ANN001
    """StepPlan's one call = bookkeeping, then decayed factors, then bounds and their decision (NumPy forms),
    and its ring slot holds the step's survivals."""
    survival, start, pending, (full_above, plain_below) = case
    k = survival.shape[1]
    buffer = np.zeros_like(survival)
    calibration = None
    if start is not None:
        calibration = SurvivalCalibration(k, decay=0.9, prior=1.5)
        calibration.predicted[:], calibration.observed[:] = start
        if pending[0].shape[0]:
            calibration.defer(*pending)
    plan = StepPlan(buffer, None, calibration)
    buffer[:] = survival  # what a scorer writes before the call
    decision = plan(full_above, plain_below)
    assert calibration is None or calibration.take_pending() is None  # applied by the call
    factors = None
    if start is not None:
        want_p, want_o = start[0].copy(), start[1].copy()
        if pending[0].shape[0]:
            numpy_accumulate(*pending, want_p, want_o)
        factors = numpy_factors(want_p, want_o, 0.9, 1.5)
        np.testing.assert_allclose(calibration.predicted, want_p, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(calibration.observed, want_o, rtol=1e-12)
        np.testing.assert_allclose(plan.factors, factors, rtol=1e-12)
    smallest, total = numpy_bounds(survival, factors)
    got = plan.bounds
    assert got[0] == pytest.approx(smallest, rel=1e-12, abs=0)
    assert got[1] == pytest.approx(total, rel=1e-5, abs=1e-9)
    if got[0] > full_above:
        assert decision == FULL
    elif got[1] < plain_below:
        assert decision == PLAIN
    else:
        assert decision == SEARCH
    np.testing.assert_array_equal(plan.predictions, survival)


def test_step_plan_ring_keeps_each_step_until_the_plan_after_next() -> None:
    """The predictions of a step survive the next two plans (its bookkeeping rides on the plan after next)."""
    buffer = np.zeros((2, 3), np.float32)
    plan = StepPlan(buffer)
    kept = []
    for step in range(5):
        buffer[:] = 0.1 * (step + 1)
        plan(np.inf, 0.0)
        kept.append(plan.predictions)
        if step >= 2:
            np.testing.assert_array_equal(kept[step - 2], np.full((2, 3), 0.1 * (step - 1), np.float32))


def test_step_plan_refuses_bad_buffers_and_reports_a_failing_scorer() -> None:
    with pytest.raises(ValueError, match="survival must be a C-contiguous float32"):
        StepPlan(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="B >= 1 rows"):
        StepPlan(np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match="calibration is for K=4"):
        StepPlan(np.zeros((2, 3), np.float32), None, SurvivalCalibration(4))
    import ctypes

    from ascend_spec.cpu import native

    # a scorer whose status is non-zero: the host plan's own entry called with a bad mode
    bad = HostPlan(3, native=True)
    bad._args.mode = 7
    fn = ctypes.cast(native.entry("host_plan", type(bad._args)), ctypes.c_void_p).value
    plan = StepPlan(np.zeros((2, 3), np.float32), (fn, ctypes.addressof(bad._args)))
    with pytest.raises(RuntimeError, match="status 18"):  # 16 + the scorer's status 2
        plan(np.inf, 0.0)


def test_step_plan_applies_bookkeeping_of_another_layout_through_the_calibration() -> None:
    """Deferred rows the compiled call does not take (float64, column-major) still land before the decay."""
    k = 3
    rows = np.asfortranarray(np.cumprod(np.full((4, k), 0.8), axis=1))  # float64, not C-contiguous
    verified = np.array([3, 2, 1, 3], np.int64)
    accepted = np.array([1, 2, 0, 3], np.int64)
    stepped, plain = SurvivalCalibration(k), SurvivalCalibration(k)
    stepped.defer(rows, verified, accepted)
    plain.accumulate(rows, verified, accepted)
    plan = StepPlan(np.full((2, k), 0.5, np.float32), None, stepped)
    plan(np.inf, 0.0)
    np.testing.assert_allclose(plan.factors, plain.next_factors(), rtol=1e-12)
    np.testing.assert_allclose(stepped.predicted, plain.predicted, rtol=1e-12)
    np.testing.assert_array_equal(stepped.observed, plain.observed)
