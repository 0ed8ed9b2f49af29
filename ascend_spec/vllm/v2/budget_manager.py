"""Dynamic verification on Model Runner V2: the plugin's replacement of V2's adaptive-verification manager.

V2's runner (``vllm/v1/worker/gpu/model_runner.py``, vLLM 0.32.0) asks its ``adaptive_verification`` object, when
it has one, for the step's token count on the host before the inputs are built (``get_num_tokens``, :1317), a
host view of the trimmed batch (``compact_batch``, :1416), the per-request split on the device
(``reallocate_drafts``, :1436-1440: it writes ``query_start_loc`` and returns ``cu_num_logits``), the new drafts'
confidences after the drafter (``record_confidences``, :2258) and a reset per new request (``add_request``,
:1202). :class:`DeviceBudgetManager` answers the same calls:

1. after the drafter (``record_confidences``, device): the confidences of the drafts just proposed (DFlash:
   ``max_softmax_confidence`` of its draft logits; DSpark: ``head_confidence`` of its confidence head) become
   ``survival_probs``, kept per request slot for the split and staged to the host (one non-blocking copy with an
   event, :class:`~ascend_spec.vllm.dynamic.SurvivalStager`; nothing waits for it);
2. before the next step's inputs (``get_num_tokens``, host): the total T from the newest staged survivals whose
   copy has already landed (``event.query()``: never a wait; on a GPU in sync scheduling usually the previous
   drafter run's, on the CPU engine the current one's), planned with the cost profiles measured at start by
   ``BudgetController.plan_lengths`` (Model Runner V1's sync-mode decision on those survivals). T = 0 is the
   no-draft option: plain decoding, and the drafter is skipped for a doubling stretch of steps;
3. in the step (``reallocate_drafts``, device): ``allocate_verify_budget`` splits T over the requests by the
   survivals of the drafts this step verifies (the current drafter run's), each request capped at its scheduled
   drafts; ``query_start_loc`` and ``cu_num_logits`` follow from the per-request counts on the device.

No value crosses from the device to the host inside a step: the only device-to-host transfers are the staged
survivals and the staged per-request counts (for the stats, folded in once they have landed), both counted.

Where the plan reaches vLLM's scheduler depends on the scheduling:

* **sync scheduling** (``scheduled_plan``; V2 on the CPU engine, any engine with async scheduling off): after a
  step, vLLM's engine core takes the drafts for its scheduler (``take_draft_token_ids``); the runner's wrapper
  (:func:`~ascend_spec.vllm.v2.dynamic_hooks.install_v2_dynamic`) calls :meth:`DeviceBudgetManager.take_planned`,
  which waits for that drafter run's staged survivals (the one wait, off the step, as Model Runner V1's sync
  mode), plans them with ``DynamicVerifier.plan_staged`` and cuts each request's list to its length. The
  scheduler then schedules, allocates KV for and counts (``vllm:spec_decode_num_draft_tokens``) exactly the
  planned drafts, and the step verifies what was scheduled: steps 2 and 3 are not run (no re-plan, no split);
* **async scheduling**: the engine core never takes the drafts, the scheduler schedules K placeholders per
  request and steps 2 and 3 shrink them inside the step. vLLM's scheduler, its KV allocation and its counters
  (``vllm:spec_decode_num_draft_tokens``) there count the scheduler's K placeholders, not the verified drafts;
  the plugin's stats (``DynamicStats.lengths``) hold the device split.

Drafters without confidences of their own (ngram, MTP, EAGLE / EAGLE-3, draft_model) are planned on the online
acceptance estimate (:mod:`ascend_spec.vllm.v2.estimate_wiring`, ``estimate``): it writes the rows' estimate into
the buffer ``record_confidences`` receives, and ``add_request`` resets its slot with the manager's.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np
import torch

from ascend_spec.ops import allocate_verify_budget, survival_probs
from ascend_spec.vllm.dynamic import DynamicVerifier, StagedSurvivals, SurvivalStager, trim_draft_token_ids
from ascend_spec.vllm.v2.estimate_wiring import V2EstimateRows

#: Staged runs kept for planning (the stager's ring has one slot more, so a kept slot is never overwritten).
KEPT_RUNS = 3


def landed(staged: StagedSurvivals) -> bool:
    """Whether a staged copy is on the host already (asked without waiting)."""
    return staged.event is None or bool(staged.event.query())


class DeviceBudgetManager:
    """Stands in for V2's ``AdaptiveVerificationManager`` (module docstring); ``verifier`` holds the controller,
    the no-draft back-off and the stats."""

    def __init__(
        self,
        verifier: DynamicVerifier,
        *,
        max_num_reqs: int,
        num_speculative_steps: int,
        query_start_loc: torch.Tensor,
        num_bonus_tokens: int,
        max_total_logits: int,
        score_kind: str,
        backend: str = "auto",
        admitted_counts_item: bool = False,
        estimate: V2EstimateRows | None = None,
        scheduled_plan: bool = False,
    ) -> None:
        self.verifier = verifier
        self.num_speculative_steps = k = num_speculative_steps
        self.query_start_loc = query_start_loc
        self.num_bonus_tokens = num_bonus_tokens
        self.max_total_logits = max_total_logits
        self.score_kind = score_kind
        self.backend = backend
        self.admitted_counts_item = admitted_counts_item  # V2Shims.reallocate_returns_admitted_counts
        self.estimate = estimate  # the acceptance estimate per request slot, when the plan scores by it
        # sync scheduling: the plan reaches the scheduler through take_planned; the scheduled drafts are the plan
        self.scheduled_plan = scheduled_plan
        device = query_start_loc.device
        self._survival = torch.ones(max_num_reqs, k, dtype=torch.float32, device=device)  # per request slot
        self._rows = torch.empty(max_num_reqs, k, dtype=torch.float32, device=device)  # a run, batch order
        self._capacity = torch.zeros(max_num_reqs, dtype=torch.int32, device=device)
        self._non_draft = torch.zeros(max_num_reqs, dtype=torch.int32, device=device)
        self._cu_num_logits = torch.zeros_like(query_start_loc)
        self._staged: collections.deque[StagedSurvivals] = collections.deque(maxlen=KEPT_RUNS)
        self._count_stager = SurvivalStager(slots=KEPT_RUNS + 1)
        self._counts: collections.deque[tuple[StagedSurvivals, np.ndarray]] = collections.deque()
        self._batch: tuple[dict[str, int], dict[str, int], int] | None = None
        self.drafter_ran = True  # the last drafter call proposed drafts (False: skipped, the no-draft option)
        self._drafted = False  # the drafts scheduled now come from a drafter run that was scored
        self._to_take: StagedSurvivals | None = None  # sync scheduling: the last drafter run, not yet planned
        self.unfolded_counts = 0  # staged per-request counts dropped from the stats before they landed

    # -- V2's calls, in step order ------------------------------------------------------------------------
    def add_request(self, req_idx: int) -> None:
        """A request took slot ``req_idx``: nothing of its slot's last owner may rank its drafts."""
        self._survival[req_idx].fill_(1.0)
        if self.estimate is not None:
            self.estimate.reset(req_idx)

    def get_num_tokens(self, num_tokens_per_req: dict[str, int], draft_tokens: dict[str, list[int]]) -> int:
        """The step's token count (host): every non-draft token plus the planned total T of drafts."""
        start = time.perf_counter()
        self._fold_counts()
        req_ids = list(num_tokens_per_req)
        b = len(req_ids)
        scheduled = np.fromiter((len(draft_tokens.get(r, ())) for r in req_ids), np.int64, b)
        non_draft = np.fromiter(num_tokens_per_req.values(), np.int64, b) - scheduled
        if self.scheduled_plan:  # the scheduler scheduled the plan (take_planned): verify it as it is
            total = int(scheduled.sum())
        else:
            limit = min(int(scheduled.sum()), max(0, self.max_total_logits - b * self.num_bonus_tokens))
            total = self._plan_total(req_ids, scheduled, limit) if self._drafted and limit > 0 else 0
        self._batch = (dict(zip(req_ids, scheduled.tolist())), dict(zip(req_ids, non_draft.tolist())), total)
        self.verifier.stats.overhead_s += time.perf_counter() - start
        return int(non_draft.sum()) + total

    def compact_batch(
        self,
        num_draft_tokens_per_req: np.ndarray,
        num_scheduled_tokens: np.ndarray,
        cu_num_logits_np: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The host's view of the trimmed batch: T spread evenly over the verifying requests (the device holds
        the real split; V2's attention metadata reads the device's ``query_start_loc``)."""
        assert self._batch is not None
        total = self._batch[2]
        drafts = num_draft_tokens_per_req
        if total == int(drafts.sum()):
            return num_scheduled_tokens, cu_num_logits_np
        non_draft = num_scheduled_tokens - drafts
        if total == 0:
            logits = np.arange(len(drafts) + 1, dtype=cu_num_logits_np.dtype) * self.num_bonus_tokens
            return non_draft, logits
        verifying = np.flatnonzero(drafts > 0)
        share = np.zeros_like(non_draft)
        share[verifying] = total // len(verifying)
        share[verifying[: total % len(verifying)]] += 1
        return non_draft + share, cu_num_logits_np

    def reallocate_drafts(self, req_ids: list[str], idx_mapping: torch.Tensor) -> tuple:
        """The device split of T: per-request draft counts, then ``cu_num_logits`` and ``query_start_loc`` (and,
        where the release unpacks four items, None: no admitted counts go to the host)."""
        from vllm.utils.torch_utils import async_tensor_h2d

        start = time.perf_counter()
        batch, self._batch = self._batch, None
        assert batch is not None
        scheduled_of, non_draft_of, total = batch
        b = idx_mapping.shape[0]
        scheduled = np.fromiter(map(scheduled_of.__getitem__, req_ids), np.int32, b)
        non_draft = np.fromiter(map(non_draft_of.__getitem__, req_ids), np.int32, b)
        capacity = self._capacity[:b]
        non_draft_dev = self._non_draft[:b]
        async_tensor_h2d(non_draft, out=non_draft_dev)
        if total == 0:
            counts = capacity.zero_()
        else:
            async_tensor_h2d(scheduled, out=capacity)
            counts = capacity
            if total < int(scheduled.sum()):
                survival = self._survival.index_select(0, idx_mapping)
                counts = allocate_verify_budget(
                    survival, total, capacities=capacity, max_budget=total, backend=self.backend
                ).num_drafts
        self._cu_num_logits[:1].zero_()
        torch.cumsum(
            counts + self.num_bonus_tokens,
            0,
            dtype=self._cu_num_logits.dtype,
            out=self._cu_num_logits[1 : b + 1],
        )
        qsl = self.query_start_loc
        qsl[:1].zero_()
        torch.cumsum(counts + non_draft_dev, 0, dtype=qsl.dtype, out=qsl[1 : b + 1])
        qsl[b + 1 :].fill_(int(non_draft.sum()) + total)
        verifying = np.flatnonzero(scheduled > 0)
        if total > 0 and verifying.size and not self.scheduled_plan:  # the split, for the stats: staged, read
            # once landed (sync scheduling: plan_staged recorded the scheduled lengths already)
            self._counts.append((self._count_stager.stage(counts, req_ids, "counts"), verifying))
        self.verifier.stats.overhead_s += time.perf_counter() - start
        if self.admitted_counts_item:
            return self._cu_num_logits[: b + 1], qsl, total, None
        return self._cu_num_logits[: b + 1], qsl, total

    def record_confidences(self, confidence_probs: torch.Tensor, input_batch: Any) -> None:  # noqa: ANN401
        """After the drafter: this run's survivals per request slot (device) and on their way to the host."""
        self._drafted = self.drafter_ran
        self._to_take = None
        b = input_batch.num_reqs
        if not self.drafter_ran or b == 0:
            return
        start = time.perf_counter()
        rows = survival_probs(confidence_probs[:b], out=self._rows[:b])
        self._survival.index_copy_(0, input_batch.idx_mapping.to(torch.int64), rows)
        staged = self.verifier.stager.stage(rows, list(input_batch.req_ids), self.score_kind)
        self._staged.append(staged)
        if self.scheduled_plan:
            self._to_take = staged  # plan_staged counts the copy when it plans it
        else:
            self.verifier.stats.staged_copies += 1
        self.verifier.stats.overhead_s += time.perf_counter() - start

    # -- sync scheduling: the plan through the engine core's take_draft_token_ids ---------------------------
    def take_planned(self, draft: Any) -> Any:  # noqa: ANN401
        """vLLM's ``DraftTokenIds`` of the last drafter run with request b's list cut to its planned length
        (sync scheduling, off the step): the staged survivals are waited for and planned; a skipped drafter run
        (or one with no rows) gives every request 0 drafts, a plain step."""
        if not self.scheduled_plan:
            raise RuntimeError(
                "ascend-spec: take_planned serves sync scheduling only; this manager has scheduled_plan=False "
                "(async scheduling, where the split runs inside the step)"
            )
        staged, self._to_take = self._to_take, None
        if draft is None:
            return None
        req_ids = list(draft.req_ids)
        if staged is None:
            lengths = [0] * len(req_ids)
        else:
            planned = self.verifier.plan_staged(staged)
            if staged.req_ids == req_ids:
                lengths = planned
            else:  # rows matched by request id; a request the run did not score gets no drafts
                of = dict(zip(staged.req_ids, planned))
                lengths = [of.get(r, 0) for r in req_ids]
        return trim_draft_token_ids(draft, lengths)

    # -- host side ---------------------------------------------------------------------------------------
    def _plan_total(self, req_ids: list[str], scheduled: np.ndarray, limit: int) -> int:
        """T for the verifying rows from the newest landed survivals (rows matched by request id; a request
        without staged survivals counts as sure, as V2 does), capped at ``limit``."""
        verifier, k = self.verifier, self.num_speculative_steps
        rows = np.flatnonzero(scheduled > 0)
        host = np.ones((rows.size, k), np.float32)
        newest = None
        for age, staged in enumerate(reversed(self._staged)):
            if landed(staged):
                newest = staged
                verifier.stats.stale_plans += age > 0
                break
        if newest is not None:
            values = newest.host.numpy()  # landed: reading it waits for nothing
            row_of = {rid: i for i, rid in enumerate(newest.req_ids)}
            for j, r in enumerate(rows.tolist()):
                i = row_of.get(req_ids[r])
                if i is not None:
                    host[j] = values[i]
        host[np.arange(k)[None, :] >= scheduled[rows][:, None]] = 0.0  # past a request's scheduled drafts
        total = min(verifier.controller.plan_lengths(host, None)[0], limit)
        self._record_plan(int(rows.size), total)
        verifier.back_off(total)
        return total

    def _record_plan(self, num_reqs: int, total: int) -> None:
        s = self.verifier.stats
        s.steps += 1
        s.plain_steps += total == 0
        s.totals[total] += 1
        s.batch_sizes[num_reqs] += 1
        s.score_kinds[self.score_kind] += 1
        graphs = self.verifier.graphs
        if graphs is not None:
            draft, target = graphs.step(num_reqs, num_reqs + total)
            s.draft_graphs[draft.key or ("draft", "eager", draft.num_tokens)] += 1
            s.target_graphs[target.key or ("target", "eager", target.num_tokens)] += 1
        if total == 0:
            s.lengths[0] += num_reqs

    def _fold_counts(self) -> None:
        """Per-request counts of earlier steps into the stats, where their copies have landed (never waits)."""
        s = self.verifier.stats
        while self._counts and landed(self._counts[0][0]):
            staged, verifying = self._counts.popleft()
            counts = staged.host.numpy()[verifying]
            s.lengths.update(counts.tolist())
            s.ragged_steps += bool(counts.min() != counts.max())
            s.last_lengths = counts.tolist()
        while len(self._counts) >= KEPT_RUNS:  # their ring slots are about to be reused
            self._counts.popleft()
            self.unfolded_counts += 1

    def flush_stats(self) -> None:
        """Fold every landed count (the stats' reader calls it between steps)."""
        self._fold_counts()
