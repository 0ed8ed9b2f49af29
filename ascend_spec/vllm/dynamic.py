"""Dynamic verification in vLLM's V1 runner: per-request draft lengths chosen after every drafter run.

One step, after the drafter proposed ``[B, K]`` drafts:

1. confidence ``c [B, K]``: ``max_softmax_confidence`` on DFlash's draft logits, ``head_confidence`` on a
   DSpark confidence head (the :class:`DraftScores` seam: a proposer's ``take_draft_scores()``), or, for every
   drafter, the request's online acceptance estimate (kind ``estimate``,
   :mod:`ascend_spec.vllm.acceptance_estimate`: the conditional acceptances, alone or times the drafter's own);
2. survival ``p = survival_probs(c)`` (on a CPU engine whose confidence op runs the native kernel, 1 and 2 are one
   C++ call into reused buffers, :class:`~ascend_spec.ops.max_softmax_confidence.cpu.DraftSurvival`: the two ops'
   Python layers cost 5x their arithmetic at a decode step's sizes);
3. **one device-to-host copy** of the ``[B, K]`` survivals into a pinned buffer (non-blocking on the device's
   stream, then one wait): every length below is computed from it on the host, where the scheduler needs them;
   nothing is read per request;
4. ``BudgetController.plan`` chooses the total T (or T = 0: speculating is predicted slower than plain decoding,
   so the next target step is a plain decode of one token per request) and ``allocate_verify_budget`` splits it;
5. ``take_draft_token_ids`` (what the engine core hands the scheduler) cuts request b's draft list to its
   ``num_drafts[b]``: V1's scheduler schedules ``len(spec_token_ids)`` per request, so the target verifies the
   ragged lengths with no other change.

The no-draft option goes one step further: after a step planned as plain decoding, the drafter is skipped for
``probe_interval - 1`` steps (V1's own "input does not fit the drafter" path; every request gets no drafts), so
those steps cost V(B) only, then it runs once to probe again; while probes keep planning plain decoding the
stretch doubles (up to 32 x probe_interval), and the first speculative plan resets it. The tokens of skipped steps never enter the
drafter's context cache (its slots stay zeroed): drafts right after a skip may be worse, output is unchanged.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.graph import BudgetController, host_plan
from ascend_spec.graph.calibration import SurvivalCalibration
from ascend_spec.ops import head_confidence, max_softmax_confidence, survival_probs
from ascend_spec.ops.max_softmax_confidence import OP as CONFIDENCE_OP

SCORE_KINDS = ("logits", "head", "estimate")
_HOST = torch.device("cpu")
#: Consecutive plain plans double the drafter-less stretch, at most this many times (probe_interval x 32): a
#: probe costs a drafter run and a plan, and four plain probes in a row are strong evidence.
MAX_BACKOFF_DOUBLINGS = 5


@dataclass(frozen=True)
class DraftScores:
    """What a drafter exposes for its confidences: ``logits [B*K, V]`` (max-softmax) or ``head [B, K]`` logits
    of a confidence head (sigmoid), with B and K; or ``estimate [B, K]``: conditional acceptances in [0, 1]
    already (the acceptance estimate). ``label`` names the scoring in the stats (``score_kinds``; default: kind);
    ``available`` (host ints, one per request): drafts each request has when fewer than K (ngram), a cap on its
    length (a zero survival past them is never worth a token, but it costs none inside a filled graph bucket)."""

    kind: str
    values: torch.Tensor
    num_reqs: int
    num_drafts: int
    label: str = ""
    available: list[int] | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCORE_KINDS:
            raise ValueError(f"DraftScores.kind must be one of {', '.join(SCORE_KINDS)}; got {self.kind!r}")
        if not self.label:
            object.__setattr__(self, "label", self.kind)


class ConfidenceSource(Protocol):
    """A proposer whose drafts the controller can score (DFlash: its draft logits; DSpark: its confidence head)."""

    def take_draft_scores(self) -> DraftScores | None:
        """This step's scores (consumed: a second call returns None until the drafter runs again)."""


def take_checked_scores(
    take_scores: Callable[[], DraftScores | None], drafts: torch.Tensor
) -> DraftScores | None:
    """This step's scores from a proposer's ``take_draft_scores``, checked against the ``[B, K]`` drafts it
    proposed (a drafter whose scores describe other drafts is a bug, not something to plan with)."""
    scores = take_scores()
    if scores is not None and (scores.num_reqs != drafts.shape[0] or scores.num_drafts != drafts.shape[1]):
        raise RuntimeError(
            f"draft scores are for [{scores.num_reqs}, {scores.num_drafts}] drafts, the drafter proposed "
            f"{list(drafts.shape)}"
        )
    return scores


def confidence(scores: DraftScores, backend: str = "auto", out: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, K]`` fp32 confidences in [0, 1] from a drafter's scores (into ``out [B, K]`` when given)."""
    b, k = scores.num_reqs, scores.num_drafts
    if scores.kind == "estimate":  # conditional acceptances already
        values = scores.values.reshape(b, k)
        return values.float() if out is None else out.copy_(values)
    if scores.kind == "head":
        values = scores.values.reshape(b, k)
        return head_confidence(values) if out is None else head_confidence(values, out=out)
    flat = None if out is None else out.view(-1)
    return max_softmax_confidence(scores.values, backend=backend, out=flat).view(b, k)


class HostReader:
    """The one device-to-host path of a step: survivals into a reused (pinned on devices) host buffer.

    ``copies`` counts every read; the tests wrap nothing else because nothing else reads device values.
    """

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self.copies = 0

    def read(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` in host memory; on a CPU engine they already are (the read is counted, nothing is copied)."""
        self.copies += 1
        if values.device.type == "cpu":
            return values.detach()
        if (
            self._buffer is None
            or self._buffer.numel() < values.numel()
            or self._buffer.dtype != values.dtype
        ):
            self._buffer = torch.empty(values.numel(), dtype=values.dtype, pin_memory=True)
        out = self._buffer[: values.numel()].view(values.shape)
        out.copy_(values, non_blocking=True)
        mod = torch.cuda if values.device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
        mod.current_stream(values.device).synchronize()
        return out


@dataclass(frozen=True)
class StagedSurvivals:
    """One step's ``[B, K]`` survivals in a host slot, ``event`` marking the copy's end (None: already there)."""

    req_ids: list[str]
    host: torch.Tensor
    event: Any
    kind: str
    available: list[int] | None = None  # DraftScores.available

    def wait(self) -> np.ndarray:
        """The survivals as a NumPy view of the slot, once the copy has landed (a wait off the step)."""
        if self.event is not None:
            self.event.synchronize()
        return self.host.numpy()


class SurvivalStager:
    """Async mode's one device-to-host transfer per step, without a wait in the step: the survivals are copied
    into a ring of (pinned, on devices) host slots on the device's current stream, non-blocking, with an event.

    The copy runs in stream order right after the scoring kernels, so the scorer's reused buffer is read before
    the next step overwrites it; the host waits for the event only where it plans (V1's output hand-over, after
    V1's own copy of the sampled tokens that the same stream precedes). ``slots`` must exceed the steps a host
    can run ahead of its planning: V1's async engine core keeps two batches in flight, so four is spare.
    """

    def __init__(self, slots: int = 4) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 2:
            raise ValueError(f"slots must be an int >= 2; got {slots!r}")
        self._ring: list[torch.Tensor | None] = [None] * slots
        self._next = 0
        self.copies = 0

    def stage(
        self, survival: torch.Tensor, req_ids: list[str], kind: str, available: list[int] | None = None
    ) -> StagedSurvivals:
        if len(req_ids) != survival.shape[0]:
            raise RuntimeError(
                f"survivals are for {survival.shape[0]} requests, the step has {len(req_ids)} request ids"
            )
        i = self._next % len(self._ring)
        self._next += 1
        self.copies += 1
        device = survival.device
        slot = self._ring[i]
        if slot is None or slot.shape != survival.shape or slot.dtype != survival.dtype:
            slot = torch.empty(survival.shape, dtype=survival.dtype, pin_memory=device.type != "cpu")
            self._ring[i] = slot
        if device.type == "cpu":
            slot.copy_(survival)
            return StagedSurvivals(list(req_ids), slot, None, kind, available)
        slot.copy_(survival, non_blocking=True)
        mod = torch.cuda if device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
        event = mod.Event()
        event.record(mod.current_stream(device))
        return StagedSurvivals(list(req_ids), slot, event, kind, available)


@dataclass
class DynamicStats:
    """Per-engine counters of dynamic verification (read by ``ascend-spec e2e`` and the tests)."""

    steps: int = 0
    plain_steps: int = 0
    host_copies: int = 0
    max_host_copies_per_step: int = 0
    overhead_s: float = (
        0.0  # confidence + survival + controller + allocation + calibration, summed over steps
    )
    totals: collections.Counter = field(default_factory=collections.Counter)  # T per step
    lengths: collections.Counter = field(default_factory=collections.Counter)  # drafts per request per step
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)
    draft_graphs: collections.Counter = field(default_factory=collections.Counter)
    target_graphs: collections.Counter = field(default_factory=collections.Counter)
    ragged_steps: int = 0  # steps whose requests verify different numbers of drafts
    skipped_steps: int = 0  # plain decodes without a drafter run (the no-draft option)
    staged_copies: int = 0  # async mode: survivals copied without a wait in the step, planned off it
    plain_engine_steps: int = 0  # of them, run as an engine without a drafter runs them (dynamic_plain_step)
    score_kinds: collections.Counter = field(default_factory=collections.Counter)  # steps per score kind
    fused_draft_tokens: int = 0  # drafter runs whose greedy tokens came from the pass that scored them
    stale_plans: int = 0  # Model Runner V2: totals planned from an older drafter run than the drafts verified
    last_lengths: list[int] = field(default_factory=list)
    calibration: SurvivalCalibration | None = None  # its factors per draft position are reported

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "plain_steps": self.plain_steps,
            "host_copies": self.host_copies,
            "max_host_copies_per_step": self.max_host_copies_per_step,
            "host_copies_per_step": self.host_copies / self.steps if self.steps else 0.0,
            "overhead_ms_per_step": self.overhead_s / self.steps * 1e3 if self.steps else 0.0,
            "totals": {str(k): v for k, v in sorted(self.totals.items())},
            "lengths": {str(k): v for k, v in sorted(self.lengths.items())},
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "draft_graphs": {str(k): v for k, v in self.draft_graphs.items()},
            "target_graphs": {str(k): v for k, v in self.target_graphs.items()},
            "ragged_steps": self.ragged_steps,
            "skipped_steps": self.skipped_steps,
            "staged_copies": self.staged_copies,
            "plain_engine_steps": self.plain_engine_steps,
            "score_kinds": dict(sorted(self.score_kinds.items())),
            "fused_draft_tokens": self.fused_draft_tokens,
            "stale_plans": self.stale_plans,
            "calibration": (
                None if self.calibration is None else [round(float(f), 4) for f in self.calibration.factors]
            ),
        }


class DynamicVerifier:
    """Chooses each request's draft length from this step's scores (module docstring)."""

    def __init__(
        self,
        controller: BudgetController,
        graphs,  # noqa: ANN001
        backend: str = "auto",
        probe_interval: int = 1,
        calibrate: bool = False,
    ) -> None:
        self.controller = controller
        self.graphs = graphs
        self.backend = backend
        self.probe_interval = probe_interval
        self.reader = HostReader()
        self.stager = SurvivalStager()  # async mode's copy
        self.stats = DynamicStats()
        self._skips_left = 0
        self._plain_probes = 0  # consecutive probes that planned plain decoding
        # Per (B, K, device, score kind): the step's scores -> survivals, into reused buffers.
        self._scorers: dict[tuple[int, int, torch.device, str], Callable[[torch.Tensor], torch.Tensor]] = {}
        self._graph_keys: dict[tuple[int, int], tuple] = {}
        self.calibration = SurvivalCalibration(controller.max_drafts) if calibrate else None
        self.stats.calibration = self.calibration
        self.step_costs = None  # the engine's MeasuredStepCosts (ascend_spec.vllm.step_costs), when measured
        # (request ids, raw survivals [B, K]) of the plan for the next step, and of the step being verified.
        self._next_predictions: tuple[list[str], np.ndarray] | None = None
        self._step_predictions: tuple[list[str], np.ndarray] | None = None
        self._step_verified: dict[str, list[int]] = {}
        # The engine's acceptance-estimate wiring when the plan scores by it (V1: estimate_wiring.EstimateRows)
        self.estimate = None

    def skip_drafter(self) -> bool:
        """Whether this step's drafter run is skipped (a plain decode follows); counts the skip."""
        if self._skips_left <= 0:
            return False
        self._skips_left -= 1
        self.stats.skipped_steps += 1
        return True

    def lengths(self, scores: DraftScores, req_ids: list[str] | None = None) -> list[int]:
        """This step's draft length per request; ``req_ids`` (the rows' request ids) feed the calibration.

        The host path is a handful of calls: the two ops (or their one-call CPU form) into reused buffers, the
        one host copy, the calibration's factors (the survivals are not rescaled here) and
        ``BudgetController.plan_lengths``, whose per-batch-size bounds settle full-block and plain steps without
        sorting (factors and bounds compiled where a compiler exists: :mod:`ascend_spec.graph.host_plan`).
        """
        start = time.perf_counter()
        copies_before = self.reader.copies
        step = self._step_scorer(scores.kind, scores.values, scores.num_reqs, scores.num_drafts)
        if isinstance(step, _CompiledStep):  # a CPU engine: scores to decision in one native call
            self.reader.copies += 1  # the survivals are already host memory: counted, nothing copied
            total, lengths = step.plan(scores.values, self.controller)
            host = step.plan_call.predictions  # a ring slot, valid through the bookkeeping of its step
        else:
            host = self.reader.read(step(scores.values)).numpy()
            factors = self.calibration.next_factors() if self.calibration is not None else None
            total, lengths = self.controller.plan_lengths(host, factors)
            host = host.copy()  # the host buffer is reused
        if scores.available is not None:
            total, lengths = _cap(lengths, scores.available)
        if self.calibration is not None and req_ids is not None:
            self._next_predictions = (list(req_ids), host)
        self._record(lengths, total, time.perf_counter() - start, self.reader.copies - copies_before)
        self.stats.score_kinds[scores.label] += 1  # head: head_confidence; logits: max_softmax_confidence
        self.back_off(total)
        return lengths

    def begin_step(self, verified: dict[str, list[int]]) -> None:
        """A target step starts: ``verified`` maps request id -> the drafts it verifies (the scheduler's
        ``scheduled_spec_decode_tokens``); the predictions made for them move to this step."""
        self._step_predictions, self._next_predictions = self._next_predictions, None
        self._step_verified = verified

    def end_step(self, req_ids: list[str], sampled: list[list[int]]) -> None:
        """The step's host output (V1's own copy): request b accepted ``len(sampled[b]) - 1`` drafts."""
        step, verified = self._step_predictions, self._step_verified
        self._step_predictions, self._step_verified = None, {}
        self.observe_step(step, verified, req_ids, sampled)

    def observe_step(
        self,
        step: tuple[list[str], np.ndarray] | None,
        verified: dict[str, list[int]],
        req_ids: list[str],
        sampled: list[list[int]],
    ) -> None:
        """Calibration bookkeeping of one verify step: ``step`` = (planned request ids, their raw survivals) of
        the drafts verified, ``verified`` the scheduler's drafts per request, ``sampled`` the host lists.

        Vectorised over the step's rows: the counts come from the host lists with C-level ``map``s, and when
        the rows are the planned requests in the planned order (the usual step) no id is looked up.
        """
        if self.calibration is None or step is None or not verified:
            return
        start = time.perf_counter()
        planned_ids, predicted = step
        n = len(req_ids)
        if not n:
            return
        verified_counts = list(map(len, map(verified.get, req_ids, itertools.repeat(()))))
        sampled_counts = list(map(len, sampled))  # accepted + 1; 0: discarded (partial prefill)
        counts = np.array(verified_counts, np.int64)
        accepted = np.array(sampled_counts, np.int64)
        accepted -= 1
        if planned_ids == req_ids and min(verified_counts) > 0 and min(sampled_counts) > 0:  # the usual step
            self.calibration.defer(predicted, counts, accepted)  # applied by the next plan, in its call
        else:  # rows without drafts or discarded, or requests joined, left or moved since the plan
            keep = (counts > 0) & (accepted >= 0)
            if planned_ids == req_ids:
                rows = predicted
            else:  # match rows by id (unplanned ones are skipped)
                row_of = {rid: i for i, rid in enumerate(planned_ids)}
                index = np.fromiter(map(row_of.get, req_ids, itertools.repeat(-1)), np.int64, n)
                keep &= index >= 0
                rows = predicted[np.where(index >= 0, index, 0)]
            if keep.any():
                self.calibration.defer(rows[keep], counts[keep], accepted[keep])
        self.stats.overhead_s += time.perf_counter() - start

    # -- async mode (dynamic_async): score in the step, plan off it ----------------------------------------
    def stage(self, scores: DraftScores, req_ids: list[str]) -> StagedSurvivals:
        """Async mode, inside the step: this step's survivals on their way to the host, nothing waited for (one
        copy enqueued on the device's stream, :class:`SurvivalStager`); :meth:`plan_staged` plans them later."""
        step = self._step_scorer(scores.kind, scores.values, scores.num_reqs, scores.num_drafts)
        scorer = step.scorer if isinstance(step, _CompiledStep) else step
        return self.stager.stage(scorer(scores.values), req_ids, scores.label, scores.available)

    def plan_staged(self, staged: StagedSurvivals) -> list[int]:
        """Async mode, off the step (where V1 hands its output over): the staged survivals' draft lengths, by the
        sync mode's host path (calibration factors, ``BudgetController.plan_lengths``, the plain-plan back-off)."""
        start = time.perf_counter()
        host = staged.wait()
        factors = self.calibration.next_factors() if self.calibration is not None else None
        total, lengths = self.controller.plan_lengths(host, factors)
        if staged.available is not None:
            total, lengths = _cap(lengths, staged.available)
        self._record(lengths, total, time.perf_counter() - start, 0)
        self.stats.staged_copies += 1
        self.stats.score_kinds[staged.kind] += 1
        self.back_off(total)
        return lengths

    def back_off(self, total: int) -> None:
        """After a plan of ``total`` drafts: a plain plan (0) skips the drafter for a doubling stretch of steps."""
        if total == 0:  # back off while probes keep finding plain decoding best: 1x, 2x, ..., 32x
            self._plain_probes += 1
            interval = self.probe_interval * 2 ** min(self._plain_probes - 1, MAX_BACKOFF_DOUBLINGS)
            self._skips_left = interval - 1
        else:
            self._plain_probes = 0
            self._skips_left = 0

    def greedy_draft_tokens(
        self, logits: torch.Tensor, num_reqs: int, num_drafts: int
    ) -> torch.Tensor | None:
        """A greedy DFlash drafter's tokens ``[B*K]`` (``argmax`` of its ``[B*K, V]`` draft logits) from the pass
        that also scores them, where this step's scorer is the CPU engine's compiled one; None elsewhere (the
        drafter takes its own argmax and :meth:`lengths` scores the logits)."""
        step = self._step_scorer("logits", logits, num_reqs, num_drafts)
        if not isinstance(step, _CompiledStep):
            return None
        self.stats.fused_draft_tokens += 1
        return step.draft_tokens(logits)

    def _step_scorer(
        self, kind: str, values: torch.Tensor, num_reqs: int, num_drafts: int
    ) -> Callable[[torch.Tensor], torch.Tensor] | _CompiledStep:
        """This (B, K, device, kind)'s scores -> survivals ``[B, K]`` into reused buffers (no allocation per step).

        DFlash's logits on a CPU engine whose confidence op runs the native kernel take one call for both ops
        (:class:`~ascend_spec.ops.max_softmax_confidence.cpu.DraftSurvival`) and, with the compiled host plan,
        one call for the whole step (:class:`_CompiledStep`); everything else runs the two ops.
        """
        device = values.device
        key = (num_reqs, num_drafts, device, kind)
        scorer = self._scorers.get(key)
        if scorer is None:
            shape = (num_reqs, num_drafts)
            conf = torch.empty(shape, dtype=torch.float32, device=device)
            surv = torch.empty(shape, dtype=torch.float32, device=device)
            if kind == "logits" and resolve_backend(self.backend, device, op=CONFIDENCE_OP) == "cpu":
                from ascend_spec.ops.max_softmax_confidence.cpu import DraftSurvival

                scorer = DraftSurvival(conf, surv)
                if host_plan.native_available():
                    scorer = _CompiledStep(scorer, self.calibration)
            else:
                backend = self.backend

                def scorer(step_values: torch.Tensor) -> torch.Tensor:
                    confidence(DraftScores(kind, step_values, num_reqs, num_drafts), backend, out=conf)
                    return survival_probs(conf, out=surv)

            self._scorers[key] = scorer
        return scorer

    def _record(self, lengths: list[int], total: int, elapsed: float, copies: int) -> None:
        s = self.stats
        b = len(lengths)
        s.steps += 1
        s.plain_steps += total == 0
        s.host_copies += copies
        if copies > s.max_host_copies_per_step:
            s.max_host_copies_per_step = copies
        s.overhead_s += elapsed
        s.totals[total] += 1
        if (
            total % b == 0 and lengths[0] * b == total and min(lengths) == lengths[0]
        ):  # uniform: no histogram loop
            s.lengths[lengths[0]] += b
        else:
            s.lengths.update(lengths)
            s.ragged_steps += 1
        s.batch_sizes[b] += 1
        s.last_lengths = lengths
        if self.graphs is not None:
            keys = self._graph_keys.get((b, total))
            if keys is None:  # the descriptors depend on (B, T) only
                draft, target = self.graphs.step(b, b + total)
                keys = (
                    draft.key or ("draft", "eager", draft.num_tokens),
                    target.key or ("target", "eager", target.num_tokens),
                )
                self._graph_keys[(b, total)] = keys
            s.draft_graphs[keys[0]] += 1
            s.target_graphs[keys[1]] += 1


def _cap(lengths: list[int], available: list[int]) -> tuple[int, list[int]]:
    """Lengths cut to the drafts each request has, and their total."""
    lengths = list(map(min, lengths, available))
    return sum(lengths), lengths


class _CompiledStep:
    """A CPU engine's planned step as one native call: :class:`DraftSurvival` run by a
    :class:`~ascend_spec.graph.host_plan.StepPlan` that also applies the calibration's deferred bookkeeping,
    decays its factors and settles the step with the controller's bounds; only a ragged step searches in Python
    (``BudgetController.search_lengths``). Decides what the separate calls decide (tested against them)."""

    def __init__(self, scorer, calibration: SurvivalCalibration | None) -> None:  # noqa: ANN001
        self.scorer = scorer
        self.num_reqs, self.num_drafts = scorer.survival.shape
        self.plan_call = host_plan.StepPlan(scorer.survival.numpy(), scorer.entry, calibration)
        self._scored: torch.Tensor | None = None  # logits whose survivals draft_tokens() already wrote

    def draft_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The greedy draft tokens and this step's survivals in one pass (:meth:`plan` then only plans)."""
        tokens = self.scorer.draft_tokens(logits)
        self._scored = logits
        return tokens

    def plan(self, logits: torch.Tensor, controller: BudgetController) -> tuple[int, list[int]]:
        b = self.num_reqs
        scored, self._scored = self._scored is logits, None
        if not scored:
            self.scorer.prepare(logits)
        plan_call = self.plan_call
        decision = plan_call(*controller.lean_bounds(b), not scored)
        if value_checks_enabled(_HOST):  # plan_lengths' host guard, after the call that made the values
            controller.check_host_survivals(plan_call.predictions, plan_call.factors)
        if decision == host_plan.FULL:
            return controller.settle(b, b * self.num_drafts)
        if decision == host_plan.PLAIN:
            return controller.settle(b, 0)
        return controller.search_lengths(plan_call.predictions, plan_call.factors)


def trim_draft_token_ids(draft, lengths: list[int] | None):  # noqa: ANN001, ANN201
    """vLLM's ``DraftTokenIds`` with request b's list cut to ``lengths[b]`` (same request order)."""
    if draft is None or lengths is None:
        return draft
    if len(lengths) != len(draft.req_ids):
        raise RuntimeError(
            f"ascend-spec dynamic verification chose lengths for {len(lengths)} requests but the drafter's lists "
            f"are for {len(draft.req_ids)}"
        )
    rows = draft.draft_token_ids
    if all(len(row) <= n for row, n in zip(rows, lengths)):  # full blocks: nothing to cut
        return draft
    ids = [list(row[:n]) for row, n in zip(rows, lengths)]
    return type(draft)(draft.req_ids, ids)


def startup_line(
    *,
    runner: str,
    controller: str,
    mode: str,
    method: str,
    scored_by: str,
    num_spec_tokens: int,
    draft_tokens: int,
    profile_source: str,
    startup_s: float,
) -> str:
    """The one start-up line of dynamic verification, the same on every runner: which controller runs, in which
    mode, on what scores, and where its cost profiles came from."""
    return (
        f"ascend-spec: dynamic verification on {runner}: controller {controller}, mode {mode}; {method} drafts "
        f"scored by {scored_by}, K={num_spec_tokens}, drafter Q={draft_tokens}; cost profiles {profile_source} "
        f"({startup_s:.2f} s at start-up)"
    )
