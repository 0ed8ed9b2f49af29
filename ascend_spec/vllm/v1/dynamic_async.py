"""Dynamic verification with vLLM's async scheduling (``"dynamic": {"mode": "async"}``): no host wait in the step.

With ``async_scheduling`` V1's ``AsyncScheduler`` (engine-core process) schedules step s+1 before the worker has
finished step s: every running request gets a placeholder draft list of ``num_spec_tokens`` entries, and the
runner fills those slots on the device from the drafts it proposed at step s. The lengths therefore have to be
known one scheduling ahead, and the only channel from the worker back to the scheduler is the model output.

Per step s:

1. worker, in the step (``dynamic_async_stage``): after the drafter, the confidences and survivals of drafts(s)
   are computed on the device and copied into a host slot on the same stream, non-blocking, with an event
   (:class:`~ascend_spec.vllm.dynamic.SurvivalStager`): the step never waits for it;
2. worker, where V1 hands the step's output over (``AsyncModelRunnerOutput.get_output``, which already waits for
   V1's own copy of the sampled tokens; ``dynamic_async_output``): the calibration's bookkeeping of the drafts
   verified at step s (predicted at step s-1), then the sync mode's host plan of the staged survivals
   (factors, ``BudgetController.plan_lengths``); the lengths ride on the output
   (``ModelRunnerOutput.ascend_spec_draft_lengths``, request id -> drafts);
3. scheduler (``async_scheduler_lengths``): ``update_from_output`` keeps the latest length per request, and
   ``schedule`` cuts each running request's placeholder list to it before scheduling, so V1 schedules and the
   runner scatters ragged draft counts (V1's ``_prepare_input_ids`` already takes a per-request count).

V1's engine core keeps two batches in flight: output s is read after step s+1 was scheduled, so the lengths
computed from drafts(s) decide how many of drafts(s+1) step s+2 verifies: the plan is one drafter step behind
(the previous step's confidences), as in Model Runner V2's dynamic speculation. The no-draft option works as in
sync mode: a plan with T = 0 skips the drafter for ``probe_interval - 1`` steps (doubling while probes agree);
a step whose drafter was skipped hands lengths 0 for its requests, and a plan from a probe ends the stretch.

vLLM's CPU platform turns async scheduling off (``CpuPlatform.check_and_update_config``), so a CPU engine refuses
the mode with that reason; the tests run V1's async path on the CPU engine through
:mod:`ascend_spec.e2e.cpu_async`.
"""

from __future__ import annotations

import functools
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ascend_spec.vllm.config import parse_config
from ascend_spec.vllm.dynamic import DynamicVerifier, StagedSurvivals

#: The attribute of V1's ``ModelRunnerOutput`` that carries the worker's plan to the scheduler.
LENGTHS_ATTRIBUTE = "ascend_spec_draft_lengths"


@dataclass
class AsyncStep:
    """What one step's output hand-over needs: the drafts it verified and their predictions, its own staging."""

    verified: dict[str, list[int]]
    predictions: (
        StagedSurvivals | None
    )  # the survivals of the drafts this step verifies (staged a step earlier)
    staged: StagedSurvivals | None = None  # this step's drafts, planned at the hand-over
    drafted: bool = False  # the drafter ran this step (False: skipped, or no decode rows)


def finish_step(verifier: DynamicVerifier, step: AsyncStep, output) -> Any:  # noqa: ANN001, ANN401
    """The hand-over of one step's ``ModelRunnerOutput``: calibration bookkeeping, then this step's plan attached.

    Bookkeeping before the plan, as in sync mode (where a step's observation lands before the next plan).
    """
    req_ids = getattr(output, "req_ids", None)
    sampled = getattr(output, "sampled_token_ids", None)
    if step.predictions is not None and isinstance(req_ids, list) and isinstance(sampled, list):
        predicted = step.predictions
        verifier.observe_step((predicted.req_ids, predicted.wait()), step.verified, req_ids, sampled)
    if step.staged is not None:
        lengths = verifier.plan_staged(step.staged)
        setattr(output, LENGTHS_ATTRIBUTE, dict(zip(step.staged.req_ids, lengths)))
    elif isinstance(req_ids, list) and req_ids and not step.drafted:
        # The drafter did not run for these requests: nothing of theirs is worth verifying next.
        setattr(output, LENGTHS_ATTRIBUTE, dict.fromkeys(req_ids, 0))
    return output


def hand_over_later(output, finish: Callable[[Any], Any]) -> Any:  # noqa: ANN001, ANN401
    """``finish`` applied to the output where V1 reads it: wrapped around an async output's ``get_output`` (run
    when the engine core takes the result), or at once for a plain ``ModelRunnerOutput``."""
    get_output = getattr(output, "get_output", None)
    if get_output is None:
        return finish(output) if output is not None else output

    @functools.wraps(get_output)
    def _get_output():  # noqa: ANN202
        return finish(get_output())

    output.get_output = _get_output
    return output


def install_async_hooks(runner, build_verifier: Callable[[Any], DynamicVerifier]) -> None:  # noqa: ANN001
    """The worker side (register: ``dynamic_async_stage``, ``dynamic_async_output``, ``dynamic_skip_drafter``,
    ``dynamic_estimate_observe``)."""
    from ascend_spec.vllm.v1.dynamic_hooks import observe_estimate, step_scores

    execute_model = runner.execute_model
    propose = runner.propose_draft_token_ids
    fits = runner._input_fits_in_drafter
    sample = runner._sample
    sample_tokens = runner.sample_tokens
    runner.ascend_spec_dynamic = None
    state: dict[str, Any] = {"step": None, "last_staged": None}

    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        if (
            self.ascend_spec_dynamic is None
        ):  # before the first step's inputs exist, as vLLM's own dummy batches
            self.ascend_spec_dynamic = build_verifier(self)
        verified = scheduler_output.scheduled_spec_decode_tokens
        # The drafts this step verifies were proposed (and staged) by the previous step's drafter.
        state["step"] = AsyncStep(dict(verified), state["last_staged"] if verified else None)
        state["last_staged"] = None
        return execute_model(scheduler_output, *args, **kwargs)

    def _fits(self, *args: Any, **kwargs: Any) -> bool:
        verifier = self.ascend_spec_dynamic
        if verifier is not None and verifier.skip_drafter():
            return False  # V1 zero-fills the drafts; the hand-over tells the scheduler to verify none
        return fits(*args, **kwargs)

    def _propose(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        drafts = propose(*args, **kwargs)
        start = time.perf_counter()  # the overhead counter times the scoring and staging, not the drafter
        verifier = self.ascend_spec_dynamic
        step = state["step"]
        if (
            verifier is not None
            and step is not None
            and (torch.is_tensor(drafts) or isinstance(drafts, list))
        ):
            step.drafted = True
            req_ids = self.input_batch.req_ids
            scores = step_scores(self.drafter, verifier, drafts, req_ids)
            if scores is not None:
                step.staged = verifier.stage(scores, req_ids)
                state["last_staged"] = step.staged
            elif verifier.estimate is not None and isinstance(drafts, list):
                step.drafted = False  # ngram found no draft: the hand-over gives every request 0
            verifier.stats.overhead_s += time.perf_counter() - start
        return drafts

    def _sample(self, logits, spec_decode_metadata):  # noqa: ANN001, ANN202
        output = sample(logits, spec_decode_metadata)
        observe_estimate(self, output, spec_decode_metadata)  # dynamic_estimate_observe
        return output

    def _sample_tokens(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        output = sample_tokens(*args, **kwargs)
        verifier, step = self.ascend_spec_dynamic, state["step"]
        state["step"] = None
        if verifier is None or step is None:
            return output
        return hand_over_later(output, lambda out: finish_step(verifier, step, out))

    runner.execute_model = types.MethodType(_execute_model, runner)
    runner.propose_draft_token_ids = types.MethodType(_propose, runner)
    runner._input_fits_in_drafter = types.MethodType(_fits, runner)
    runner.sample_tokens = types.MethodType(_sample_tokens, runner)
    runner._sample = types.MethodType(_sample, runner)


# -- the scheduler side (engine-core process) ---------------------------------------------------------------
_scheduler_installed = False


def _async_lengths_enabled(scheduler) -> bool:  # noqa: ANN001
    """Whether this scheduler's engine runs dynamic verification in async mode (decided once per scheduler)."""
    enabled = scheduler.__dict__.get("_ascend_spec_async")
    if enabled is None:
        from ascend_spec.vllm.releases import runs_model_runner_v2

        vllm_config = scheduler.vllm_config
        settings = parse_config(getattr(vllm_config, "additional_config", None))
        # an AsyncScheduler runs only under async scheduling, where mode auto means async; Model Runner V2 hands
        # no lengths there (it splits on the device), so its placeholders are left as vLLM schedules them
        enabled = (
            settings is not None
            and settings.dynamic.enabled
            and settings.dynamic.mode != "sync"
            and not runs_model_runner_v2(vllm_config)
        )
        scheduler._ascend_spec_async = enabled
        scheduler._ascend_spec_lengths = {}
        scheduler._ascend_spec_placeholders = {}
        scheduler._ascend_spec_default = 0
    return enabled


def install_async_scheduler() -> None:
    """Wrap ``AsyncScheduler.schedule`` and ``update_from_output`` once per process (``async_scheduler_lengths``);
    schedulers of engines without async dynamic verification run vLLM's code unchanged."""
    global _scheduler_installed
    if _scheduler_installed:
        return
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    schedule = AsyncScheduler.schedule
    update_from_output = AsyncScheduler.update_from_output

    @functools.wraps(schedule)
    def _schedule(self, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        if _async_lengths_enabled(self):
            cut_placeholders(self)
        return schedule(self, *args, **kwargs)

    @functools.wraps(update_from_output)
    def _update_from_output(self, scheduler_output, model_runner_output):  # noqa: ANN001, ANN202
        if _async_lengths_enabled(self):
            lengths = getattr(model_runner_output, LENGTHS_ATTRIBUTE, None)
            if lengths:
                self._ascend_spec_lengths.update(lengths)
                self._ascend_spec_default = round(sum(lengths.values()) / len(lengths))
        outputs = update_from_output(self, scheduler_output, model_runner_output)
        if (
            self.__dict__.get("_ascend_spec_async")
            and len(self._ascend_spec_lengths) > 2 * len(self.requests) + 8
        ):
            known = self.requests
            self._ascend_spec_lengths = {r: n for r, n in self._ascend_spec_lengths.items() if r in known}
        return outputs

    AsyncScheduler.schedule = _schedule
    AsyncScheduler.update_from_output = _update_from_output
    _scheduler_installed = True


def cut_placeholders(scheduler) -> None:  # noqa: ANN001
    """Each running request's placeholder draft list cut to the worker's latest length for it (never grown: the
    scheduler may have given fewer, e.g. near the model's length limit).

    A request no plan has reached yet (the plan lags one step behind the drafts) gets the latest plan's mean
    length, and 0 before the engine's first plan: it verifies nothing until the controller has seen its
    drafter, instead of a full block the costs may not justify (vLLM's counters then count what was planned).
    """
    lengths = scheduler._ascend_spec_lengths
    default = scheduler._ascend_spec_default
    placeholders = scheduler._ascend_spec_placeholders
    for request in scheduler.running:
        n = lengths.get(request.request_id, default)
        if n >= len(request.spec_token_ids):
            continue
        cut = placeholders.get(n)
        if cut is None:
            cut = placeholders[n] = [-1] * n  # read-only, shared like V1's own placeholder list
        request.spec_token_ids = cut
