"""Dynamic verification wired into one V1 runner: the engine check, the profiles at start, the step hooks.

Patch points (register: :mod:`ascend_spec.vllm.patch_register`): ``dynamic_profiles`` (``execute_model``, first call),
``dynamic_propose`` (``propose_draft_token_ids``), ``dynamic_take_drafts`` (``take_draft_token_ids``),
``dynamic_skip_drafter`` (``_input_fits_in_drafter``), ``dynamic_plain_sample`` (``_sample``),
``dynamic_zero_draft_metadata`` (``_calc_spec_decode_metadata``), ``dynamic_estimate_observe`` (``_sample``),
``dynamic_zero_draft_copy``
(``_copy_draft_token_ids_to_cpu``), ``dynamic_plain_step`` (the runner's ``speculative_config`` during a
drafter-less decode step of an attention-only target); all
instance attributes of a runner whose engine sets ``additional_config["ascend_spec"]["dynamic"]``.
"""

from __future__ import annotations

import time
import types
from typing import Any

import torch

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator
from ascend_spec.vllm.config import _where
from ascend_spec.vllm.cost_profiles import engine_controller, time_target_forward
from ascend_spec.vllm.dynamic import DynamicVerifier, startup_line, take_checked_scores, trim_draft_token_ids
from ascend_spec.vllm.graphs import SCORED_METHODS, V1_PLANNED_METHODS, engine_graphs
from ascend_spec.vllm.log import plugin_logger
from ascend_spec.vllm.step_costs import MeasuredStepCosts

logger = plugin_logger()


def check_dynamic_engine(
    vllm_config,  # noqa: ANN001
    mode: str = "sync",
    methods: tuple[str, ...] = V1_PLANNED_METHODS,
) -> None:
    """Refuse engines dynamic verification (``mode`` sync or async) cannot run on, naming the setting to change
    (``methods``: the drafters the runner's hooks plan)."""
    where = _where("dynamic")
    spec = vllm_config.speculative_config
    if spec is None:
        raise ValueError(f"{where} needs speculative decoding (a speculative_config with a drafter)")
    if spec.method not in methods:
        raise ValueError(
            f"{where} plans the drafters {', '.join(methods)} (their own scores or the acceptance "
            f"estimate); got speculative method {spec.method!r}"
        )
    async_scheduling = bool(vllm_config.scheduler_config.async_scheduling)
    if mode == "sync" and async_scheduling:
        raise ValueError(
            f"{where} mode 'sync' chooses the draft lengths on the host before the next step is scheduled; start "
            "the engine with async_scheduling=False (--no-async-scheduling), or use mode 'async'"
        )
    if mode == "async" and not async_scheduling:
        device = getattr(vllm_config, "device_config", None)
        cpu = device is not None and str(device.device_type) == "cpu"
        reason = " (vLLM's CPU platform always turns async scheduling off)" if cpu else ""
        raise ValueError(
            f"{where} mode 'async' hands the draft lengths to vLLM's async scheduler, but this engine schedules "
            f"synchronously{reason}; use mode 'sync', or start the engine with async_scheduling=True"
        )


def install_dynamic(runner) -> None:  # noqa: ANN001
    """Hook the runner (after its __init__): profiles and controller before the first step, then per step."""
    settings = getattr(runner, "ascend_spec", None)
    if settings is not None and settings.dynamic.mode == "async":
        from ascend_spec.vllm.v1.dynamic_async import install_async_hooks

        install_async_hooks(runner, build_verifier)
        return
    execute_model = runner.execute_model
    propose = runner.propose_draft_token_ids
    take = runner.take_draft_token_ids
    fits = runner._input_fits_in_drafter
    sample = runner._sample
    sample_tokens = runner.sample_tokens
    calc_metadata = runner._calc_spec_decode_metadata
    copy_drafts = runner._copy_draft_token_ids_to_cpu
    zero_draft_metadata: dict[
        int, Any
    ] = {}  # B -> V1's metadata of a decode step where no request has drafts
    runner.ascend_spec_dynamic = None
    runner._ascend_spec_lengths = None
    spec_config = runner.speculative_config
    # A decode step with no drafts whose drafter is skipped runs as V1 runs an engine without a drafter:
    # attention-only targets only (hybrid GDN layers read V1's per-step spec-decode rows, which that path
    # leaves unwritten).
    plain_steps = not runner.model_config.is_hybrid
    # This step's timing for the measured step costs: [start, B, drafts verified, decode only, proposer s, timed]
    step = [0.0, 0, 0, False, 0.0, False]

    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        self.speculative_config = spec_config  # also after a step that never reached sample_tokens
        if (
            self.ascend_spec_dynamic is None
        ):  # before the first step's inputs exist, as vLLM's own dummy batches
            self.ascend_spec_dynamic = build_verifier(self)
        verifier = self.ascend_spec_dynamic
        verified = scheduler_output.scheduled_spec_decode_tokens
        verifier.begin_step(verified)
        b = len(scheduler_output.num_scheduled_tokens)
        t = sum(map(len, verified.values()))
        decode = scheduler_output.total_num_scheduled_tokens == b + t
        if plain_steps and decode and b and not t and verifier.skip_drafter():
            # dynamic_plain_step: no request verifies a draft and the drafter is skipped after this forward,
            # so the step is a plain decode; V1 runs it as an engine without a drafter (no spec-decode
            # metadata, placeholder clamp, rejection sampler, zero draft tensor or drafts copy), restored in
            # sample_tokens
            self.speculative_config = None
            verifier.stats.plain_engine_steps += 1
        costs = verifier.step_costs
        timed = decode and b > 0 and costs is not None and costs.sample_step(b)
        step[:] = (time.perf_counter(), b, t, decode, 0.0, timed)
        try:
            return execute_model(scheduler_output, *args, **kwargs)
        except BaseException:
            self.speculative_config = spec_config
            raise

    def _sample_tokens(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        try:
            output = sample_tokens(*args, **kwargs)
        finally:
            self.speculative_config = spec_config
        verifier = self.ascend_spec_dynamic
        sampled = getattr(output, "sampled_token_ids", None)
        if verifier is not None and isinstance(sampled, list):  # V1's host lists (sync scheduling)
            verifier.end_step(output.req_ids, sampled)
            if step[5]:  # a timed decode step: the target part, proposer excluded
                seconds = time.perf_counter() - step[0] - step[4]
                verifier.step_costs.add("verify" if step[2] else "plain", step[1], step[2], seconds)
        return output

    def _propose(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        self._ascend_spec_lengths = None
        start = time.perf_counter()
        drafts = propose(*args, **kwargs)
        verifier = self.ascend_spec_dynamic
        if verifier is not None:
            req_ids = self.input_batch.req_ids
            scores = step_scores(self.drafter, verifier, drafts, req_ids)
            if scores is not None:
                self._ascend_spec_lengths = verifier.lengths(scores, req_ids)
            elif verifier.estimate is not None and isinstance(drafts, list):
                self._ascend_spec_lengths = [0] * len(drafts)  # ngram found no draft: nothing to plan
        step[4] = time.perf_counter() - start  # the proposer and the plan: not the target's part
        if step[5] and verifier is not None and (torch.is_tensor(drafts) or isinstance(drafts, list)):
            verifier.step_costs.add("draft", len(drafts), 0, step[4])
        return drafts

    def _fits(self, *args: Any, **kwargs: Any) -> bool:
        verifier = self.ascend_spec_dynamic
        if verifier is not None and verifier.skip_drafter():
            self._ascend_spec_lengths = [0] * self.input_batch.num_reqs  # V1 then zero-fills the drafts
            return False
        return fits(*args, **kwargs)

    def _sample(self, logits, spec_decode_metadata):  # noqa: ANN001, ANN202
        # A step where no request verifies a draft (plain-decode plans, drafter-less steps, prefills) samples
        # like an engine without a drafter: V1's own plain path, one token per request from the same logits
        # rows the rejection sampler would read (each request's last row), instead of the rejection sampler.
        metadata = spec_decode_metadata
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None
        output = sample(logits, spec_decode_metadata)
        observe_estimate(self, output, metadata)  # dynamic_estimate_observe
        return output

    def _calc_metadata(self, num_draft_tokens, cu_num_scheduled_tokens):  # noqa: ANN001, ANN202
        # Plain-decode steps of B one-token requests all have the same metadata (no draft is selected, so the
        # token ids never enter it): V1's own result for that B, built once.
        b = len(num_draft_tokens)
        if b and step[3] and not step[2] and b == step[1]:  # this step: B one-token requests, no drafts
            plain = int(cu_num_scheduled_tokens[-1]) == b
        else:
            plain = b and int(cu_num_scheduled_tokens[-1]) == b and not num_draft_tokens.any()
        if plain:
            metadata = zero_draft_metadata.get(b)
            if metadata is None:
                metadata = zero_draft_metadata[b] = calc_metadata(num_draft_tokens, cu_num_scheduled_tokens)
            return metadata
        return calc_metadata(num_draft_tokens, cu_num_scheduled_tokens)

    def _take(self):  # noqa: ANN202
        lengths, self._ascend_spec_lengths = self._ascend_spec_lengths, None
        if lengths is not None and not any(lengths):
            # No request verifies a draft: hand the scheduler nothing. It cleared every scheduled request's
            # drafts when it scheduled this step, so its per-request update with empty lists changes nothing.
            return None
        return trim_draft_token_ids(take(), lengths)

    def _copy_drafts(self, scheduler_output, zeros_only: bool = False):  # noqa: ANN001, ANN202
        lengths = self._ascend_spec_lengths
        if lengths is not None and not any(lengths):
            # A plan without drafts (or a skipped drafter): _take hands nothing on, so nothing reads the host
            # copy of the drafts; keep V1's bookkeeping, skip the copy (or the zero-fill) of the buffer.
            if torch.is_tensor(self._draft_token_ids):
                self.prev_num_spec_tokens = self._draft_token_ids.shape[1]
            self._draft_token_req_ids = self.input_batch.req_ids.copy()
            return None
        return copy_drafts(scheduler_output, zeros_only)

    runner.execute_model = types.MethodType(_execute_model, runner)
    runner.propose_draft_token_ids = types.MethodType(_propose, runner)
    runner.take_draft_token_ids = types.MethodType(_take, runner)
    runner._input_fits_in_drafter = types.MethodType(_fits, runner)
    runner._sample = types.MethodType(_sample, runner)
    runner.sample_tokens = types.MethodType(_sample_tokens, runner)
    runner._calc_spec_decode_metadata = types.MethodType(_calc_metadata, runner)
    runner._copy_draft_token_ids_to_cpu = types.MethodType(_copy_drafts, runner)


def build_verifier(runner) -> DynamicVerifier:  # noqa: ANN001
    settings = runner.ascend_spec
    vllm_config = runner.vllm_config
    device = torch.device(runner.device)
    graphs = engine_graphs(vllm_config, device)
    drafter = runner.drafter
    method = vllm_config.speculative_config.method
    scored = hasattr(drafter, "take_draft_scores")
    if method in SCORED_METHODS and not scored:
        raise ValueError(
            f"{_where('dynamic')}: the drafter {type(drafter).__name__} exposes no draft scores "
            "(take_draft_scores); dynamic verification of DFlash / DSpark needs ascend-spec's proposers"
        )
    # Drafters without scores are planned on the acceptance estimate; DFlash / DSpark with "combine" too.
    estimate = not scored or settings.dynamic.estimate == "combine"
    q = graphs.draft_tokens_per_request
    k = graphs.num_spec_tokens
    profiles, controller = engine_controller(
        runner,
        settings.dynamic,
        graphs,
        lambda n: time_target_forward(runner, n, runner.drafter, "dummy_run"),
        lambda n: _run_draft(runner, n, n // q * k),
        backend=settings.backend,
    )
    verifier = DynamicVerifier(
        controller,
        graphs,
        backend=settings.backend,
        probe_interval=settings.dynamic.probe_interval,
        calibrate=settings.dynamic.calibrate and not estimate,  # the estimate is its per-request form
    )
    verifier.profiles = profiles
    if estimate:
        from ascend_spec.vllm.v1.estimate_wiring import EstimateRows

        slots = vllm_config.scheduler_config.max_num_seqs
        verifier.estimate = EstimateRows(AcceptanceEstimator(slots, k, device), settings.backend)
    sync = settings.dynamic.mode == "sync"
    # DFlash: greedy drafts from the pass that scores them (DSpark scores its confidence head instead)
    if sync and not estimate and getattr(drafter, "draft_score_kind", None) == "logits":
        drafter.greedy_draft_sampler = verifier.greedy_draft_tokens
    # Async mode plans on the profiles alone: the host's wall clock around a step does not time the device's.
    if sync and settings.dynamic.measure_steps:
        verifier.step_costs = MeasuredStepCosts(
            controller, statistic=settings.dynamic.statistic, every=settings.dynamic.measure_every
        )
    controller_kind = (
        "BudgetController (host plan per step from one copy of the survivals; lengths cut in "
        "take_draft_token_ids)"
        if sync
        else "BudgetController (survivals staged without a wait; lengths on the step's output to the async "
        "scheduler)"
    )
    if estimate:
        scored_by = "the acceptance estimate" + (" x its own scores" if method in SCORED_METHODS else "")
    else:
        scored_by = "head_confidence" if method == "dspark" else "max_softmax_confidence"
    logger.info(
        startup_line(
            runner="Model Runner V1",
            controller=controller_kind,
            mode=settings.dynamic.mode,
            method=method,
            scored_by=scored_by,
            num_spec_tokens=k,
            draft_tokens=q,
            profile_source=profiles.source,
            startup_s=profiles.startup_s,
        )
    )
    return verifier


@torch.inference_mode()
def _run_draft(runner, num_tokens: int, num_logit_rows: int) -> None:  # noqa: ANN001
    """The drafter over ``num_tokens`` query tokens (as many context tokens) plus its draft logits; ngram runs no
    forward (its host lookup is timed by the measured step costs)."""
    drafter = runner.drafter
    if not hasattr(drafter, "dummy_run"):
        return
    drafter.dummy_run(num_tokens, use_cudagraphs=False)
    hidden = torch.zeros(num_logit_rows, drafter.hidden_size, dtype=runner.dtype, device=runner.device)
    drafter.model.compute_logits(hidden)


def dynamic_stats(worker) -> dict | None:  # noqa: ANN001 - collective_rpc target, runs in the worker
    verifier = getattr(worker.model_runner, "ascend_spec_dynamic", None)
    if verifier is None:
        return None
    manager = getattr(verifier, "v2_manager", None)
    if manager is not None:  # Model Runner V2: fold the split's counts that landed since the last step
        manager.flush_stats()
    out = verifier.stats.as_dict()
    out["last_lengths"] = list(verifier.stats.last_lengths)  # the newest plan (ranks compare it)
    out["profile_source"] = verifier.profiles.source
    out["profile_startup_s"] = verifier.profiles.startup_s
    out["target_costs"] = verifier.profiles.target.costs
    out["draft_costs"] = verifier.profiles.draft.costs
    out["step_costs"] = None if verifier.step_costs is None else verifier.step_costs.as_dict()
    out["estimate"] = None if verifier.estimate is None else verifier.estimate.as_dict()
    return out


def step_scores(drafter, verifier: DynamicVerifier, drafts, req_ids: list[str]):  # noqa: ANN001, ANN201
    """This step's scores for the plan: the drafter's own (DFlash, DSpark), the acceptance estimate (alone, or
    combined with the drafter's), or None (nothing proposed; ngram: no request has a draft)."""
    take_scores = getattr(drafter, "take_draft_scores", None)
    own = None
    if take_scores is not None and torch.is_tensor(drafts):
        own = take_checked_scores(take_scores, drafts)
        if own is None:
            return None
    if verifier.estimate is None:
        return own
    if not (torch.is_tensor(drafts) or isinstance(drafts, list)):
        return None
    start = time.perf_counter()
    scores = verifier.estimate.scores(drafts, req_ids, own)
    verifier.stats.overhead_s += time.perf_counter() - start
    return scores


def observe_estimate(runner, sampler_output, metadata) -> None:  # noqa: ANN001
    """dynamic_estimate_observe: the step's accepted counts into the acceptance estimate, on the device."""
    verifier = runner.ascend_spec_dynamic
    if verifier is not None and verifier.estimate is not None:
        start = time.perf_counter()
        verifier.estimate.observe(runner.input_batch.req_ids, sampler_output, metadata)
        verifier.stats.overhead_s += time.perf_counter() - start
