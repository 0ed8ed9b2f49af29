"""The controller's per-step host arithmetic on ``[B, K]`` survivals, compiled where a C++ compiler exists.

A synchronous engine step plans on the host between its one survival read and the draft lengths it hands the
scheduler, while the device (or, on a CPU engine, the same core) waits: the plan's two bounds
(:meth:`BudgetController.plan_lengths`), the calibration's decayed factors and, after the step, its acceptance
bookkeeping (:class:`~ascend_spec.graph.calibration.SurvivalCalibration`). As NumPy that is ~20 calls on arrays of
a few dozen numbers: ~1 us each warm, ~5 us each right after a forward has evicted the caches, i.e. 2-5 % of a
small model's step. ``csrc/cpu/host_plan.cpp`` does each part as one ctypes call into a library built like the
cpu backend's kernels (:mod:`ascend_spec.cpu.native`).

:class:`HostPlan` holds one bound arguments struct (one per controller or calibration, used from one thread,
like their own state). Without a compiler, or with ``ASCEND_SPEC_BACKEND`` naming a backend other than
``cpu``/``auto``, it runs the NumPy forms below, which are also the tests' oracle.
"""

from __future__ import annotations

import os

import numpy as np

from ascend_spec.backend import BACKEND_ENV, host_compiler
from ascend_spec.cpu.native import arguments_struct

KERNEL = "host_plan"
Arguments = arguments_struct(
    "HostPlanArgs",
    (
        "mode",
        "survival",
        "num_rows",
        "max_drafts",
        "factors",
        "predicted",
        "observed",
        "verified",
        "accepted",
        "out",
        "scorer_fn",
        "scorer_args",
        "pending_rows",
        "num_pending",
        "ring",
        "decision",
    ),
    floats=("decay", "prior", "full_above", "plain_below"),
)
BOUNDS, FACTORS, ACCUMULATE, STEP = 0, 1, 2, 3
#: StepPlan decisions: the caller searches the total, every draft is verified, nothing is.
SEARCH, FULL, PLAIN = 0, 1, 2


def numpy_bounds(survival: np.ndarray, factors: np.ndarray | None) -> tuple[float, float]:
    """(smallest calibrated survival, calibrated sum): ``min_b,i s[b, i] f_i`` and ``sum_i f_i sum_b s[b, i]``
    (survivals are non-increasing along K, so without factors the smallest is the last column's)."""
    if factors is None:
        return float(survival[:, -1].min()), float(survival.sum())
    return float((survival.min(axis=0) * factors).min()), float(survival.sum(axis=0) @ factors)


def numpy_factors(predicted: np.ndarray, observed: np.ndarray, decay: float, prior: float) -> np.ndarray:
    """Decay both sums in place and return ``(observed + prior) / (predicted + prior)``."""
    predicted *= decay
    observed *= decay
    return (observed + prior) / (predicted + prior)


def numpy_accumulate(
    rows: np.ndarray, verified: np.ndarray, accepted: np.ndarray, predicted: np.ndarray, observed: np.ndarray
) -> None:
    """Add the verified positions' predicted survivals and the accepted positions' counts to the sums."""
    positions = np.arange(predicted.shape[0])[None, :]
    if verified.min() >= predicted.shape[0]:  # every request verified every position (full blocks)
        predicted += rows.sum(axis=0, dtype=np.float64)
    else:
        predicted += np.where(positions < verified[:, None], rows, 0.0).sum(axis=0, dtype=np.float64)
    observed += (positions < accepted[:, None]).sum(axis=0)


def native_available() -> bool:
    """Whether :class:`HostPlan` runs the compiled routine here (module docstring)."""
    env = os.environ.get(BACKEND_ENV, "").strip()
    return host_compiler() is not None and env in ("", "auto", "cpu")


class HostPlan:
    """The three host parts for ``max_drafts`` K, compiled or NumPy (module docstring)."""

    def __init__(self, max_drafts: int, native: bool | None = None) -> None:
        self.max_drafts = max_drafts
        self.native = native_available() if native is None else native
        self._out = np.zeros(2)
        self._fn = None
        if self.native:
            from ascend_spec.cpu import native as cpu_native

            self._fn = cpu_native.bound(KERNEL, Arguments)
            self._args = Arguments(max_drafts=max_drafts, out=self._out.ctypes.data)

    def bounds(self, survival: np.ndarray, factors: np.ndarray | None) -> tuple[float, float]:
        """:func:`numpy_bounds` of ``survival [B, K]`` (fp32 C-contiguous in the compiled form, else NumPy)."""
        if self._fn is None or survival.dtype != np.float32 or not survival.flags.c_contiguous:
            return numpy_bounds(survival, factors)
        if factors is not None and (factors.dtype != np.float64 or not factors.flags.c_contiguous):
            return numpy_bounds(survival, factors)
        a = self._args
        a.mode, a.survival, a.num_rows = BOUNDS, survival.ctypes.data, survival.shape[0]
        a.factors = 0 if factors is None else factors.ctypes.data
        self._run()
        return float(self._out[0]), float(self._out[1])

    def bind_sums(self, predicted: np.ndarray, observed: np.ndarray, factors_out: np.ndarray) -> None:
        """The calibration's fp64 [K] sums and factor buffer, bound once (their addresses never change)."""
        self._sums = (predicted, observed, factors_out)
        if self._fn is not None:
            self._sum_ptrs = (predicted.ctypes.data, observed.ctypes.data, factors_out.ctypes.data)

    def factors(self, decay: float, prior: float) -> np.ndarray:
        """:func:`numpy_factors` on the bound sums, into the bound factor buffer (returned)."""
        predicted, observed, out = self._sums
        if self._fn is None:
            out[:] = numpy_factors(predicted, observed, decay, prior)
            return out
        a = self._args
        a.mode, a.decay, a.prior = FACTORS, decay, prior
        a.predicted, a.observed, a.factors = self._sum_ptrs
        self._run()
        return out

    def accumulate(self, rows: np.ndarray, verified: np.ndarray, accepted: np.ndarray) -> None:
        """:func:`numpy_accumulate` into the bound sums (``rows`` fp32 [N, K], counts int64 [N])."""
        predicted, observed, _ = self._sums
        if (
            self._fn is None
            or rows.dtype != np.float32
            or not rows.flags.c_contiguous
            or verified.dtype != np.int64
            or accepted.dtype != np.int64
        ):
            numpy_accumulate(rows, verified, accepted, predicted, observed)
            return
        vc, ac = np.ascontiguousarray(verified), np.ascontiguousarray(accepted)
        a = self._args
        a.mode, a.survival, a.num_rows = ACCUMULATE, rows.ctypes.data, rows.shape[0]
        a.verified, a.accepted = vc.ctypes.data, ac.ctypes.data
        a.predicted, a.observed = self._sum_ptrs[:2]
        self._run()

    def _run(self) -> None:
        self._fn(self._args)


class StepPlan:
    """One planned engine step's host part as one compiled call (``csrc/cpu/host_plan.cpp`` mode 3).

    In that call: an optional native scorer writes this step's ``[B, K]`` survivals into ``survival`` (a CPU
    engine's :class:`~ascend_spec.ops.max_softmax_confidence.cpu.DraftSurvival`), the calibration's deferred
    bookkeeping of the last verified step is applied (:meth:`SurvivalCalibration.defer`), the survivals are
    copied into the next slot of a small ring (the predictions a later step's bookkeeping reads, so no per-step
    array), the calibration decays its sums into its factors, and the controller's two bounds settle the step:
    :data:`FULL`, :data:`PLAIN`, or :data:`SEARCH` (the caller searches the total). Every part equals its
    separate form (:class:`HostPlan`, the calibration's NumPy forms; tested), so a step planned here decides what
    the separate calls decide. Python pays one call and a few struct fields instead of ~6 calls and their glue,
    which on a CPU engine's decode step (caches cold after the forward) was ~2 % of a small model's step.

    Needs the compiled routine (:func:`native_available`); one instance per (B, K) and engine thread.
    """

    RING = 3  # predictions live until the plan after next (the bookkeeping of their step rides on it)

    def __init__(
        self,
        survival: np.ndarray,
        scorer: tuple[int, int] | None = None,
        calibration=None,  # noqa: ANN001 - a SurvivalCalibration (not imported: it imports this module)
    ) -> None:
        if survival.ndim != 2 or survival.dtype != np.float32 or not survival.flags.c_contiguous:
            raise ValueError(
                f"survival must be a C-contiguous float32 [B, K] array; got {survival.dtype} {list(survival.shape)}"
            )
        b, k = survival.shape
        if b < 1 or k < 1:
            raise ValueError(f"survival must have B >= 1 rows and K >= 1 columns; got {list(survival.shape)}")
        from ascend_spec.cpu import native as cpu_native

        self._run = cpu_native.bound(KERNEL, Arguments)
        self.survival = survival
        self.calibration = calibration
        self._out = np.zeros(2)
        self._ring = [np.zeros((b, k), np.float32) for _ in range(self.RING)]
        self._ring_ptrs = [r.ctypes.data for r in self._ring]
        self._slot = 0
        self.predictions = self._ring[0]
        fn, fn_args = scorer if scorer is not None else (0, 0)
        self._scorer_fn = fn
        self._args = Arguments(
            mode=STEP, survival=survival.ctypes.data, num_rows=b, max_drafts=k, out=self._out.ctypes.data,
            scorer_fn=fn, scorer_args=fn_args,
        )  # fmt: skip
        self.factors = None
        if calibration is not None:
            if calibration.max_drafts != k:
                raise ValueError(f"calibration is for K={calibration.max_drafts}, the survivals have K={k}")
            predicted, observed, factors = calibration.sums()
            a = self._args
            a.predicted, a.observed, a.factors = (
                predicted.ctypes.data,
                observed.ctypes.data,
                factors.ctypes.data,
            )
            a.decay, a.prior = calibration.decay, calibration.prior
            self.factors = factors

    @property
    def bounds(self) -> tuple[float, float]:
        """The last call's (smallest calibrated survival, calibrated sum), as :meth:`HostPlan.bounds`."""
        return float(self._out[0]), float(self._out[1])

    def __call__(self, full_above: float, plain_below: float, score: bool = True) -> int:
        """Plan the step (class docstring); :attr:`predictions` then holds its survivals, :attr:`factors` the
        calibration's factors of this plan. ``score=False``: the survivals are already written (the scorer ran
        earlier this step, e.g. with the drafter's sampling), the call plans only."""
        a = self._args
        a.full_above, a.plain_below = full_above, plain_below
        a.scorer_fn = self._scorer_fn if score else 0
        pending = None if self.calibration is None else self.calibration.take_pending()
        if pending is None:
            a.num_pending = 0
        else:
            rows, verified, accepted = pending
            if (
                rows.dtype != np.float32
                or not rows.flags.c_contiguous
                or verified.dtype != np.int64
                or accepted.dtype != np.int64
                or not (verified.flags.c_contiguous and accepted.flags.c_contiguous)
            ):  # a layout the call does not take: the calibration's own bookkeeping, before the decay
                self.calibration.accumulate(rows, verified, accepted)
                a.num_pending = 0
            else:
                a.pending_rows, a.num_pending = rows.ctypes.data, rows.shape[0]
                a.verified, a.accepted = verified.ctypes.data, accepted.ctypes.data
        slot = self._slot
        self._slot = (slot + 1) % self.RING
        a.ring = self._ring_ptrs[slot]
        self._run(a)
        self.predictions = self._ring[slot]
        return a.decision
