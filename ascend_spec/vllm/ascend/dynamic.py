"""Dynamic verification on vllm-ascend's NPUModelRunner: the ``dynamic`` switch, its profiles, its hand-over.

The same ``additional_config["ascend_spec"]["dynamic"]`` as on Model Runner V1 and V2 (the deprecated
``vllm_ascend.dynamic_verify`` maps onto it, :mod:`ascend_spec.vllm.config`). The adapter's proposers score their
drafts into :class:`~ascend_spec.vllm.ascend.verify_scheduler.AscendSpecDynamicSpec`; this module gives it its
planner and brings the lengths to vLLM's scheduler:

* ``npu_dynamic_profiles`` (``runner.execute_model``, instance): before the first real step (the KV cache exists,
  as on V1) the cost profiles come from ``dynamic.profile`` (``measure``: the NPU runner's own dummy target
  forward and the drafter's dummy run at every bucket, cached; or a profile file) and become the planner's
  ``BudgetController``; controller mode ``sync`` (the step's total searched on the host survivals) under sync
  scheduling, ``async`` (the total from recent steps, split on the device) under async scheduling;
* sync scheduling: vllm-ascend's own ``take_draft_token_ids`` cuts each request's drafts to the planned length;
* ``npu_dynamic_async_output`` (``runner.sample_tokens``, instance, async scheduling only): vLLM's engine core never
  calls ``take_draft_token_ids`` there, so the step's lengths ride on its output
  (``ModelRunnerOutput.ascend_spec_draft_lengths``, read where the output is handed over, after the copy landed)
  and the scheduler's ``async_scheduler_lengths`` cuts each request's placeholder drafts to them, as on V1.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ascend_spec.vllm.ascend.verify_scheduler import METHODS, AscendSpecDynamicSpec, ControllerVerifyPlanner
from ascend_spec.vllm.config import AscendSpecConfig, _where
from ascend_spec.vllm.cost_profiles import engine_controller, time_target_forward
from ascend_spec.vllm.dynamic import DynamicVerifier, startup_line
from ascend_spec.vllm.graphs import engine_graphs
from ascend_spec.vllm.log import plugin_logger

logger = plugin_logger()
#: The profile key's runner: the NPU runner's dummy steps are its own.
NPU_RUNNER = "vllm-ascend NPUModelRunner"


#: What the adapter plans: DFlash and DSpark on their scores (the proposers' verify scheduler), ngram on the
#: acceptance estimate (host drafts, sync scheduling: :mod:`ascend_spec.vllm.ascend.ngram_estimate`).
NPU_PLANNED_METHODS = (*METHODS, "ngram")


def check_npu_dynamic_engine(vllm_config, settings: AscendSpecConfig) -> None:  # noqa: ANN001
    """Refuse, naming the setting, what the adapter's dynamic verification does not plan."""
    from ascend_spec.vllm.v1.dynamic_hooks import check_dynamic_engine

    check_dynamic_engine(vllm_config, settings.dynamic.mode, NPU_PLANNED_METHODS)
    if vllm_config.speculative_config.method == "ngram" and vllm_config.scheduler_config.async_scheduling:
        raise ValueError(
            f"{_where('dynamic')} plans ngram's host drafts when the scheduler asks for them, which vLLM does only "
            "under sync scheduling; start the engine with async_scheduling=False (--no-async-scheduling)"
        )
    from ascend_spec.vllm.ascend.runner import is_dflash2

    if is_dflash2(vllm_config.speculative_config):
        raise ValueError(
            f"{_where('dynamic')} on vllm-ascend plans DFlash and DSpark drafts; a DFlash2 draft runs vllm-ascend's "
            "own proposer, which the plugin does not score: remove the 'dynamic' key"
        )


def controller_mode(settings: AscendSpecConfig) -> str:
    """The BudgetController's mode: the deprecated ``vllm_ascend.controller_mode`` where the deprecated switch is
    used, else the engine's resolved ``dynamic.mode`` (sync or async scheduling)."""
    if settings.vllm_ascend.dynamic_verify:
        return settings.vllm_ascend.controller_mode
    return "async" if settings.dynamic.mode == "async" else "sync"


def install_npu_dynamic(runner) -> None:  # noqa: ANN001
    """Hook an enabled NPU runner (from ``runner_init``, inside ``NPUModelRunner.__init__``'s ``super()`` call:
    its drafter is built after, so the drafter's scheduler is looked up per call)."""
    if runner.vllm_config.speculative_config.method == "ngram":
        from ascend_spec.vllm.ascend.ngram_estimate import install_npu_ngram

        install_npu_ngram(runner, build_ngram_verifier)
        return
    execute_model = runner.execute_model
    sample_tokens = runner.sample_tokens

    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        spec = _scheduler(self)
        if spec is not None and spec.planner is None:
            spec.planner = build_planner(self)
        return execute_model(scheduler_output, *args, **kwargs)

    runner.execute_model = types.MethodType(_execute_model, runner)
    if not runner.vllm_config.scheduler_config.async_scheduling:
        return
    from ascend_spec.vllm.v1.dynamic_async import LENGTHS_ATTRIBUTE, hand_over_later

    def _sample_tokens(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        spec = _scheduler(self)
        before = spec.published if spec is not None else None
        output = sample_tokens(*args, **kwargs)
        published = spec.published if spec is not None else None
        if published is None or published is before or not published.req_ids:
            return output  # no draft pass planned in this step

        def attach(out):  # noqa: ANN001, ANN202
            setattr(out, LENGTHS_ATTRIBUTE, published.by_request())
            return out

        return hand_over_later(output, attach)

    runner.sample_tokens = types.MethodType(_sample_tokens, runner)


def _scheduler(runner) -> AscendSpecDynamicSpec | None:  # noqa: ANN001
    """The adapter's verify scheduler of the runner's drafter (None: a pipeline stage without the drafter)."""
    spec = getattr(getattr(runner, "drafter", None), "dynamic_spec", None)
    return spec if isinstance(spec, AscendSpecDynamicSpec) else None


def build_planner(runner) -> ControllerVerifyPlanner:  # noqa: ANN001
    """Profiles (measured with the NPU runner's dummy runs, or read) -> BudgetController -> the planner."""
    settings = runner.ascend_spec
    vllm_config = runner.vllm_config
    device = torch.device(runner.device)
    graphs = engine_graphs(vllm_config, device)
    drafter = runner.drafter
    q, k = drafter.draft_tokens_per_request(), graphs.num_spec_tokens
    mode = controller_mode(settings)
    backend = drafter.dynamic_spec.backend
    profiles, controller = engine_controller(
        runner,
        settings.dynamic,
        graphs,
        lambda n: time_target_forward(runner, n, drafter, "dummy_run"),
        lambda n: _run_draft(runner, n, q, k),
        mode=mode,
        backend=backend,
        draft_tokens=q,
        model_runner=NPU_RUNNER,
    )
    scheduling = "async" if vllm_config.scheduler_config.async_scheduling else "sync"
    hand_over = (
        "on the step's output to the async scheduler" if scheduling == "async" else "take_draft_token_ids"
    )
    logger.info(
        startup_line(
            runner="vllm-ascend's NPUModelRunner",
            controller=f"BudgetController in AscendSpecDynamicSpec (replaces DynamicSpecScheduler; lengths via "
            f"{hand_over}; backend {backend})",
            mode=f"{mode} ({scheduling} scheduling)",
            method=drafter.method,
            scored_by="max_softmax_confidence" if drafter.method == "dflash" else "head_confidence",
            num_spec_tokens=k,
            draft_tokens=q,
            profile_source=profiles.source,
            startup_s=profiles.startup_s,
        )
    )
    return ControllerVerifyPlanner(controller, backend=backend)


def build_ngram_verifier(runner) -> DynamicVerifier:  # noqa: ANN001
    """ngram's controller: the target measured with the NPU runner's dummy forward (ngram runs no forward: its
    draft profile is ~0), or ``dynamic.profile``'s file; planned on the host estimate."""
    settings = runner.ascend_spec
    vllm_config = runner.vllm_config
    device = torch.device(runner.device)
    graphs = engine_graphs(vllm_config, device)
    k, q = graphs.num_spec_tokens, graphs.draft_tokens_per_request
    profiles, controller = engine_controller(
        runner,
        settings.dynamic,
        graphs,
        lambda n: time_target_forward(runner, n, runner.drafter, "dummy_run"),
        lambda n: None,  # ngram runs no forward
        model_runner=NPU_RUNNER,
    )
    verifier = DynamicVerifier(controller, graphs, probe_interval=settings.dynamic.probe_interval)
    verifier.profiles = profiles
    logger.info(
        startup_line(
            runner="vllm-ascend's NPUModelRunner",
            controller="BudgetController on the host (ngram's host drafts; lengths cut in take_draft_token_ids)",
            mode="sync (sync scheduling)",
            method="ngram",
            scored_by="the acceptance estimate (host)",
            num_spec_tokens=k,
            draft_tokens=q,
            profile_source=profiles.source,
            startup_s=profiles.startup_s,
        )
    )
    return verifier


@torch.inference_mode()
def _run_draft(runner, num_tokens: int, q: int, k: int) -> None:  # noqa: ANN001
    """The drafter's dummy run over ``num_tokens`` = B x Q query tokens, plus its K logits rows per request."""
    drafter = runner.drafter
    num_reqs = max(1, num_tokens // q)
    drafter.dummy_run(num_tokens, num_reqs=num_reqs)
    hidden_size = getattr(drafter, "hidden_size", None) or runner.model_config.get_hidden_size()
    hidden = torch.zeros(num_reqs * k, hidden_size, dtype=runner.dtype, device=runner.device)
    drafter.model.compute_logits(hidden)
