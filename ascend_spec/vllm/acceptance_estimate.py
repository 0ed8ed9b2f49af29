"""An online acceptance estimate per request: the score dynamic verification plans with for every drafter.

DFlash and DSpark score their own drafts (max-softmax of the draft logits, the confidence head); ngram, MTP,
EAGLE-3 and draft_model drafts come without a usable score, yet they are exactly where requests differ most
(ngram: repetitive text against free text). What the engine does know is how each request's drafts fared: after
every verify step, request b verified ``v_b`` drafts and accepted ``a_b`` of them. :class:`AcceptanceEstimator`
turns that into, per request slot s and draft position i, an estimate of the **conditional** acceptance

    q[s, i] = P(draft i accepted | drafts 0 .. i-1 accepted),

whose cumulative product along i is the survival the controller plans with. Everything lives on the device in
``[S, K]`` tensors updated by a handful of elementwise and ``index_add_`` ops: no host read, in stream order
between the target's sampler and the drafter, so the one host copy of the survivals the sync planner already makes
(and the async mode's staged copy) carries the estimate.

The rule, per step (``observe``), then per plan (``estimate``):

* **evidence**: a request that verified ``v`` drafts and accepted ``a`` was tried at positions ``i <= a, i < v``
  (the accepted ones and the first rejected one) and succeeded at ``i < a``; positions past the first rejection
  were never decided (their drafts were discarded with it) and positions ``>= v`` were not verified: neither is
  evidence. A request that got fewer drafts (ngram found a shorter match, or none) verified fewer: the missing
  positions give no evidence, they are not failures.
* **per request**: decayed sums ``h[s, i]`` (successes) and ``n[s, i]`` (trials, each weighted by the drafter's
  predicted conditional confidence ``c`` of that draft; 1 for drafters without scores), aged two ways:
  - by **trial**: a request that verified drafts in a step first multiplies its sums by ``trial_decay`` (0.8:
    about its last five verify steps count), so a request whose drafts stop being accepted is noticed within a few
    of its own trials, however long its history;
  - by **time**: every target step multiplies every request's sums by ``decay`` (0.97), so evidence also ages
    while a request verifies nothing: its estimate drifts back to its prior and the plan tries it again, about
    every twenty steps (the exploration a controller that stopped verifying a request needs to notice that it
    became predictable). Slow on purpose: each such probe verifies drafts that are most likely rejected
    (measured on the mixed workload, docs/vllm.md: with one decay of 0.9 for both, the unpredictable half spent
    ~0.56 drafts per request and step on probes).
* **prior**: the population's decayed sums ``H[i]``, ``N[i]`` over every request (``population_decay`` 0.99),
  with ``prior_weight`` pseudo-trials at ``initial_rate`` (1: a new engine verifies what the drafter proposes, as
  fixed K does, until the first evidence arrives): ``g[i] = (H[i] + m0 r0) / (N[i] + m0)``.
* **estimate**: ``r[s, i] = (h[s, i] + n0 g[i]) / (n[s, i] + n0)`` (``n0 = prior_weight`` pseudo-trials at the
  population's rate, 0.5: a new request starts at what the drafter achieves on everyone, and one rejection
  weighs twice the prior, so a request whose first drafts fail stops costing drafts after one probe), then ``q[s, i] = min(1, c[b, i] r[s, i])``, zero at positions past the request's
  available drafts.

**Combining with a drafter's own scores** (DFlash's logits, DSpark's head; ``"estimate": "combine"``): ``c`` is
the drafter's conditional confidence of each draft, so ``r`` is the request's observed acceptance over the
acceptance the drafter predicted for the same drafts (its ratio of successes to predicted successes), and the plan
uses the drafter's per-draft confidence rescaled by the request's own record. The drafter keeps ranking drafts
within a request (a draft it is unsure of still ranks low), and a request on which it is over- or under-confident
is corrected by its own history, not by an average over requests that differ. Without scores ``c = 1`` and ``r``
is the conditional acceptance rate itself. This is the per-request form of
:class:`~ascend_spec.graph.calibration.SurvivalCalibration` (which scales all requests' survivals by one factor
per position); planning with the estimate replaces that calibration rather than stacking a second correction.

**Slots**: rows of a step map to slots that persist while a request stays in the batch (:class:`RequestSlots` for
Model Runner V1, whose persistent batch moves rows; V2's request-state index is such a slot already); a slot
given to a new request is reset. The module imports no vLLM: the V1 wiring is
:mod:`ascend_spec.vllm.v1.estimate_wiring`, and Model Runner V2 calls the same two methods with its own slots and
its device-side accepted counts.
"""

from __future__ import annotations

import torch

from ascend_spec.checks import INDEX_DTYPES, check_int, check_tensor


def _check_fraction(name: str, value: object, *, closed_low: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and (0.0 <= value <= 1.0 if closed_low else 0.0 < value <= 1.0):
        return float(value)
    interval = "[0, 1]" if closed_low else "(0, 1]"
    raise ValueError(f"{name} must be a number in {interval}; got {value!r}")


class AcceptanceEstimator:
    """Per request slot and draft position, an on-device estimate of the conditional acceptance (module doc).

    State, one fp32 tensor ``[S + 1, 2K]``: row s < S holds slot s's ``h`` (columns ``:K``) and ``n`` (``K:``),
    row S the population's ``H`` and ``N``; so a step's evidence is one ``index_add_`` and a plan's read one
    ``index_select``. A step's evidence per row comes from a table indexed by ``a (K + 1) + v`` (successes and
    trials of every (accepted, verified) pair), times the row's ``[1, c]`` weights: about ten tensor ops per call
    whatever B (each a few microseconds on a CPU engine, a launch on a device).
    """

    def __init__(
        self,
        num_slots: int,
        max_drafts: int,
        device: torch.device | str = "cpu",
        *,
        decay: float = 0.97,
        trial_decay: float = 0.8,
        population_decay: float = 0.99,
        prior_weight: float = 0.5,
        initial_rate: float = 1.0,
    ) -> None:
        self.num_slots = check_int("num_slots", num_slots, minimum=1)
        self.max_drafts = check_int("max_drafts", max_drafts, minimum=1)
        self.decay = _check_fraction("decay", decay)
        self.trial_decay = _check_fraction("trial_decay", trial_decay)
        self.population_decay = _check_fraction("population_decay", population_decay)
        if (
            isinstance(prior_weight, bool)
            or not isinstance(prior_weight, (int, float))
            or not prior_weight > 0
        ):
            raise ValueError(f"prior_weight must be a positive number of pseudo-trials; got {prior_weight!r}")
        self.prior_weight = float(prior_weight)
        self.initial_rate = _check_fraction("initial_rate", initial_rate, closed_low=True)
        self.device = torch.device(device)
        s, k = self.num_slots, self.max_drafts
        f32 = dict(dtype=torch.float32, device=self.device)
        self._state = torch.zeros(s + 1, 2 * k, **f32)
        self._weights = torch.ones(s, 2 * k, **f32)  # [1 | c of the slot's latest drafts]
        # code a (K + 1) + v -> [successes | trials] of a row that verified v drafts and accepted a (clipped to v)
        table = torch.zeros((k + 1) * (k + 1), 2 * k, **f32)
        positions = torch.arange(k)
        for a in range(k + 1):
            for v in range(k + 1):
                kept = min(a, v)
                table[a * (k + 1) + v, :k] = (positions < kept).float()
                table[a * (k + 1) + v, k:] = ((positions <= kept) & (positions < v)).float()
        self._table = table
        # available drafts n -> the prefix mask [K] (positions < n)
        self._prefix = (
            (torch.arange(k).unsqueeze(0) < torch.arange(k + 1).unsqueeze(1)).float().to(self.device)
        )
        # views made once (slicing costs a Python call per step): slots' rows, the population's H and N
        self._slot_rows = self._state[:s]
        self._population = self._state[s]
        self._population_hits, self._population_trials = self._population[:k], self._population[k:]
        self._weight_conf = self._weights[:, k:]
        self.steps = 0  # observe() calls (host counter)

    # -- views of the state (for the stats and the tests) ---------------------------------------------------
    @property
    def hits(self) -> torch.Tensor:
        """``h [S, K]``: decayed successes per slot and position."""
        return self._state[: self.num_slots, : self.max_drafts]

    @property
    def trials(self) -> torch.Tensor:
        """``n [S, K]``: decayed trials, each weighted by the drafter's predicted confidence of its draft."""
        return self._state[: self.num_slots, self.max_drafts :]

    @property
    def predicted(self) -> torch.Tensor:
        """``c [S, K]``: the drafter's confidences of each slot's latest drafts (what its next trials weigh)."""
        return self._weights[:, self.max_drafts :]

    @property
    def population(self) -> torch.Tensor:
        """``[H; N]`` ``[2, K]``: the population's decayed successes and trials."""
        return self._state[self.num_slots].view(2, self.max_drafts)

    # -- state -------------------------------------------------------------------------------------------
    def reset(self, slots: torch.Tensor) -> None:
        """Forget the slots' history (a slot given to a new request): back to the population's prior."""
        slots = self._check_slots(slots)
        if slots.numel():
            self._state.index_fill_(0, slots, 0.0)
            self._weights.index_fill_(0, slots, 1.0)

    def observe(
        self,
        slots: torch.Tensor | None = None,
        verified: torch.Tensor | None = None,
        accepted: torch.Tensor | None = None,
    ) -> None:
        """One target step: age every sum, then add the evidence of the step's rows (``slots [B]``, distinct: one
        row per request, and per row the drafts ``verified [B]`` and ``accepted [B]`` of them, device integer
        tensors; None: a step without verified drafts, which only ages the evidence by time). Accepted counts above
        ``verified`` are clipped to it."""
        self.steps += 1
        k = self.max_drafts
        self._slot_rows.mul_(self.decay)
        self._population.mul_(self.population_decay)
        if slots is None:
            return
        slots = self._check_slots(slots)
        b = slots.shape[0]
        verified = check_tensor("verified", verified, ndim=1, dtypes=INDEX_DTYPES, shape=(b,))
        accepted = check_tensor("accepted", accepted, ndim=1, dtypes=INDEX_DTYPES, shape=(b,))
        if not b:
            return
        verified = verified.long().clamp(0, k)
        code = torch.add(verified, accepted.long().clamp(0, k), alpha=k + 1)
        evidence = self._table.index_select(0, code).mul_(self._weights.index_select(0, slots))
        self._population.add_(evidence.sum(0))
        if self.trial_decay < 1.0:  # rows that verified drafts age by trial first: + old (trial_decay - 1)
            aged = torch.where(verified > 0, self.trial_decay - 1.0, 0.0).unsqueeze(1)
            evidence.addcmul_(self._state.index_select(0, slots), aged)
        self._state.index_add_(0, slots, evidence)  # a step's rows are distinct requests: distinct slots

    # -- estimates ---------------------------------------------------------------------------------------
    def population_rate(self) -> torch.Tensor:
        """``g [K]``: the population's acceptance per position (over predicted, for drafters with scores)."""
        m0 = self.prior_weight
        rate = torch.add(self._population_hits, m0 * self.initial_rate)
        return rate.div_(torch.add(self._population_trials, m0))

    def estimate(
        self,
        slots: torch.Tensor,
        confidence: torch.Tensor | None = None,
        available: torch.Tensor | None = None,
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q [B, K]`` fp32 conditional acceptances of the rows' drafts (their cumulative product along K is the
        survival). ``confidence [B, K]``: the drafter's own conditional confidences (kept as the predictions the
        next step's evidence weighs; None: 1); ``available [B]``: drafts each row has (positions past them get
        q = 0; None: K)."""
        slots = self._check_slots(slots)
        b, k = slots.shape[0], self.max_drafts
        n0 = self.prior_weight
        rows = self._state.index_select(0, slots)
        rate = torch.add(rows[:, :k], self.population_rate(), alpha=n0).div_(rows[:, k:].add_(n0))
        if confidence is not None:
            check_tensor("confidence", confidence, ndim=2, shape=(b, k), device=self.device)
            confidence = confidence.float()
            self._weight_conf.index_copy_(0, slots, confidence)
            rate.mul_(confidence)
        rate.clamp_(0.0, 1.0)
        if available is not None:
            check_tensor("available", available, ndim=1, dtypes=INDEX_DTYPES, shape=(b,), device=self.device)
            rate.mul_(self._prefix.index_select(0, available.long().clamp(0, k)))
        if out is None:
            return rate
        return out.copy_(rate)

    def _check_slots(self, slots: object) -> torch.Tensor:
        slots = check_tensor("slots", slots, ndim=1, dtypes=INDEX_DTYPES, device=self.device)
        return slots if slots.dtype == torch.int64 else slots.long()


class RequestSlots:
    """Host map request id -> estimator slot for a runner whose batch rows move (Model Runner V1).

    A request keeps its slot while it stays in the batch; requests missing from a step's batch (finished,
    preempted) release theirs, and a released slot is reset before its next request uses it.
    """

    def __init__(self, num_slots: int) -> None:
        self.num_slots = check_int("num_slots", num_slots, minimum=1)
        self._slot: dict[str, int] = {}
        self._free = list(range(self.num_slots - 1, -1, -1))

    def assign(self, req_ids: list[str]) -> tuple[list[int], list[int]]:
        """(the slot of each row, the slots given to requests new to the batch: to be reset)."""
        live = set(req_ids)
        if len(live) != len(req_ids):
            raise ValueError(f"req_ids must be distinct; got {req_ids!r}")
        if len(live) > self.num_slots:
            raise ValueError(f"a batch of {len(live)} requests does not fit {self.num_slots} estimator slots")
        for rid in [rid for rid in self._slot if rid not in live]:
            self._free.append(self._slot.pop(rid))
        fresh = []
        slots = []
        for rid in req_ids:
            slot = self._slot.get(rid)
            if slot is None:
                slot = self._slot[rid] = self._free.pop()
                fresh.append(slot)
            slots.append(slot)
        return slots, fresh
