"""The verify-budget controller: how many drafted candidates the target verifies this step.

For a batch of B requests the drafter runs B * Q tokens (Q = drafter tokens per request) and proposes K drafts
per request, each with a survival p (the probability that it and every draft before it are accepted). Verifying T
of them costs D(B*Q) + V(B+T), each read from its cost profile after padding to the graph bucket, and yields
B + (sum of the T best survivals) tokens on average (the B bonus tokens plus the expected accepted drafts). The
controller picks the T minimising time per token, [D(B*Q) + V(B+T)] / (B + S_T), and compares it with plain
decoding, V(B) / B: it never plans a step that is slower per token than not speculating.

Only bucket boundaries need searching: inside a bucket extra tokens are free and S_T only grows, so the best T in
a bucket is the one that fills it (capped at B*K). Above the largest bucket the eager cost is linear in T, so
every T there is a candidate. See docs/controller.md for the rule, the per-position thresholds and the modes.

Modes: "sync" (V1 in Huawei's talk on DFlash and DSpark in vLLM) reads the survivals back to the host, searches,
and returns the split. The host search is index math on a few dozen numbers, so it runs in NumPy on the host copy
(a torch op costs more to dispatch than the whole search); per batch size the candidate budgets, their costs and
everything a plan says about a total (cost, graph buckets) are computed once. A plan of no drafts or of every
draft is the same split whatever the survivals, so those two splits are made once per batch size by
``allocate_verify_budget`` and handed out again (read-only); ragged totals are split by the op at every step. "async" (V2) fixes T before the drafter runs from the recent chosen totals
(:meth:`predict_total`), so the target's input size B + T is known to the host in advance; the split then happens
on the device (``ascend_spec.ops.allocate_verify_budget``), and this step's own best total is computed on the
device too and recorded for later steps without the host waiting for it.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.checks import check_choice, check_int, check_tensor
from ascend_spec.graph.cost_profile import CostProfile
from ascend_spec.graph.host_plan import HostPlan
from ascend_spec.ops import VerifyAllocation, allocate_verify_budget

_HOST = torch.device("cpu")

SURVIVAL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

# The split of a budget is ascend_spec.ops.allocate_verify_budget's VerifyAllocation (this name is kept for it).
BudgetSplit = VerifyAllocation


def split_budget(survival: torch.Tensor, total_budget: int, *, backend: str = "auto") -> VerifyAllocation:
    """The ``total_budget`` best survivals of ``survival [B, K]`` (ties -> lower request, lower position), split
    by :func:`ascend_spec.ops.allocate_verify_budget`; float64 survivals are split as float32."""
    if survival.dtype == torch.float64:  # the op takes the drafter's dtypes (fp32/fp16/bf16)
        survival = survival.float()
    return allocate_verify_budget(
        survival, check_int("total_budget", total_budget, minimum=0), backend=backend
    )


def reference_split(survival: torch.Tensor, total_budget: int) -> VerifyAllocation:
    """:func:`split_budget` on the reference backend (the oracle the other backends are tested against)."""
    return split_budget(survival, total_budget, backend="reference")


@dataclass(frozen=True)
class BudgetPlan:
    """One step's decision. ``expected_tokens`` is a float in sync mode and a 0-dim device tensor in async mode
    (reading it would synchronise); everything else the host needs is a host value in both modes."""

    speculate: bool
    total_budget: int
    num_drafts: torch.Tensor
    query_lens: torch.Tensor
    query_start_loc: torch.Tensor
    expected_tokens: float | torch.Tensor
    expected_cost: float
    num_reqs: int
    target_tokens: int  # B + T (B when not speculating)
    target_bucket: int | None  # graph that runs them; None = eager
    draft_tokens: int  # B * Q (0 when not speculating)
    draft_bucket: int | None
    mode: str
    allocator: str  # the backend of ascend_spec.ops.allocate_verify_budget that split the budget
    draft_index: torch.Tensor  # [T] int32: flat b*K + i of each verified draft, request by request

    @property
    def tokens_per_second(self) -> float:
        return float(self.expected_tokens) / self.expected_cost * 1e3 if self.expected_cost > 0 else math.inf


@dataclass(frozen=True)
class ThresholdRow:
    """Uniform depth k -> k+1 for every request: p_{k+1} must exceed G(k) * dC / C(k)."""

    k: int
    target_tokens: int
    target_bucket: int | None
    cost: float  # C(k) = D(B*Q) + V(B*(1+k))
    delta_cost: float  # C(k+1) - C(k)
    ratio: float  # dC / C(k): the threshold per unit of G(k)
    gain: float | None = None  # G(k) = 1 + p_1 + ... + p_k per request, when survivals were given
    threshold: float | None = None  # G(k) * dC / C(k)
    next_survival: float | None = None  # p_{k+1}
    add: bool | None = None  # p_{k+1} > threshold


@dataclass(frozen=True)
class Explanation:
    num_reqs: int
    draft_cost: float
    plain_cost: float
    rows: list[ThresholdRow] = field(default_factory=list)

    def format(self) -> str:
        lines = [
            f"B={self.num_reqs}: D(B*Q)={self.draft_cost:.3f}, plain V(B)={self.plain_cost:.3f} "
            f"({self.num_reqs / self.plain_cost * 1e3:.1f} tok/s)",
            "  k  target  bucket     C(k)    dC  dC/C(k)    G(k)  p_{k+1} > threshold",
        ]
        for r in self.rows:
            bucket = "eager" if r.target_bucket is None else str(r.target_bucket)
            head = (
                f"{r.k:3d} {r.target_tokens:7d} {bucket:>7} {r.cost:8.2f} {r.delta_cost:5.1f} {r.ratio:8.4f}"
            )
            if r.gain is None:
                lines.append(head)
            else:
                verdict = "add" if r.add else "stop"
                lines.append(f"{head} {r.gain:7.3f}  {r.next_survival:.3f} > {r.threshold:.3f}: {verdict}")
        return "\n".join(lines)

    __str__ = format


class BudgetController:
    """Chooses the verify budget T per step from the drafter's and the target's step-function cost profiles."""

    def __init__(
        self,
        draft_cost: CostProfile,
        verify_cost: CostProfile,
        *,
        max_drafts: int,
        draft_tokens_per_request: int,
        mode: str = "sync",
        history: int = 3,
        backend: str = "auto",
    ) -> None:
        if not isinstance(draft_cost, CostProfile):
            raise ValueError(f"draft_cost must be a CostProfile; got {type(draft_cost).__name__}")
        if not isinstance(verify_cost, CostProfile):
            raise ValueError(f"verify_cost must be a CostProfile; got {type(verify_cost).__name__}")
        cheapest = verify_cost.costs[verify_cost.buckets.smallest]
        if not cheapest > 0:
            raise ValueError(
                f"verify_cost must be > 0 ms at every bucket (time per token divides by the target's step "
                f"time); got {cheapest} at {verify_cost.buckets.smallest} tokens"
            )
        self.draft_cost = draft_cost
        self.verify_cost = verify_cost
        self.max_drafts = check_int("max_drafts", max_drafts, minimum=1)
        self.draft_tokens_per_request = check_int(
            "draft_tokens_per_request", draft_tokens_per_request, minimum=1
        )
        self.mode = check_choice("mode", mode, ("sync", "async"))
        self.history = check_int("history", history, minimum=1)
        self.backend = backend
        self._totals: collections.deque[int] = collections.deque(maxlen=self.history)
        self._host_plan = HostPlan(self.max_drafts)  # plan_lengths' bounds, compiled where a compiler exists
        self._pending: list[tuple[torch.Tensor, object]] = []
        # Async mode: when set, plan() leaves the step's best total (0-dim device tensor) in ``staged_total`` for
        # the caller to copy to the host with its own copy and hand back through record_total (no copy of its own).
        self.stage_totals = False
        self.staged_total: torch.Tensor | None = None
        self._tables: dict[int, tuple[list[int], list[float], float, float]] = {}
        self._profile_tables: dict[int, tuple[list[int], list[float], float, float]] = {}
        self._host_tables: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self._fixed_splits: dict[tuple[int, int, torch.device], VerifyAllocation] = {}
        self._plan_fields: dict[tuple[int, int], dict] = {}
        self._device_tables: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        self._lean_tables: dict[int, tuple[float, float]] = {}
        self._uniform_lengths: dict[tuple[int, int], list[int]] = {}
        # B -> (ms added to every speculative step's cost, ms added to plain decoding's): what the profiles do
        # not time, measured in the engine (set_step_corrections); 0 without measurements.
        self._corrections: dict[int, tuple[float, float]] = {}
        self.last_num_reqs: int | None = None

    # -- cost tables ---------------------------------------------------------------------------------------
    def candidates(self, num_reqs: int) -> list[int]:
        """Budgets worth evaluating at B = num_reqs: every bucket's fill point, and every T in the eager range."""
        return self._table(num_reqs)[0]

    def _table(self, b: int) -> tuple[list[int], list[float], float, float]:
        if b in self._tables:
            return self._tables[b]
        ts, costs, plain, d = self._profile_table(b)
        spec_extra, plain_extra = self._corrections.get(b, (0.0, 0.0))
        table = (ts, [c + spec_extra for c in costs], plain + plain_extra, d + spec_extra)
        self._tables[b] = table
        return table

    def _profile_table(self, b: int) -> tuple[list[int], list[float], float, float]:
        """The candidates at B = b and their costs on the profiles alone (corrections are added by _table)."""
        if b in self._profile_tables:
            return self._profile_tables[b]
        max_t = b * self.max_drafts
        cands: set[int] = set()
        for size in self.verify_cost.buckets.sizes_above(b):
            t = min(size - b, max_t)
            cands.add(t)
            if t == max_t:
                break
        largest = self.verify_cost.buckets.largest
        if b + max_t > largest:
            cands.update(range(max(largest - b + 1, 1), max_t + 1))
        ts = sorted(cands)
        d = self.draft_cost.cost(b * self.draft_tokens_per_request)
        table = (ts, [d + self.verify_cost.cost(b + t) for t in ts], self.verify_cost.cost(b), d)
        self._profile_tables[b] = table
        return table

    def step_cost(self, num_reqs: int, total_budget: int) -> float:
        """D(B*Q) + V(B+T) for T > 0; V(B) for T = 0 (plain decoding: the drafter does not run); each plus its
        measured correction (:meth:`set_step_corrections`)."""
        b = check_int("num_reqs", num_reqs, minimum=1)
        t = check_int("total_budget", total_budget, minimum=0)
        spec_extra, plain_extra = self._corrections.get(b, (0.0, 0.0))
        if t == 0:
            return self.verify_cost.cost(b) + plain_extra
        return (
            self.draft_cost.cost(b * self.draft_tokens_per_request)
            + self.verify_cost.cost(b + t)
            + spec_extra
        )

    def set_step_corrections(self, num_reqs: int, speculative_ms: float, plain_ms: float) -> None:
        """Add ``speculative_ms`` to every speculative step's cost and ``plain_ms`` to plain decoding's at B =
        ``num_reqs``: the engine's work around a step that the profiles (forwards only) do not time, measured
        while it runs (:mod:`ascend_spec.vllm.step_costs`). Either may be negative (a profile measured high);
        each corrected cost must stay > 0."""
        b = check_int("num_reqs", num_reqs, minimum=1)
        spec, plain = float(speculative_ms), float(plain_ms)
        if not (math.isfinite(spec) and math.isfinite(plain)):
            raise ValueError(f"step corrections must be finite; got {spec} and {plain} ms at B={b}")
        _, _, v, d = self._profile_table(b)
        if not v + plain > 0:
            raise ValueError(
                f"plain_ms must leave plain decoding's cost > 0 at B={b}: V(B) = {v} ms, got {plain} ms"
            )
        if not d + v + spec > 0:
            raise ValueError(
                f"speculative_ms must leave a speculative step's cost > 0 at B={b}: D + V(B) = {d + v} ms, "
                f"got {spec} ms"
            )
        if self._corrections.get(b) == (spec, plain):
            return
        self._corrections[b] = (spec, plain)
        for cache in (self._tables, self._host_tables, self._lean_tables):
            cache.pop(b, None)
        for key in [key for key in self._plan_fields if key[0] == b]:
            del self._plan_fields[key]
        for key in [key for key in self._device_tables if key[0] == b]:
            del self._device_tables[key]

    def step_corrections(self, num_reqs: int) -> tuple[float, float]:
        """(speculative, plain) ms added at B = ``num_reqs`` (0, 0 until measured)."""
        return self._corrections.get(num_reqs, (0.0, 0.0))

    # -- history (async) -----------------------------------------------------------------------------------
    def record_total(self, total: int) -> None:
        """Remember a chosen total (plan() records its own; engines may record totals chosen elsewhere)."""
        self._totals.append(check_int("total", total, minimum=0))

    @property
    def recent_totals(self) -> list[int]:
        self._resolve_pending()
        return list(self._totals)

    def predict_total(self, num_reqs: int) -> int:
        """Mean of the last ``history`` totals, rounded up, capped at B*K (B*K before any history)."""
        b = check_int("num_reqs", num_reqs, minimum=1)
        self._resolve_pending()
        cap = b * self.max_drafts
        if not self._totals:
            return cap
        return min(-(-sum(self._totals) // len(self._totals)), cap)

    def planned_total(self, num_reqs: int) -> int:
        """The total an async plan uses: predict_total, grown to fill its graph bucket (same graph, more drafts)."""
        b = check_int("num_reqs", num_reqs, minimum=1)
        t = self.predict_total(b)
        if t == 0:
            return 0
        bucket = self.verify_cost.buckets.pad(b + t)
        return t if bucket is None else min(bucket - b, b * self.max_drafts)

    def _resolve_pending(self) -> None:
        pending, self._pending = self._pending, []
        for buf, event in pending:
            event.synchronize()  # type: ignore[attr-defined]  # that step finished long ago in steady state
            self.record_total(int(buf))

    # -- planning ------------------------------------------------------------------------------------------
    def _check_survival(self, survival: object) -> torch.Tensor:
        s = check_tensor("survival", survival, ndim=2, dtypes=SURVIVAL_DTYPES)
        if s.shape[1] != self.max_drafts:
            raise ValueError(
                f"survival must have shape [B, {self.max_drafts}] (max_drafts); got {list(s.shape)}"
            )
        if s.shape[0] < 1:
            raise ValueError(f"survival must have at least one request; got shape {list(s.shape)}")
        return s

    @staticmethod
    def _check_values(s: torch.Tensor) -> None:
        """Finite, in [0, 1], non-increasing along K (the async mode's device-side check, behind value checks)."""
        if not bool(torch.isfinite(s).all()):
            raise ValueError("survival must be finite; got NaN or inf entries")
        if bool((s < 0).any()) or bool((s > 1).any()):
            raise ValueError(f"survival must lie in [0, 1]; got min {float(s.min())}, max {float(s.max())}")
        if s.shape[1] > 1 and bool((s[:, 1:] > s[:, :-1]).any()):
            r, c = (s[:, 1:] > s[:, :-1]).nonzero()[0].tolist()
            raise ValueError(
                "survival must not increase along a request's drafts (it is a cumulative product of "
                f"confidences); request {r} has {float(s[r, c])} then {float(s[r, c + 1])}"
            )

    def plan(self, survival: torch.Tensor) -> BudgetPlan:
        """Choose this step's total budget and split it across requests (see the module docstring)."""
        s = self._check_survival(survival)
        b = s.shape[0]
        self.last_num_reqs = b
        if self.mode == "sync":
            return self._plan_sync(s)
        if value_checks_enabled(s.device):
            self._check_values(s)
        return self._plan_async(s)

    def _plan_sync(self, s: torch.Tensor) -> BudgetPlan:
        b, k = s.shape
        host = s.detach().cpu()  # the V1 device-to-host read (callers hand in the host copy: a no-op then)
        values = (host if host.dtype in (torch.float32, torch.float64) else host.float()).numpy()
        _check_host_values(values)
        t, prefix = self._search_total(values.reshape(-1).astype(np.float64), b)
        self._totals.append(t)
        fixed = t in (0, b * k)  # the same split whatever the survivals
        split = self._fixed_split(s, t) if fixed else split_budget(s, t, backend=self.backend)
        return self._make_plan(b, t, split, b + float(prefix[t]))

    def _search_total(self, flat: np.ndarray, b: int) -> tuple[int, np.ndarray]:
        """The total T minimising the step cost per expected token over the B x K survivals ``flat`` (float64),
        0 when plain decoding is cheaper, and the prefix sums of the survivals in rank order. Stable descending
        order: ties keep the flat b-major order, as allocate_verify_budget ranks them."""
        order = np.argsort(-flat, kind="stable")
        prefix = np.concatenate(([0.0], np.cumsum(flat[order])))
        ts, costs, plain = self._host_table(b)
        obj = costs / (b + prefix[ts])
        best = int(obj.argmin())
        return (int(ts[best]) if obj[best] < plain / b else 0), prefix

    def plan_lengths(self, survival: np.ndarray, factors: np.ndarray | None = None) -> tuple[int, list[int]]:
        """Sync mode straight from the host copy, for an engine's step: (total T, per-request draft lengths).

        The same decision and split as :meth:`plan` on ``min(1, survival * factors)`` made non-increasing again
        (the survival calibration's factors per draft position; None: the survivals as given), without building
        a plan. Two bounds, computed once per batch size, settle most steps without sorting or calibrating the
        B x K values: when even the smallest (calibrated) survival is above ``full_above`` every draft is
        verified, and when their sum is below ``plain_below`` nothing is (proof at :meth:`lean_bounds`). The
        host guard on the values runs with value checks on (they come from the project's own ops here);
        ragged totals are split as ``allocate_verify_budget`` splits them (tested against it), in numpy.
        """
        s = np.asarray(survival)
        if s.ndim != 2 or s.shape[1] != self.max_drafts or s.shape[0] < 1:
            raise ValueError(
                f"survival must have shape [B, {self.max_drafts}] (max_drafts) with B >= 1; got {list(s.shape)}"
            )
        b, k = s.shape
        self.last_num_reqs = b
        if value_checks_enabled(_HOST):
            self.check_host_survivals(s, factors)
        full_above, plain_below = self.lean_bounds(b)
        smallest, bound = self._host_plan.bounds(s, factors)
        if smallest > full_above:
            return self.settle(b, b * k)
        if bound < plain_below:
            return self.settle(b, 0)
        return self.search_lengths(s, factors)

    @staticmethod
    def check_host_survivals(survival: np.ndarray, factors: np.ndarray | None) -> None:
        """The host guard of :meth:`plan_lengths` (survivals in [0, 1], non-increasing; factors finite and > 0)."""
        _check_host_values(survival)
        if factors is not None and not (np.all(np.isfinite(factors)) and np.all(factors > 0)):
            raise ValueError(f"factors must be finite and > 0; got {np.asarray(factors).tolist()}")

    def settle(self, num_reqs: int, total: int) -> tuple[int, list[int]]:
        """(total, lengths) of a step the bounds settled: T = 0 or B*K, the same split whatever the survivals
        (for a planner that computed the bounds itself: :class:`~ascend_spec.graph.host_plan.StepPlan`)."""
        self.last_num_reqs = num_reqs
        self._totals.append(total)
        key = (num_reqs, total)
        lengths = self._uniform_lengths.get(key)
        if lengths is None:
            lengths = self._uniform_lengths[key] = [total // num_reqs] * num_reqs
        return total, list(lengths)

    def search_lengths(self, survival: np.ndarray, factors: np.ndarray | None) -> tuple[int, list[int]]:
        """:meth:`plan_lengths` past its bounds: the search over every total on the calibrated survivals
        (``survival [B, K]`` already checked, ``factors`` as there)."""
        b, k = survival.shape
        self.last_num_reqs = b
        values = survival.astype(np.float64)
        if factors is not None:
            values = np.minimum.accumulate(np.minimum(values * factors, 1.0), axis=1)
        t, _ = self._search_total(values.reshape(-1), b)
        if t in (0, b * k):
            return self.settle(b, t)
        self._totals.append(t)
        # allocate_verify_budget's split, on the host where the values already are (a torch op here cost ~0.5 ms
        # a step on a CPU engine): the T best float32 survivals, ties to the lower request then the lower position
        # (the flat order a stable sort keeps), counted per request
        order = np.argsort(-values.astype(np.float32).reshape(-1), kind="stable")
        return t, np.bincount(order[:t] // k, minlength=b).tolist()

    def lean_bounds(self, b: int) -> tuple[float, float]:
        """(full_above, plain_below) at batch size b, from the candidate totals and their costs.

        With every survival > s and S_T <= T (survivals are <= 1), each candidate T < B*K has
        cost_T / (b + S_T) >= cost_T / (b + T) > cost_BK / (b + B*K*s) >= cost_BK / (b + S_BK) when
        s > (cost_BK (b + T) / cost_T - b) / (B*K); verifying every draft also beats plain decoding when
        s > (cost_BK b / V(B) - b) / (B*K): ``full_above`` is the largest of these (inf when B*K is no
        candidate or it is >= 1). With the survivals' sum S <= r_T = cost_T b / V(B) - b for every T > r_T,
        cost_T / (b + min(T, S)) >= V(B) / b for every T, so plain decoding wins: ``plain_below`` is the
        smallest such r_T (inf when none). Both carry a 1e-9 margin against rounding.
        """
        if b not in self._lean_tables:
            ts, costs, plain, _ = self._table(b)
            full = b * self.max_drafts
            if ts[-1] != full:
                full_above = math.inf
            else:
                c_full = costs[-1]
                bounds = [(c_full * (b + t) / c - b) / full for t, c in zip(ts[:-1], costs[:-1])]
                bounds.append((c_full * b / plain - b) / full)
                full_above = max(bounds) + 1e-9
                if full_above >= 1.0:
                    full_above = math.inf
            limits = [c * b / plain - b for t, c in zip(ts, costs) if t > c * b / plain - b]
            plain_below = min(limits) - 1e-9 if limits else math.inf
            self._lean_tables[b] = (full_above, plain_below)
        return self._lean_tables[b]

    def _host_table(self, b: int) -> tuple[np.ndarray, np.ndarray, float]:
        """:meth:`_table` as NumPy arrays for the host search: (candidate totals, step costs, plain V(B))."""
        if b not in self._host_tables:
            ts, costs, plain, _ = self._table(b)
            self._host_tables[b] = (
                np.asarray(ts, dtype=np.int64),
                np.asarray(costs, dtype=np.float64),
                plain,
            )
        return self._host_tables[b]

    def _fixed_split(self, s: torch.Tensor, t: int) -> VerifyAllocation:
        """The split of T = 0 or T = B*K (independent of the survivals' values), made once per batch size."""
        key = (s.shape[0], t, s.device)
        if key not in self._fixed_splits:
            self._fixed_splits[key] = split_budget(s, t, backend=self.backend)
        return self._fixed_splits[key]

    def _plan_async(self, s: torch.Tensor) -> BudgetPlan:
        b = s.shape[0]
        t = self.planned_total(b)  # fixed on the host before the drafter's values are read (never read here)
        sorted_vals, best_t = self._device_search(s)
        if self.stage_totals:
            self.staged_total = best_t
        else:
            self._push_pending(best_t)
        if t == 0:
            split = split_budget(s, 0, backend=self.backend)
            expected: torch.Tensor = torch.full((), float(b), dtype=sorted_vals.dtype, device=s.device)
        else:
            split = split_budget(s, t, backend=self.backend)
            expected = b + sorted_vals[:t].sum()
        return self._make_plan(b, t, split, expected)

    def _make_plan(self, b: int, t: int, split: BudgetSplit, expected: float | torch.Tensor) -> BudgetPlan:
        key = (b, t)
        fields = self._plan_fields.get(key)
        if fields is None:  # what a plan says about (B, T) besides the split: the same at every step
            q = self.draft_tokens_per_request
            fields = dict(
                speculate=t > 0,
                total_budget=t,
                expected_cost=self.step_cost(b, t),
                num_reqs=b,
                target_tokens=b + t,
                target_bucket=self.verify_cost.buckets.pad(b + t),
                draft_tokens=b * q if t else 0,
                draft_bucket=self.draft_cost.buckets.pad(b * q) if t else None,
                mode=self.mode,
                allocator=resolve_backend(self.backend, split.num_drafts.device, op="allocate_verify_budget"),
            )
            self._plan_fields[key] = fields
        return BudgetPlan(
            num_drafts=split.num_drafts,
            query_lens=split.query_lens,
            query_start_loc=split.query_start_loc,
            expected_tokens=expected,
            draft_index=split.draft_index,
            **fields,
        )

    def _device_search(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sync search done with device tensors only: (sorted survivals, best total as a 0-dim tensor)."""
        b = s.shape[0]
        dtype = torch.float32 if s.device.type == "npu" else torch.float64
        key = (b, s.device)
        if key not in self._device_tables:
            ts, costs, _, _ = self._table(b)
            self._device_tables[key] = (
                torch.tensor(ts, dtype=torch.long, device=s.device),
                torch.tensor(costs, dtype=dtype, device=s.device),
            )
        t_idx, cost = self._device_tables[key]
        vals = torch.sort(s.reshape(-1).to(dtype), descending=True, stable=True).values
        prefix = torch.cumsum(vals, 0)
        obj = cost / (b + prefix[t_idx - 1])
        best = torch.argmin(obj)
        plain = self._table(b)[2] / b
        best_t = torch.where(obj[best] < plain, t_idx[best], torch.zeros_like(t_idx[best]))
        return vals, best_t

    def _push_pending(self, best_t: torch.Tensor) -> None:
        if best_t.device.type == "cpu":
            self.record_total(int(best_t))
            return
        mod = torch.cuda if best_t.device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
        buf = torch.empty((), dtype=best_t.dtype, pin_memory=True)
        buf.copy_(best_t, non_blocking=True)
        event = mod.Event()
        event.record()
        self._pending.append((buf, event))

    # -- explanation ---------------------------------------------------------------------------------------
    def explain(self, num_reqs: int | None = None, survival: list[float] | None = None) -> Explanation:
        """Per-position thresholds p_{k+1} > G(k) dC / C(k) at batch size B for uniform depth k.

        ``survival`` (one request's p_1..p_K) adds G(k), the threshold and the verdict to every row.
        """
        if num_reqs is None:
            num_reqs = self.last_num_reqs
            if num_reqs is None:
                raise ValueError("num_reqs must be given before the first plan()")
        b = check_int("num_reqs", num_reqs, minimum=1)
        k_max = self.max_drafts
        if survival is not None:
            survival = [float(x) for x in survival]
            if len(survival) != k_max:
                raise ValueError(f"survival must have max_drafts={k_max} entries; got {len(survival)}")
        d = self.draft_cost.cost(b * self.draft_tokens_per_request)
        rows = []
        gain = 1.0
        for k in range(k_max):
            c = d + self.verify_cost.cost(b * (1 + k))
            dc = d + self.verify_cost.cost(b * (2 + k)) - c
            extra: dict = {}
            if survival is not None:
                thr = gain * dc / c
                extra = dict(gain=gain, threshold=thr, next_survival=survival[k], add=survival[k] > thr)
                gain += survival[k]
            rows.append(
                ThresholdRow(
                    k, b * (1 + k), self.verify_cost.buckets.pad(b * (1 + k)), c, dc, dc / c, **extra
                )
            )
        return Explanation(b, d, self.verify_cost.cost(b), rows)


def _check_host_values(s: np.ndarray) -> None:
    """The sync plan's guard on the host copy (always on: it is already on the host): finite, in [0, 1] and
    non-increasing along K, else a ValueError naming the first bad entry."""
    lo, hi = float(s.min()), float(s.max())  # NaN anywhere makes both NaN; inf lands outside [0, 1]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("survival must be finite; got NaN or inf entries")
    if lo < 0 or hi > 1:
        raise ValueError(f"survival must lie in [0, 1]; got min {lo}, max {hi}")
    if s.shape[1] > 1:
        rising = s[:, 1:] > s[:, :-1]
        if rising.any():
            r, c = (int(i) for i in np.argwhere(rising)[0])
            raise ValueError(
                "survival must not increase along a request's drafts (it is a cumulative product of "
                f"confidences); request {r} has {float(s[r, c])} then {float(s[r, c + 1])}"
            )
