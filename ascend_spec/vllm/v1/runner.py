"""Model Runner V1's hooks: the runner constructor (``runner_init``), the GDN flush and the start-up line.

:func:`~ascend_spec.vllm.v1.install_v1` wraps ``GPUModelRunner.__init__`` once per process; the wrapper reads
``additional_config["ascend_spec"]`` and, only when the plugin is enabled there, applies the other points to that
runner (CPU's and vllm-ascend's runners are built through it via ``super()``). Engines without the key run vLLM's
own code: the original is called and nothing else changes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from collections.abc import Callable
from typing import Any

from ascend_spec.vllm.config import AscendSpecConfig, parse_config
from ascend_spec.vllm.gdn_setup import (
    check_gdn_engine,
    flush_slots,
    gdn_layers,
    mamba_groups,
    package_version,
    register_gdn_layer,
)
from ascend_spec.vllm.log import plugin_logger
from ascend_spec.vllm.releases import VllmRelease, check_supported, installed_vllm_version

logger = plugin_logger()


def wrap_runner_init(original: Callable[..., None], release: VllmRelease) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self, vllm_config, *args: Any, **kwargs: Any) -> None:  # noqa: ANN001
        settings = parse_config(vllm_config.additional_config)
        if settings is None:
            original(self, vllm_config, *args, **kwargs)
            return
        async_scheduling = bool(vllm_config.scheduler_config.async_scheduling)
        settings = dataclasses.replace(settings, dynamic=settings.dynamic.for_engine(async_scheduling))
        from ascend_spec.vllm.ascend import is_npu_runner, prepare_npu_runner

        npu = is_npu_runner(self)
        if npu:
            prepare_npu_runner()  # vllm-ascend's version matrix, then its hooks
        else:
            check_supported()
        _check_engine(vllm_config, settings, npu=npu)
        # An engine step must not pay the ops' value checks (host syncs, on by default for CPU tensors): off
        # in engine processes unless the user sets ASCEND_SPEC_CHECKS (the tests set it to 1).
        os.environ.setdefault("ASCEND_SPEC_CHECKS", "0")
        register_gdn_layer(npu=npu)
        from vllm.v1.worker import gpu_model_runner

        upstream = gpu_model_runner.DFlashProposer
        upstream_eagle = gpu_model_runner.EagleProposer
        # NPU: the adapter's proposer replaces vLLM's after this
        if (settings.block_slots or settings.dynamic.enabled) and not npu:
            from ascend_spec.vllm.v1.dflash_proposer import AscendSpecDFlashProposer

            gpu_model_runner.DFlashProposer = AscendSpecDFlashProposer
        dspark = not npu and _drafts_with_dspark(vllm_config, settings)  # NPU: the adapter's DSpark proposer
        if dspark:
            from ascend_spec.vllm.v1.dspark_proposer import AscendSpecDSparkProposer

            gpu_model_runner.EagleProposer = AscendSpecDSparkProposer
        try:
            original(self, vllm_config, *args, **kwargs)
        finally:
            gpu_model_runner.DFlashProposer = upstream
            gpu_model_runner.EagleProposer = upstream_eagle
        if dspark and hasattr(self, "drafter"):
            self.use_aux_hidden_state_outputs = True  # DSpark reads the target's aux hidden states, as DFlash
        self.ascend_spec = settings
        self.ascend_spec_release = release
        _install_runner_hooks(self)
        if (
            _verifies_gdn_drafts(vllm_config, settings)
            and vllm_config.cache_config.mamba_cache_mode == "align"
        ):
            from ascend_spec.vllm.v1.gdn_align import install_align_hooks

            install_align_hooks(self)
        if npu:  # vllm-ascend samples and drafts with its own kernels: the CPU engine's repairs do not apply
            if settings.dynamic.enabled:
                from ascend_spec.vllm.ascend.dynamic import install_npu_dynamic

                install_npu_dynamic(self)
            return
        from ascend_spec.vllm.v1.rejection_expand import install_rejection_expand

        install_rejection_expand(self, release)
        from ascend_spec.vllm.v1.cpu_kernel_wiring import install_cpu_kernel_wiring

        install_cpu_kernel_wiring(self, release)
        if settings.dynamic.enabled:
            from ascend_spec.vllm.v1.dynamic_hooks import install_dynamic

            install_dynamic(self)

    return __init__


def _drafts_with_dspark(vllm_config, settings: AscendSpecConfig) -> bool:  # noqa: ANN001
    spec = vllm_config.speculative_config
    return settings.dspark and spec is not None and spec.method == "dspark"


def _check_engine(vllm_config, settings: AscendSpecConfig, *, npu: bool = False) -> None:  # noqa: ANN001
    """Engine settings the patch points need, refused with the setting to change. On vllm-ascend's
    NPUModelRunner dynamic verification is the adapter's (:mod:`ascend_spec.vllm.ascend.dynamic`): it overrides
    every runner method V1's dynamic hooks wrap."""
    if settings.dynamic.enabled and npu:
        from ascend_spec.vllm.ascend.dynamic import check_npu_dynamic_engine

        check_npu_dynamic_engine(vllm_config, settings)
    elif settings.dynamic.enabled:
        from ascend_spec.vllm.v1.dynamic_hooks import check_dynamic_engine

        check_dynamic_engine(vllm_config, settings.dynamic.mode)
    if npu:
        from ascend_spec.vllm.ascend.gdn import check_npu_gdn_engine

        check_npu_gdn_engine(vllm_config, settings.gdn_verify)
    check_gdn_engine(vllm_config, settings)


def _verifies_gdn_drafts(vllm_config, settings: AscendSpecConfig) -> bool:  # noqa: ANN001
    return bool(
        settings.gdn_verify
        and vllm_config.model_config.is_hybrid
        and vllm_config.speculative_config is not None
    )


def _install_runner_hooks(runner) -> None:  # noqa: ANN001
    update_states = runner._update_states
    load_model = runner.load_model

    def _update_states_with_flush(self, scheduler_output):  # noqa: ANN001, ANN202
        if self.__dict__.get("_ascend_spec_gdn_layers") == []:  # a loaded model without GDN layers
            return update_states(scheduler_output)
        from ascend_spec.vllm.gdn_layer import new_step

        new_step()
        _flush_leaving_requests(
            self, scheduler_output, plain_decodes=self.ascend_spec_release.shims.zero_draft_decodes_run_plain
        )
        return update_states(scheduler_output)

    def _load_model_with_log(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        result = load_model(*args, **kwargs)
        self.__dict__.pop("_ascend_spec_gdn_layers", None)
        self.__dict__.pop("_ascend_spec_gdn_groups", None)
        layers = gdn_layers(self)
        self._ascend_spec_gdn_layers = layers  # kept for every step, also when empty (a dense target)
        drafter = getattr(self, "drafter", None)
        logger.info(
            "ascend-spec %s on vLLM %s: %d GDN layers verify ragged drafts on one state slot per request; "
            "drafter %s; %s",
            package_version(),
            installed_vllm_version(),
            len(layers),
            type(drafter).__name__ if drafter is not None else "none",
            self.ascend_spec.describe(),
        )
        return result

    runner._update_states = types.MethodType(_update_states_with_flush, runner)
    runner.load_model = types.MethodType(_load_model_with_log, runner)


def _flush_leaving_requests(runner, scheduler_output, *, plain_decodes: bool = False) -> None:  # noqa: ANN001
    """Flush every GDN layer's pending records for requests that are about to leave the persistent batch and,
    with ``plain_decodes`` (a release that runs decode rows without drafts through vLLM's own GDN kernels, from
    the committed state slot: ``V1Shims.zero_draft_decodes_run_plain``), for requests scheduled this step
    without drafts."""
    import torch

    layers = gdn_layers(runner)  # scanned once the model is built, not every step
    if not layers:
        return
    batch = runner.input_batch
    scheduled = scheduler_output.num_scheduled_tokens
    finished = scheduler_output.finished_req_ids
    drafts = scheduler_output.scheduled_spec_decode_tokens

    def leaves_or_runs_plain(rid: str) -> bool:
        if rid in finished or rid not in scheduled:
            return True
        # vLLM's speculative GDN rows are the scheduled decodes of exactly 1 + len(drafts) tokens
        return plain_decodes and (rid not in drafts or scheduled[rid] != len(drafts[rid]) + 1)

    leaving = [(rid, row) for rid, row in batch.req_id_to_index.items() if leaves_or_runs_plain(rid)]
    # The running state's block column: 0 without prefix caching; with it (align mode) the block of the
    # request's last scheduled token, where its records are (:mod:`ascend_spec.vllm.v1.gdn_align`).
    align = runner.cache_config.mamba_cache_mode == "align"
    columns = [runner.mamba_state_idx.get(rid, -1) if align else 0 for rid, _ in leaving]
    rows = [row for (_, row), col in zip(leaving, columns) if col >= 0]
    columns = [col for col in columns if col >= 0]
    if not rows:
        return
    accepted = _accepted_counts(runner, rows)
    for gid, group_layers in mamba_groups(runner, layers):  # each group's layers at that group's state slots
        slots = torch.from_numpy(batch.block_table[gid].block_table.np[rows, columns].copy())
        flush_slots(group_layers, slots, accepted)


def _accepted_counts(runner, rows: list[int]):  # noqa: ANN001, ANN202
    """The last verify step's accepted counts of the batch rows ``rows`` (rows of that step: the flush runs
    before V1 moves rows). Sync scheduling: V1's host copy, landed before this step. Async scheduling: that copy
    may still be in flight (V1 itself stops reading it there), so the counts are gathered from V1's device
    buffer, in stream order after the step that wrote them: no host read."""
    import torch

    if getattr(runner, "use_async_scheduling", False):
        counts = runner.num_accepted_tokens.gpu
        index = torch.tensor(rows, dtype=torch.int64).to(counts.device, non_blocking=True)
        return counts.index_select(0, index)
    return torch.from_numpy(runner.input_batch.num_accepted_tokens_cpu[rows].copy())
