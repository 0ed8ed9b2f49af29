"""ascend-spec's replacement for vllm-ascend's ``DynamicSpecScheduler``, and the seam to the engine-side planner.

vllm-ascend's DFlash and DSpark proposers keep a ``dynamic_spec`` object: after drafting they call
``dynamic_spec.update(logits=...)`` (DFlash) or ``update(model=, last_hidden_states=, draft_token_ids=,
num_reqs=)`` (DSpark), and the runner's ``take_draft_token_ids`` cuts request b's drafts to
``dynamic_spec.num_verify_tokens[b]``. Theirs scores with ``max(softmax(logits.float()))`` (an N x V fp32
temporary), keeps a threshold budget refreshed by an ``.item()`` every 16 steps, and the runner then reads the
device lengths one ``int()`` per request. :class:`AscendSpecDynamicSpec` keeps that interface and does instead:

* confidence: ``max_softmax_confidence`` on DFlash's draft logits (no N x V temporary), or ``head_confidence`` on
  DSpark's confidence head (the draft model's own ``markov_embed`` and ``model.confidence_head`` logits);
* ``update`` only writes the confidences into a static buffer: DFlash's ``update`` runs inside the drafter's
  FULL ACL graph, where host code runs once at capture and never at replay, so it must be device work at fixed
  addresses;
* :meth:`AscendSpecDynamicSpec.finish`, called by the adapter's proposer after the draft pass (outside any
  graph), hands the real requests' rows to a :class:`VerifyPlanner` (the seam below), which turns the ``[B, K]``
  confidences into ``[B]`` draft counts, and makes one pinned, non-blocking device-to-host copy of all B lengths
  (with the async controller's best total for its history as element B: the step's only copy);
  ``num_verify_tokens`` is that host tensor (the runner's per-request ``int()`` then reads host memory).

The seam: :class:`VerifyPlanner` is the one call the adapter makes, ``plan(confidence [B, K]) -> [B] int32``.
:class:`ControllerVerifyPlanner` is its composition of the project's pieces (``survival_probs`` ->
``BudgetController.plan`` -> ``allocate_verify_budget``), built at the engine's first real step from the
``dynamic.profile`` costs (measured on the NPU runner, or read): :mod:`ascend_spec.vllm.ascend.dynamic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ascend_spec.graph.controller import BudgetController, BudgetPlan
from ascend_spec.ops import head_confidence, max_softmax_confidence, survival_probs

METHODS = ("dflash", "dspark")


class VerifyPlanner(Protocol):
    """Per-request draft lengths from per-position confidences; the engine-side controller implements this."""

    def plan(self, confidence: torch.Tensor) -> torch.Tensor:
        """``confidence [B, K]`` fp32 in [0, 1] -> ``[B]`` int32 drafts to verify, on the same device."""
        ...

    # Optional: ``staged_total() -> 0-dim device tensor | None`` and ``record_total(int)``: a value the planner
    # wants on the host, carried by the scheduler's one copy per step and handed back once it has landed.


class ControllerVerifyPlanner:
    """survival_probs -> BudgetController.plan (the step's total T) -> allocate_verify_budget (the split)."""

    def __init__(self, controller: BudgetController, *, backend: str = "auto") -> None:
        self.controller = controller
        self.backend = backend
        self.last_plan: BudgetPlan | None = None
        # The async controller's best total rides in the scheduler's one lengths copy (staged_total, then
        # record_total) instead of a second 1-element copy of its own.
        controller.stage_totals = True

    def staged_total(self) -> torch.Tensor | None:
        """This step's best total for the controller's history (async mode; a 0-dim device tensor), taken once."""
        total, self.controller.staged_total = self.controller.staged_total, None
        return total

    def record_total(self, total: int) -> None:
        self.controller.record_total(total)

    def plan(self, confidence: torch.Tensor) -> torch.Tensor:
        survival = survival_probs(confidence)
        plan = self.controller.plan(survival)
        self.last_plan = plan
        # The controller splits its total with allocate_verify_budget on its backend in both modes (device-side;
        # plan.allocator names the backend), so the plan's per-request counts are the split.
        return plan.num_drafts


def _confidence_logits(model: Any, hidden: torch.Tensor, markov: torch.Tensor) -> torch.Tensor:
    """The DSpark confidence head's logits (before the sigmoid ``head_confidence`` applies).

    vLLM 0.30.0's ``Qwen3DSparkForCausalLM`` (what vllm-ascend 0.30.0rc2's ``AscendQwen3DSparkForCausalLM``
    subclasses) exposes only ``compute_confidence`` = ``sigmoid(model.confidence_head(hidden, markov))``
    (``qwen3_dspark.py``); the head itself gives the logits. A model with ``confidence_logits`` is asked directly.
    """
    if hasattr(model, "confidence_logits"):
        return model.confidence_logits(hidden, markov)
    return model.model.confidence_head(hidden, markov)


@dataclass(frozen=True)
class PublishedLengths:
    """One step's lengths in their host slot (``event``: the copy's end, None when already there)."""

    req_ids: list[str]
    host: torch.Tensor
    event: Any

    def by_request(self) -> dict[str, int]:
        """Request id -> drafts to verify, once the copy has landed (waits for it: off the step)."""
        if self.event is not None:
            self.event.synchronize()
        return dict(zip(self.req_ids, self.host.tolist()))


class AscendSpecDynamicSpec:
    """Drop-in for ``vllm_ascend.spec_decode.utils.DynamicSpecScheduler`` (module docstring)."""

    def __init__(
        self,
        *,
        method: str,
        planner: VerifyPlanner | None,
        max_batch_size: int,
        num_speculative_tokens: int,
        device: torch.device | str,
        backend: str = "auto",
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
        self.method = method
        # None until the engine's first real step (profiles are measured after the KV cache exists:
        # ascend_spec.vllm.ascend.dynamic); until then every draft is verified.
        self.planner = planner
        self.max_batch_size = max_batch_size
        self.num_speculative_tokens = num_speculative_tokens
        self.device = torch.device(device) if isinstance(device, str) else device
        self.backend = backend
        self._confidence = torch.zeros(
            max_batch_size, num_speculative_tokens, dtype=torch.float32, device=self.device
        )
        # B lengths, then one element for the planner's staged total (async controller): one copy carries both.
        # A ring of host slots: under async scheduling a step's lengths are read where its output is handed over,
        # after the next step may have published its own.
        pinned = self.device.type != "cpu"
        self._ring = [torch.zeros(max_batch_size + 1, dtype=torch.int32, pin_memory=pinned) for _ in range(4)]
        self._next_slot = 0
        self._host = self._ring[0]
        self._event: Any = None
        self._num_reqs: int | None = None
        self._total_at: int | None = None  # where the last copy put a staged total not yet recorded
        self.host_copies = 0  # device-to-host copies made (one per finished step)
        self.step_drafts = num_speculative_tokens  # this step's K (vllm-ascend may schedule fewer than K)
        self.req_ids: list[str] = []  # the draft pass's requests, set by the proposer before finish()
        self.published: PublishedLengths | None = None  # the last finish()'s lengths, for the hand-over

    # -- the interface vllm-ascend's proposers and runner use -------------------------------------------------
    def update(
        self,
        *,
        logits: torch.Tensor | None = None,
        model: Any = None,
        last_hidden_states: torch.Tensor | None = None,
        draft_token_ids: torch.Tensor | None = None,
        num_reqs: int | None = None,
    ) -> torch.Tensor:
        """This step's confidences into the static buffer (graph-safe device work); returns them ``[B', K]``.

        ``B'`` is the draft pass's row count (graph padding included); :meth:`finish` reads the real requests.
        """
        if self.method == "dflash":
            conf = self.dflash_confidence(logits)
        else:
            conf = self.dspark_confidence(model, last_hidden_states, draft_token_ids, num_reqs)
        rows, k = conf.shape
        if rows > self.max_batch_size:
            raise ValueError(
                f"the draft pass scored {rows} requests; the scheduler was built for max_batch_size="
                f"{self.max_batch_size}"
            )
        self._confidence[:rows, :k].copy_(conf)
        self._confidence[:rows, k:].zero_()  # positions not drafted this step: never verified
        return self._confidence[:rows]

    def finish(self, num_reqs: int, *, num_drafts: int | None = None) -> torch.Tensor:
        """After the draft pass: plan the lengths of the first ``num_reqs`` requests and copy them to the host.

        ``num_drafts`` is the step's drafted K; 0 (the scheduler asked for no drafts) gives every request 0.
        """
        if not 0 < num_reqs <= self.max_batch_size:
            raise ValueError(f"num_reqs must be in [1, {self.max_batch_size}]; got {num_reqs}")
        if num_drafts == 0:
            lengths = torch.zeros(num_reqs, dtype=torch.int32, device=self.device)
        elif self.planner is None:  # before the first real step (warm-up): the drafts as proposed
            lengths = torch.full((num_reqs,), self.step_drafts, dtype=torch.int32, device=self.device)
        else:
            lengths = self.planner.plan(self._confidence[:num_reqs])
        self._publish(lengths)
        return lengths

    @property
    def num_verify_tokens(self) -> torch.Tensor | None:
        """This step's [B] int32 lengths in host memory (None before the first update)."""
        if self._num_reqs is None:
            return None
        self._wait_copy()
        return self._host[: self._num_reqs]

    def _wait_copy(self) -> None:
        """The last copy has landed: hand its staged total (host memory now) to the planner."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        if self._total_at is not None:
            self.planner.record_total(int(self._host[self._total_at]))
            self._total_at = None

    # -- confidences -----------------------------------------------------------------------------------------
    def dflash_confidence(self, logits: torch.Tensor | None) -> torch.Tensor:
        """``logits [B*K, V]`` (the draft block's sampled rows, request-major) -> ``[B, K]``."""
        if logits is None:
            raise ValueError("dynamic_spec.update: DFlash needs logits= (the draft logits [B*K, V])")
        k = self.step_drafts
        if logits.dim() != 2 or logits.shape[0] % k:
            raise ValueError(
                f"logits must be [B*K, V] with K={k} rows per request; got shape {list(logits.shape)}"
            )
        return max_softmax_confidence(logits, backend=self.backend).view(-1, k)

    def dspark_confidence(
        self,
        model: Any,
        last_hidden_states: torch.Tensor | None,
        draft_token_ids: torch.Tensor | None,
        num_reqs: int | None,
    ) -> torch.Tensor:
        """The confidence head on the block's hidden states and the Markov inputs of each position -> [B, K]."""
        if model is None or last_hidden_states is None or draft_token_ids is None or num_reqs is None:
            raise ValueError(
                "dynamic_spec.update: DSpark needs model=, last_hidden_states=, draft_token_ids= and num_reqs="
            )
        k = self.step_drafts
        rows = num_reqs * k
        if last_hidden_states.shape[0] != rows:
            raise ValueError(
                f"last_hidden_states must hold num_reqs * K = {num_reqs} * {k} = {rows} rows (one per drafted "
                f"position, the anchor-first block); got {last_hidden_states.shape[0]}"
            )
        hidden = last_hidden_states.reshape(rows, last_hidden_states.shape[-1])
        markov = model.markov_embed(draft_token_ids[:num_reqs, :k])
        markov = markov.reshape(rows, markov.shape[-1]).to(hidden.dtype)
        return head_confidence(_confidence_logits(model, hidden, markov).reshape(num_reqs, k))

    # -- the one host copy -----------------------------------------------------------------------------------
    def _publish(self, lengths: torch.Tensor) -> None:
        b = lengths.shape[0]
        if b > self.max_batch_size:
            raise ValueError(f"lengths hold {b} requests; the scheduler was built for {self.max_batch_size}")
        self._wait_copy()  # a previous step's total not read yet (the runner skipped num_verify_tokens)
        staged = getattr(self.planner, "staged_total", None)
        total = staged() if staged is not None else None
        if total is not None:  # [lengths | total] on the device, then one copy
            lengths = torch.cat((lengths.to(torch.int32), total.to(torch.int32).view(1)))
        n = lengths.shape[0]
        self._host = self._ring[self._next_slot % len(self._ring)]
        self._next_slot += 1
        self._host[:n].copy_(lengths, non_blocking=lengths.device.type != "cpu")
        self.host_copies += 1
        self._num_reqs = b
        self._total_at = b if total is not None else None
        self._event = None
        if lengths.device.type in ("npu", "cuda"):
            mod = torch.cuda if lengths.device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
            self._event = mod.Event()
            self._event.record()
        req_ids = list(self.req_ids[:b]) if len(self.req_ids) >= b else []
        self.published = PublishedLengths(req_ids, self._host[:b], self._event)
