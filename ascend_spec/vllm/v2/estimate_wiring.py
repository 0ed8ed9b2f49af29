"""The acceptance estimate (:mod:`ascend_spec.vllm.acceptance_estimate`) in Model Runner V2's step.

V2 keeps what the estimate needs on the device, indexed the way the estimate is: a request holds one request slot
(``req_states``' index, the rows of ``idx_mapping``) from ``add_requests`` until it leaves, and after the
rejection sampler every batch row has ``num_sampled`` (accepted drafts + the bonus token; 0 for a prefill chunk
that samples nothing) and ``num_rejected`` (the row's logits minus ``num_sampled``: the drafts it verified and
did not accept; 0 for a prefill chunk), ``input_batch.py`` ``_get_num_sampled_and_rejected_kernel`` (vLLM 0.32.0
to 0.34.0). So, per step, with no host read and no slot map of its own (V1 needs
:class:`~ascend_spec.vllm.acceptance_estimate.RequestSlots`):

* **reset** (the manager's ``add_request``, which V2 calls for every request it adds): the slot's history goes;
* **observe** (the speculator's ``propose`` wrapper, before the drafter runs; V2 hands ``propose`` the step's
  ``num_sampled`` / ``num_rejected`` and the batch's ``idx_mapping``): ``accepted = num_sampled - bonus``,
  ``verified = accepted + num_rejected``. A prefill chunk (both 0) and a plain step (no drafts: the plain
  sampler's ``num_rejected`` is 0) add no evidence and only age it;
* **score** (the same wrapper, after the drafter): the rows' estimate ``q [B, K]`` is written into the
  speculator's ``draft_token_confidence_probs``, the buffer V2 hands the manager's ``record_confidences`` next
  (its cumulative product becomes the survivals the plan and the split use). For a drafter with scores of its
  own (DFlash / DSpark under ``"estimate": "combine"``) that buffer already holds its conditional confidences
  and the estimate rescales them in place; ngram's speculator has no such buffer and is given one.

Batch rows V2 masks with ``idx_mapping = -1`` land in one extra slot that no request owns.
"""

from __future__ import annotations

from typing import Any

import torch

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator


class V2EstimateRows:
    """One V2 runner's estimator over its request slots (``max_num_reqs``, plus one for masked rows)."""

    def __init__(self, estimator: AcceptanceEstimator, *, num_bonus_tokens: int = 1) -> None:
        if estimator.num_slots < 2:
            raise ValueError(
                f"estimator.num_slots must be V2's max_num_reqs + 1 (>= 2); got {estimator.num_slots}"
            )
        self.estimator = estimator
        self.num_bonus_tokens = num_bonus_tokens
        self.combine = False  # the drafter's own confidences are in the buffer already (DFlash / DSpark)
        # device slot ids, so a reset of one slot moves nothing between host and device
        self._slot_ids = torch.arange(estimator.num_slots, dtype=torch.int64, device=estimator.device)

    @property
    def num_request_slots(self) -> int:
        return self.estimator.num_slots - 1

    def reset(self, req_idx: int) -> None:
        """A request took V2's request slot ``req_idx``: its history starts from the population's prior."""
        if not 0 <= req_idx < self.num_request_slots:
            raise ValueError(
                f"req_idx must be a request slot in [0, {self.num_request_slots}); got {req_idx}"
            )
        self.estimator.reset(self._slot_ids[req_idx : req_idx + 1])

    def slots(self, input_batch: Any) -> torch.Tensor:  # noqa: ANN401
        """The estimator slots of the batch's rows: V2's request slots, a masked row (-1) to the spare one."""
        return input_batch.idx_mapping[: input_batch.num_reqs].remainder(self.estimator.num_slots)

    def observe(self, input_batch: Any, num_sampled: torch.Tensor, num_rejected: torch.Tensor) -> None:  # noqa: ANN401
        """The step's verdict per row (V2's device counts, batch order) into the estimate."""
        b = input_batch.num_reqs
        if b == 0:
            self.estimator.observe()
            return
        accepted = num_sampled[:b] - self.num_bonus_tokens
        verified = accepted + num_rejected[:b]
        self.estimator.observe(self.slots(input_batch), verified, accepted)

    def score(self, input_batch: Any, confidence_probs: torch.Tensor) -> None:  # noqa: ANN401
        """The rows' estimate into ``confidence_probs[:B]`` (rescaling what is there when combining)."""
        b = input_batch.num_reqs
        if b == 0:
            return
        rows = confidence_probs[:b]
        self.estimator.estimate(self.slots(input_batch), rows if self.combine else None, out=rows)

    def as_dict(self) -> dict[str, Any]:
        """The population's rate and decayed trials per position (read off the step, for the stats)."""
        return {
            "population_rate": [round(float(x), 4) for x in self.estimator.population_rate().cpu()],
            "population_trials": [round(float(x), 4) for x in self.estimator.population[1].cpu()],
            "steps": self.estimator.steps,
        }
