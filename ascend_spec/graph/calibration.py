"""Survival calibration: the drafter's predicted survivals scaled to the acceptance the target actually showed.

A drafter's confidences are only as good as its calibration: a confident but wrong drafter (peaked draft
distribution, drafts mostly rejected) predicts survivals near 1 and the controller over-verifies; an
under-confident one leaves accepted tokens unverified. After every verify step the engine reports, per request,
how many drafts it verified, how many were accepted, and the survivals that were predicted for them. Per draft
position i this keeps (exponentially decayed) sums of predicted survival P_i and of observed survival A_i (draft i
accepted, i.e. at least i+1 drafts accepted), over the requests that verified position i, and plans with

    p'_{b,i} = min(1, p_{b,i} * f_i),   f_i = (A_i + n0) / (P_i + n0),

made non-increasing along K again (a running minimum, so it stays a survival). ``n0`` pseudo-observations at
ratio 1 keep f = 1 until there is evidence; the defaults (decay 0.95, about the last 20 plans, and n0 = 1) let a
drafter whose drafts are never accepted fall to f ~ 0.05 (with 0.9 and n0 = 2 the prior held f above 0.18 and a
confident wrong drafter still looked worth a block at B = 1). Every plan decays the sums (also plans that verify nothing), so
evidence ages and a drafter that stopped being verified is eventually tried again at its own word: the
exploration a controller that settled on plain decoding needs to notice a drafter that got better.

Host arithmetic on [B, K] numbers, no device read: the decay, the factors and the bookkeeping run compiled where a
C++ compiler exists (:mod:`ascend_spec.graph.host_plan`), as NumPy otherwise.
"""

from __future__ import annotations

import numpy as np

from ascend_spec.checks import check_int
from ascend_spec.graph.host_plan import HostPlan


class SurvivalCalibration:
    """Per-position acceptance ratios observed / predicted, applied to the next plans (module docstring)."""

    def __init__(self, max_drafts: int, *, decay: float = 0.95, prior: float = 1.0) -> None:
        self.max_drafts = check_int("max_drafts", max_drafts, minimum=1)
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be a float in (0, 1); got {decay!r}")
        if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not prior > 0.0:
            raise ValueError(f"prior must be a positive number of pseudo-observations; got {prior!r}")
        self.decay = float(decay)
        self.prior = float(prior)
        # The sums and the factor buffer are bound to the compiled routine by address: updated in place only.
        self._predicted = np.zeros(self.max_drafts)
        self._observed = np.zeros(self.max_drafts)
        self._factors = np.ones(self.max_drafts)
        self._host = HostPlan(self.max_drafts)
        self._host.bind_sums(self._predicted, self._observed, self._factors)
        self._pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # defer()red bookkeeping

    @property
    def predicted(self) -> np.ndarray:
        """P_i, the decayed sum of predicted survival per draft position."""
        self._flush()
        return self._predicted

    @property
    def observed(self) -> np.ndarray:
        """A_i, the decayed sum of observed survival (draft i accepted) per draft position."""
        self._flush()
        return self._observed

    def sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(P, A, the factor buffer), fp64 [K] each, updated in place only: for a compiled step that decays and
        writes them itself (:class:`~ascend_spec.graph.host_plan.StepPlan`), after :meth:`take_pending`."""
        return self._predicted, self._observed, self._factors

    @property
    def factors(self) -> np.ndarray:
        """f_i per draft position (1 without evidence)."""
        return (self.observed + self.prior) / (self.predicted + self.prior)

    def apply(self, survival: np.ndarray) -> np.ndarray:
        """Calibrated ``[B, K]`` survivals (float64, in [0, 1], non-increasing along K); decays the evidence."""
        s = self._check_rows("survival", survival)
        out = np.minimum(s * self.next_factors(), 1.0)
        return np.minimum.accumulate(out, axis=1)

    def next_factors(self) -> np.ndarray:
        """A plan's f_i: what :meth:`apply` scales by, for a planner that applies them itself
        (``BudgetController.plan_lengths``); decays the evidence as every plan does. The array is reused: it
        holds these factors until the next call."""
        self._flush()
        return self._host.factors(self.decay, self.prior)

    def observe(self, predicted: np.ndarray, verified: np.ndarray, accepted: np.ndarray) -> None:
        """One verify step: ``predicted [N, K]`` survivals (as the drafter gave them, before calibration),
        ``verified [N]`` drafts each request verified, ``accepted [N]`` of them accepted."""
        p = self._check_rows("predicted", predicted)
        n = p.shape[0]
        v = np.asarray(verified, dtype=np.int64)
        a = np.asarray(accepted, dtype=np.int64)
        if v.shape != (n,) or a.shape != (n,):
            raise ValueError(
                f"verified and accepted must have shape [{n}] (one entry per predicted row); got "
                f"{list(v.shape)} and {list(a.shape)}"
            )
        if not n:
            return
        fewest = v.min()
        if fewest < 0 or v.max() > self.max_drafts:
            raise ValueError(f"verified must lie in [0, {self.max_drafts}]; got {v.tolist()}")
        if a.min() < 0 or (a > v).any():
            raise ValueError(
                f"accepted must lie in [0, verified]; got accepted {a.tolist()}, verified {v.tolist()}"
            )
        self.accumulate(p, v, a)

    def accumulate(self, predicted: np.ndarray, verified: np.ndarray, accepted: np.ndarray) -> None:
        """:meth:`observe` without its checks, for a caller whose rows it built itself (dynamic verification's
        end of step): ``predicted`` [N, K] float, ``verified`` / ``accepted`` [N] int64 with 0 <= accepted <=
        verified <= K."""
        self._flush()
        self._host.accumulate(predicted, verified, accepted)

    def defer(self, predicted: np.ndarray, verified: np.ndarray, accepted: np.ndarray) -> None:
        """:meth:`accumulate`, held until the next plan (or a read of the sums) applies it: an engine step's
        bookkeeping then rides on the next plan's one compiled call (:class:`~ascend_spec.graph.host_plan.StepPlan`)
        instead of a call of its own. Same arguments and result as :meth:`accumulate` at that point, applied
        before the plan decays the sums; the arrays must stay unchanged until then (``predicted`` fp32
        C-contiguous, the counts int64 C-contiguous, for the compiled call)."""
        self._flush()
        self._pending = (predicted, verified, accepted)

    def take_pending(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The deferred bookkeeping, handed to a caller that applies it now (cleared here)."""
        pending, self._pending = self._pending, None
        return pending

    def _flush(self) -> None:
        if self._pending is not None:
            rows, verified, accepted = self._pending
            self._pending = None
            self._host.accumulate(rows, verified, accepted)

    def _check_rows(self, name: str, values: np.ndarray) -> np.ndarray:
        s = np.asarray(values, dtype=np.float64)
        if s.ndim != 2 or s.shape[1] != self.max_drafts:
            raise ValueError(f"{name} must have shape [N, {self.max_drafts}]; got {list(s.shape)}")
        return s
