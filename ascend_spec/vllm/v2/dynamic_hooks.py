"""Dynamic verification wired into one Model Runner V2 runner: the engine check, the drafter's confidences, the
no-draft option, the profiles at the first step and the manager (:mod:`ascend_spec.vllm.v2.budget_manager`).

Patch points (register: :mod:`ascend_spec.vllm.patch_register`): ``v2_dynamic_manager`` (the runner's
``adaptive_verification`` attribute, set at the first real ``execute_model`` after the profiles are measured),
``v2_dynamic_confidence`` (DFlash: the speculator's ``_maybe_predict_acceptance``; DSpark: its model's
``compute_confidence`` and ``use_confidence_head``), ``v2_dynamic_skip_drafter`` (the speculator's ``propose``),
``v2_dynamic_estimate`` (the same ``propose`` wrapper: the acceptance estimate's update and score, and a
``draft_token_confidence_probs`` buffer for ngram's speculator, which has none), ``v2_dynamic_take_drafts``
(sync scheduling only: the runner's ``take_draft_token_ids``, whose lists are cut to the plan so that vLLM's
scheduler, KV allocation and counters see the planned drafts, as on Model Runner V1's sync mode).

Why the manager is replaced rather than fed: V2's manager (``spec_decode/adaptive_verification.py``) needs full
CUDA graphs (``resolve_adaptive_cudagraph_mode`` asserts them), builds its cost tables only inside
``capture_model`` from graph replays, is created only for a speculator with ``enable_adaptive_verification``
(DSpark's confidence head or an online estimator), refuses GDN targets (their metadata builders opt out of
host/device query-length mismatches) and has no plain-decoding option; its split is a ``torch.compile``d top-k.
What it does right (the total on the host from staged survivals, the split on the device) is kept: the
replacement answers the runner's same five calls, so V2's batch preparation, rejection sampler and bookkeeping
run unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator
from typing import Any

import torch

from ascend_spec.vllm.acceptance_estimate import AcceptanceEstimator
from ascend_spec.vllm.config import AscendSpecConfig, _where
from ascend_spec.vllm.cost_profiles import engine_controller, time_target_forward
from ascend_spec.vllm.dynamic import DynamicVerifier, startup_line
from ascend_spec.vllm.gdn_setup import gdn_layers
from ascend_spec.vllm.graphs import SCORED_METHODS, V2_PLANNED_METHODS, engine_graphs
from ascend_spec.vllm.log import plugin_logger
from ascend_spec.vllm.v1.dynamic_hooks import check_dynamic_engine
from ascend_spec.vllm.v2.budget_manager import DeviceBudgetManager
from ascend_spec.vllm.v2.estimate_wiring import V2EstimateRows

logger = plugin_logger()


def check_v2_dynamic_engine(vllm_config, settings: AscendSpecConfig) -> None:  # noqa: ANN001
    """V1's checks (a drafter it plans: DFlash / DSpark on their own scores, the others on the acceptance
    estimate; the mode against the engine's scheduling), and V2's own manager off."""
    async_scheduling = bool(vllm_config.scheduler_config.async_scheduling)
    check_dynamic_engine(vllm_config, settings.dynamic.for_engine(async_scheduling).mode, V2_PLANNED_METHODS)
    spec = vllm_config.speculative_config
    if getattr(spec, "enable_adaptive_verification", False):
        raise ValueError(
            f"{_where('dynamic')} replaces Model Runner V2's adaptive verification; remove "
            "'enable_adaptive_verification' from the speculative config (or the 'dynamic' key)"
        )
    if spec.method == "dflash" and getattr(spec, "use_local_argmax_reduction", False):  # its own scores only
        raise ValueError(
            f"{_where('dynamic')} scores DFlash drafts by the max-softmax of their logits, which "
            "use_local_argmax_reduction never materialises; turn it off in the speculative config"
        )


def install_v2_dynamic(runner) -> None:  # noqa: ANN001
    """Hook an enabled V2 runner (after its __init__): the drafter's scores, the skip, the manager at step one."""
    runner.ascend_spec_dynamic = None
    speculator = runner.speculator
    if speculator is None:  # a pipeline stage without the drafter
        return
    _wrap_propose(runner, speculator)
    if not runner.vllm_config.scheduler_config.async_scheduling:
        _wrap_take(runner)
    load_model = runner.load_model
    execute_model = runner.execute_model

    def _load_model(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        result = load_model(*args, **kwargs)
        if self.vllm_config.speculative_config.method in SCORED_METHODS:
            _score_drafts(self.speculator, self.ascend_spec.backend, self.vllm_config)
        return result

    def _execute_model(self, scheduler_output, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        # before the first real step's inputs exist (dummy runs pass through), as V1's dynamic_profiles
        if self.ascend_spec_dynamic is None and not kwargs.get("dummy_run", False):
            build_manager(self)
        return execute_model(scheduler_output, *args, **kwargs)

    runner.load_model = types.MethodType(_load_model, runner)
    runner.execute_model = types.MethodType(_execute_model, runner)


def score_kind(speculator) -> str:  # noqa: ANN001
    from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

    return "head" if isinstance(speculator, DSparkSpeculator) else "logits"


def _score_drafts(speculator, backend: str, vllm_config) -> None:  # noqa: ANN001
    """The drafter writes this run's confidences into its ``draft_token_confidence_probs`` ([B, K], batch
    order), which V2's runner hands to the manager's ``record_confidences``."""
    from ascend_spec.ops import head_confidence, max_softmax_confidence

    if score_kind(speculator) == "head":
        model = speculator.model
        head = model.model.confidence_head
        if head is None:
            raise ValueError(
                f"{_where('dynamic')} scores DSpark drafts with the checkpoint's confidence head; "
                f"{vllm_config.speculative_config.model} has none (enable_confidence_head in its config)"
            )
        model.compute_confidence = lambda hidden, markov: head_confidence(head(hidden, markov))
        speculator.use_confidence_head = True  # V2's Markov sampler then calls compute_confidence
        return
    k = speculator.num_speculative_steps

    def predict(self, logits: torch.Tensor, idx_mapping: torch.Tensor, draft_step: torch.Tensor) -> None:  # noqa: ANN001
        # DFlash's one sample_draft call per run: logits [B*K, V], request-major
        b = logits.shape[0] // k
        max_softmax_confidence(logits, backend=backend, out=self.draft_token_confidence_probs[:b].view(-1))

    speculator._maybe_predict_acceptance = types.MethodType(predict, speculator)


def _wrap_propose(runner, speculator) -> None:  # noqa: ANN001
    """v2_dynamic_skip_drafter: after a plain plan the drafter's real runs are skipped for the back-off stretch;
    the runner gets zero drafts, which the next plan never verifies (dummy runs always draft).
    v2_dynamic_estimate: where the plan scores by the acceptance estimate, the step's verdict goes into it
    before the drafter (also when the drafter is skipped: the evidence ages) and the rows' estimate into the
    confidences V2 hands ``record_confidences`` after it."""
    propose = speculator.propose
    zeros = torch.zeros(
        runner.max_num_reqs, speculator.num_speculative_steps, dtype=torch.int64, device=runner.device
    )

    def _propose(self, input_batch, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        manager = runner.adaptive_verification
        if kwargs.get("dummy_run", False) or not isinstance(manager, DeviceBudgetManager):
            return propose(input_batch, *args, **kwargs)
        estimate = manager.estimate
        if estimate is not None:
            estimate.observe(input_batch, *_verdict(args, kwargs))
        manager.drafter_ran = not manager.verifier.skip_drafter()
        if not manager.drafter_ran:
            return zeros[: input_batch.num_reqs]
        drafts = propose(input_batch, *args, **kwargs)
        if estimate is not None:
            estimate.score(input_batch, self.draft_token_confidence_probs)
        return drafts

    speculator.propose = types.MethodType(_propose, speculator)


def _wrap_take(runner) -> None:  # noqa: ANN001
    """v2_dynamic_take_drafts: under sync scheduling vLLM's engine core takes the drafts after every executed
    step (``EngineCore.post_step``) and its scheduler schedules ``len(list)`` per request; V2 hands it K
    placeholders per request (``DraftTokensHandler.get_draft_tokens``). The manager cuts them to the plan of
    the run just drafted (``DeviceBudgetManager.take_planned``). Async scheduling never calls this path for
    scheduling, so it is not wrapped there."""
    take = runner.take_draft_token_ids

    def _take(self):  # noqa: ANN001, ANN202
        draft = take()
        manager = self.adaptive_verification
        if not isinstance(manager, DeviceBudgetManager):  # before the first real step builds it
            return draft
        return manager.take_planned(draft)

    runner.take_draft_token_ids = types.MethodType(_take, runner)


def _verdict(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``num_sampled`` and ``num_rejected`` of a ``propose`` call: V2's runner passes them positionally, after
    ``input_batch`` and four others (``BaseSpeculator.propose``, vLLM 0.32.0 to 0.34.0); its dummy runs by name."""
    if "num_sampled" in kwargs:
        return kwargs["num_sampled"], kwargs["num_rejected"]
    return args[4], args[5]


def build_manager(runner) -> DeviceBudgetManager:  # noqa: ANN001
    """Profiles (measured with V2's dummy runs, or read), the controller, the manager in V2's attribute."""
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import get_max_chunk_logits

    settings = runner.ascend_spec
    vllm_config = runner.vllm_config
    if (
        getattr(runner, "batch_sharder", None) is not None
    ):  # vLLM >= 0.33.0: a sharded sampler reads the admitted counts on the host
        raise ValueError(
            f"{_where('dynamic')} on Model Runner V2 splits the drafts on the device only; this engine shards "
            "its sampling batch (batch_sharder), which reads the admitted counts on the host: remove the 'dynamic' key"
        )
    device = torch.device(runner.device)
    graphs = engine_graphs(vllm_config, device)
    q, k = graphs.draft_tokens_per_request, graphs.num_spec_tokens
    profiles, controller = engine_controller(
        runner,
        settings.dynamic,
        graphs,
        lambda n: time_target_forward(runner, n, runner.speculator, "propose"),
        _DraftRuns(runner, q),
        backend=settings.backend,
        model_runner="v2",
        interleave_draft=False,
        measuring=lambda: dummy_runs_on_free_slots(runner),
    )
    verifier = DynamicVerifier(
        controller, graphs, backend=settings.backend, probe_interval=settings.dynamic.probe_interval
    )
    verifier.profiles = profiles
    estimate, label = _estimate_rows(runner, settings, k)
    verifier.estimate = estimate  # its population rate goes into the stats, as on V1
    manager = DeviceBudgetManager(
        verifier,
        max_num_reqs=runner.max_num_reqs,
        num_speculative_steps=k,
        query_start_loc=runner.input_buffers.query_start_loc,
        num_bonus_tokens=runner.model_state.num_new_sampled_tokens_per_step,
        max_total_logits=get_max_chunk_logits(runner.vocab_size),
        score_kind=label,
        backend=settings.backend,
        admitted_counts_item=runner.ascend_spec_release.v2_shims.reallocate_returns_admitted_counts,
        estimate=estimate,
        scheduled_plan=not vllm_config.scheduler_config.async_scheduling,
    )
    runner.adaptive_verification = manager
    runner.ascend_spec_dynamic = verifier
    verifier.v2_manager = manager
    method = vllm_config.speculative_config.method
    scored_by = {"logits": "max_softmax_confidence", "head": "head_confidence"}.get(label, label)
    logger.info(
        startup_line(
            runner="Model Runner V2",
            controller="BudgetController in DeviceBudgetManager (replaces V2's adaptive verification; "
            + (
                "planned after the drafter, lengths cut in take_draft_token_ids)"
                if manager.scheduled_plan
                else "total on the host from staged survivals, split on the device)"
            ),
            mode="sync (sync scheduling)" if manager.scheduled_plan else "async (async scheduling)",
            method=method,
            scored_by=scored_by.replace("estimate", "the acceptance estimate"),
            num_spec_tokens=k,
            draft_tokens=q,
            profile_source=profiles.source,
            startup_s=profiles.startup_s,
        )
    )
    return manager


@contextlib.contextmanager
def dummy_runs_on_free_slots(runner) -> Iterator[None]:  # noqa: ANN001
    """While the profiles are measured, V2's dummy runs give each dummy request its own GDN state slot.

    V2 zeroes a dummy batch's block tables (``BlockTables.get_dummy_block_tables``): every dummy request's state
    slot is 0, and its hybrid state makes each dummy row of at most ``1+K`` tokens a speculative row
    (``MambaHybridModelState.prepare_attn``), so the plugin's GDN layers would verify several rows on one slot
    (racing writes; the value checks refuse it). V2's ``valid_dummy_state_slots`` puts dummy request ``i`` on
    slot ``i+1`` instead. The profiles are measured before the first step's requests exist, so no request holds
    those slots; afterwards every layer drops the dummy rows' records, and a request's prefill starts its slot
    afresh."""
    layers = gdn_layers(runner)
    if not layers:
        yield
        return
    held = len(runner.req_states.req_id_to_index)
    if held:
        raise RuntimeError(
            f"{_where('dynamic')} measures its cost profiles on Model Runner V2 before the first step's requests "
            f"exist (dummy rows take state slots 1..B); the runner holds {held} requests"
        )
    own = runner.__dict__.get("_dummy_run")
    runner._dummy_run = functools.partial(runner._dummy_run, valid_dummy_state_slots=True)
    try:
        yield
    finally:
        if own is None:
            del runner._dummy_run
        else:
            runner._dummy_run = own
        for layer in layers:
            layer.clear_records()


def _estimate_rows(runner, settings: AscendSpecConfig, k: int) -> tuple[V2EstimateRows | None, str]:  # noqa: ANN001
    """The acceptance estimate over V2's request slots where the plan scores by it (drafters without scores;
    DFlash / DSpark under ``"estimate": "combine"``), and the scores' label for the stats."""
    speculator = runner.speculator
    if runner.vllm_config.speculative_config.method in SCORED_METHODS:
        own = score_kind(speculator)
        if settings.dynamic.estimate != "combine":
            return None, own
        label = f"{own}+estimate"
    else:
        label = "estimate"
    device = torch.device(runner.device)
    if getattr(speculator, "draft_token_confidence_probs", None) is None:  # ngram's speculator: no buffer
        speculator.draft_token_confidence_probs = torch.ones(
            runner.max_num_reqs, k, dtype=torch.float32, device=device
        )
    estimator = AcceptanceEstimator(runner.max_num_reqs + 1, k, device)
    rows = V2EstimateRows(estimator, num_bonus_tokens=runner.model_state.num_new_sampled_tokens_per_step)
    rows.combine = label != "estimate"
    return rows, label


class _DraftRuns:
    """The drafter alone at ``n = B * Q`` query tokens: the first call of a size runs V2's dummy step for B
    requests and keeps the drafter's arguments, the following calls (the timed ones) repeat only the drafter.
    Sizes are measured one after the other (``interleave_draft=False``): another size's dummy step rewrites the
    buffers the kept arguments point at."""

    def __init__(self, runner, q: int) -> None:  # noqa: ANN001
        self.runner = runner
        self.q = q
        self.size: int | None = None
        self.call: tuple[tuple, dict] | None = None

    @torch.inference_mode()
    def __call__(self, n: int) -> None:
        speculator = self.runner.speculator
        if self.size != n:
            propose = speculator.propose
            kept: dict[str, Any] = {}

            def keep(*args: Any, **kwargs: Any):  # noqa: ANN202
                kept["call"] = (args, kwargs)
                return propose(*args, **kwargs)

            speculator.propose = keep
            try:
                self.runner._dummy_run(max(1, n // self.q))
            finally:
                speculator.propose = propose
            self.size, self.call = n, kept["call"]
            return
        args, kwargs = self.call
        speculator.propose(*args, **kwargs)
