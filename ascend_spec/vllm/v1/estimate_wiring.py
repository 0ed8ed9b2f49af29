"""The acceptance estimate (:mod:`ascend_spec.vllm.acceptance_estimate`) in Model Runner V1's step.

Per step, in stream order and without a host read:

* ``_sample`` (patch point ``dynamic_estimate_observe``): the rejection sampler's ``[B, 1 + max_spec_len]``
  output holds ``PLACEHOLDER_TOKEN_ID`` (-1) past each request's emitted tokens, so ``accepted = valid - 1`` per
  row on the device; the drafts each row verified are the differences of the metadata's device
  ``cu_num_draft_tokens``. A step without verified drafts only ages the evidence.
* after the drafter (``dynamic_propose`` / ``dynamic_async_stage``): the rows' estimate ``[B, K]`` becomes the
  step's :class:`~ascend_spec.vllm.dynamic.DraftScores` of kind ``estimate``: for drafters without scores the
  estimate itself, with ngram's per-request draft counts as the available drafts (V1's ngram drafts on the host
  and may find fewer than K, or none); for DFlash / DSpark under ``"estimate": "combine"`` their confidences
  times the request's observed / predicted ratio.

Rows map to slots by request id (:class:`~ascend_spec.vllm.acceptance_estimate.RequestSlots`: V1's persistent
batch moves rows when requests leave); the slot index is uploaded only when the batch's request list changes
(a non-blocking copy from pinned memory on devices: host-to-device, never a read).
"""

from __future__ import annotations

from typing import Any

import torch

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator, RequestSlots
from ascend_spec.vllm.dynamic import DraftScores, confidence

#: The rejection sampler's marker of an output position without a token (vllm.v1.sample.rejection_sampler).
PLACEHOLDER_TOKEN_ID = -1


def _to_device(values: list[int], device: torch.device) -> torch.Tensor:
    host = torch.tensor(values, dtype=torch.int64)
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


class EstimateRows:
    """One V1 runner's estimator, its request slots, and the two step calls (module docstring)."""

    def __init__(self, estimator: AcceptanceEstimator, backend: str = "auto") -> None:
        self.estimator = estimator
        self.backend = backend
        self.slots = RequestSlots(estimator.num_slots)
        self._req_ids: list[str] | None = None
        self._rows: torch.Tensor | None = None
        self._conf: dict[tuple[int, int], torch.Tensor] = {}

    def rows(self, req_ids: list[str]) -> torch.Tensor:
        """The slots of the batch's rows on the device (fresh slots reset), rebuilt when the request list changes."""
        if self._rows is not None and req_ids == self._req_ids:
            return self._rows
        slots, fresh = self.slots.assign(list(req_ids))
        device = self.estimator.device
        if fresh:
            self.estimator.reset(_to_device(fresh, device))
        self._rows = _to_device(slots, device)
        self._req_ids = list(req_ids)
        return self._rows

    def observe(self, req_ids: list[str], sampler_output: Any, metadata: Any) -> None:  # noqa: ANN401
        """A target step's evidence from the sampler's device output (``metadata``: the step's
        ``SpecDecodeMetadata`` as V1 built it; None or no drafts: the evidence only ages)."""
        sampled = getattr(sampler_output, "sampled_token_ids", None)
        if metadata is None or not torch.is_tensor(sampled) or max(metadata.num_draft_tokens, default=0) == 0:
            self.estimator.observe()
            return
        rows = self.rows(req_ids)
        b = rows.shape[0]
        accepted = (sampled[:b] != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1
        cu = metadata.cu_num_draft_tokens[:b].to(torch.int64)
        verified = torch.diff(cu, prepend=cu.new_zeros(1))
        self.estimator.observe(rows, verified, accepted.clamp_(min=0))

    def scores(
        self, drafts: torch.Tensor | list[list[int]], req_ids: list[str], own: DraftScores | None
    ) -> DraftScores | None:
        """This step's scores for the planner: the estimate (``own``, the drafter's scores, combined when given);
        None when no row has a draft (nothing to plan: every row verifies none)."""
        estimator = self.estimator
        k = estimator.max_drafts
        available = counts = None
        if torch.is_tensor(drafts):
            b = drafts.shape[0]
        else:  # ngram's host lists: 0..K drafts per request
            counts = [min(len(row), k) for row in drafts]
            if not any(counts):
                return None
            b = len(counts)
            if min(counts) < k:
                available = _to_device(counts, estimator.device)
        if b != len(req_ids):
            raise RuntimeError(f"the drafter proposed for {b} requests, the batch has {len(req_ids)}")
        rows = self.rows(req_ids)
        conf = None
        label = "estimate"
        if own is not None:
            buffer = self._conf.get((b, k))
            if buffer is None or buffer.device != estimator.device:
                buffer = self._conf[(b, k)] = torch.empty(b, k, dtype=torch.float32, device=estimator.device)
            conf = confidence(own, self.backend, out=buffer)
            label = f"{own.kind}+estimate"
        values = estimator.estimate(rows, conf, available)
        return DraftScores(
            "estimate", values, b, k, label=label, available=counts if available is not None else None
        )

    def as_dict(self) -> dict[str, Any]:
        """The population's rate and decayed trials per position (read off the step, for the stats)."""
        return {
            "population_rate": [round(float(x), 4) for x in self.estimator.population_rate().cpu()],
            "population_trials": [round(float(x), 4) for x in self.estimator.population[1].cpu()],
            "steps": self.estimator.steps,
        }
