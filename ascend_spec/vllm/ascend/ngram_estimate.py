"""ngram on vllm-ascend's NPUModelRunner, planned on the per-request acceptance estimate (on the host).

vllm-ascend drafts ngram on the host (``AscendNgramProposer``: lists of 0..K drafts per request) under sync
scheduling, and hands them to the scheduler through ``take_draft_token_ids``; nothing of it runs on the NPU, so
the estimate (:class:`~ascend_spec.vllm.acceptance_estimate.AcceptanceEstimator`) runs on CPU tensors beside it and
no device value is read:

* ``npu_ngram_observe`` (``runner.execute_model`` / ``runner.sample_tokens``, instance): the drafts each request
  verifies come from the scheduler's output, the accepted counts from the step's host output
  (``len(sampled) - 1``); a step without verified drafts only ages the evidence;
* ``npu_ngram_take`` (``runner.take_draft_token_ids``, instance): the estimate's survivals of the new drafts ->
  ``BudgetController.plan_lengths`` (the profiles of ``dynamic.profile``) -> each request's list cut to its length
  (capped at the drafts it has; a plan of 0 hands the scheduler no drafts: a plain decode).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator
from ascend_spec.vllm.dynamic import DynamicVerifier, trim_draft_token_ids
from ascend_spec.vllm.v1.estimate_wiring import EstimateRows


class NgramEstimatePlan:
    """The verifier (controller, back-off, stats) and the estimate over the runner's requests, on the host."""

    def __init__(self, verifier: DynamicVerifier, max_num_reqs: int, num_spec_tokens: int) -> None:
        self.verifier = verifier
        self.rows = EstimateRows(AcceptanceEstimator(max_num_reqs, num_spec_tokens, "cpu"), "auto")
        verifier.estimate = self.rows
        self.verified: dict[str, int] = {}  # this step's verified drafts per request (the scheduler's)

    def begin_step(self, scheduler_output: Any) -> None:  # noqa: ANN401
        self.verified = {r: len(d) for r, d in scheduler_output.scheduled_spec_decode_tokens.items()}

    def observe(self, output: Any) -> None:  # noqa: ANN401
        """A step's host output: request r accepted ``len(sampled[r]) - 1`` of its verified drafts."""
        req_ids = getattr(output, "req_ids", None)
        sampled = getattr(output, "sampled_token_ids", None)
        estimator = self.rows.estimator
        if not self.verified or not isinstance(req_ids, list) or not isinstance(sampled, list):
            estimator.observe()
            return
        keep = [i for i, r in enumerate(req_ids) if self.verified.get(r, 0) > 0 and sampled[i]]
        if not keep:
            estimator.observe()
            return
        slots = self.rows.rows(req_ids)[keep]
        verified = torch.tensor([self.verified[req_ids[i]] for i in keep], dtype=torch.int64)
        accepted = torch.tensor([len(sampled[i]) - 1 for i in keep], dtype=torch.int64)
        estimator.observe(slots, verified, accepted)

    def cut(self, draft: Any) -> Any:  # noqa: ANN401
        """vLLM's ``DraftTokenIds`` with each request's list cut to its planned length."""
        if draft is None:
            return draft
        scores = self.rows.scores(draft.draft_token_ids, list(draft.req_ids), None)
        if scores is None:  # no request has a draft: nothing to plan
            return draft
        return trim_draft_token_ids(draft, self.verifier.lengths(scores, list(draft.req_ids)))


def install_npu_ngram(runner, build: Any) -> None:  # noqa: ANN001, ANN401
    """Hook an enabled NPU runner drafting ngram (sync scheduling); ``build(runner)`` gives the verifier."""
    execute_model = runner.execute_model
    sample_tokens = runner.sample_tokens
    take = runner.take_draft_token_ids
    runner.ascend_spec_dynamic = None
    state: dict[str, NgramEstimatePlan | None] = {"plan": None}

    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        if state["plan"] is None:
            verifier = build(self)
            self.ascend_spec_dynamic = verifier
            k = self.vllm_config.speculative_config.num_speculative_tokens
            state["plan"] = NgramEstimatePlan(verifier, self.max_num_reqs, k)
        state["plan"].begin_step(scheduler_output)
        return execute_model(scheduler_output, *args, **kwargs)

    def _sample_tokens(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        output = sample_tokens(*args, **kwargs)
        if state["plan"] is not None and output is not None:
            state["plan"].observe(output)
        return output

    def _take(self):  # noqa: ANN202
        draft = take()
        return state["plan"].cut(draft) if state["plan"] is not None else draft

    runner.execute_model = types.MethodType(_execute_model, runner)
    runner.sample_tokens = types.MethodType(_sample_tokens, runner)
    runner.take_draft_token_ids = types.MethodType(_take, runner)
