"""Model Runner V2's hooks: the runner constructor (``v2_runner_init``), the GDN flush and the start-up line.

:func:`~ascend_spec.vllm.v2.install_v2` wraps V2's ``GPUModelRunner.__init__`` once per process (the CPU worker's
V2 runner is a subclass and runs it through ``super()``); the wrapper reads ``additional_config["ascend_spec"]``
and, only when the plugin is enabled there, registers the plugin's GDN layer and hooks that runner. Engines
without the key run vLLM's own code.

How V2 serves one GDN state slot per request:

* the layer's ``get_kv_cache_spec`` says ``num_speculative_blocks = 0``; V2 sizes its block tables, its warm-up
  reservations and its hybrid model state from the specs (``model_runner.py`` ``get_kv_cache_spec`` /
  ``initialize_kv_cache``, ``warmup.py``, ``model_states/mamba_hybrid.py``);
* V2's hybrid model state hands the GDN metadata builder each decode row's scheduled drafts (``>= 0``, zero
  included: speculative rows) and the per-request accepted counts it keeps on the device
  (``num_accepted_tokens_gpu``, set from the sampled counts after every step, reset to 1 when a request takes a
  request slot): the layer's pending counts come from those, as on V1;
* a request leaves V2's request states in ``_remove_request`` (finished, preempted, a streaming input's re-add):
  before vLLM forgets its request slot, the flush reads its state slot (``block_tables``, the mamba group's
  column 0) and its accepted count on the device (no host read) and commits its pending records;
* under async scheduling too: the worker runs each step's ``execute_model`` then its ``sample_tokens``, whose
  ``postprocess_state`` writes ``num_accepted_tokens_gpu`` on the device before the next step's flush reads it
  (stream order; the host copies V2 leaves in flight are never read).
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

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
from ascend_spec.vllm.releases import VllmRelease, installed_vllm_version

logger = plugin_logger()


def wrap_runner_init(original: Callable[..., None], release: VllmRelease) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self, vllm_config, *args: Any, **kwargs: Any) -> None:  # noqa: ANN001
        settings = parse_config(vllm_config.additional_config)
        if settings is None:
            original(self, vllm_config, *args, **kwargs)
            return
        from ascend_spec.vllm.ascend import V2_RUNNER_MODULE, is_npu_runner

        npu = is_npu_runner(self, V2_RUNNER_MODULE)
        if npu:
            from ascend_spec.vllm.ascend import check_versions
            from ascend_spec.vllm.ascend.gdn import check_npu_gdn_engine

            check_versions()  # vllm-ascend's version matrix
            check_npu_gdn_engine(vllm_config, settings.gdn_verify)
        check_v2_engine(vllm_config, settings, release)
        # An engine step must not pay the ops' value checks (host syncs): off unless the user sets them.
        os.environ.setdefault("ASCEND_SPEC_CHECKS", "0")
        if settings.gdn_verify:
            register_gdn_layer(npu=npu)
        original(self, vllm_config, *args, **kwargs)
        self.ascend_spec = settings
        self.ascend_spec_release = release
        _install_runner_hooks(self)
        if settings.block_slots and release.v2_shims.dflash_inputs_from_block_slots:
            if npu:  # vllm-ascend's __init__ replaces the speculator after vLLM's: hooked at load_model
                self._ascend_spec_block_slots_pending = True
            else:
                _use_block_slots(self, settings)
        if settings.dynamic.enabled:
            from ascend_spec.vllm.v2.dynamic_hooks import install_v2_dynamic

            install_v2_dynamic(self)

    __init__._ascend_spec_v2 = True
    return __init__


def check_v2_engine(
    vllm_config,  # noqa: ANN001
    settings: AscendSpecConfig,
    release: VllmRelease | None = None,
) -> None:
    """What the V2 hooks of ``release`` (default: the installed one) serve, refused in one line with the setting
    to change."""
    if release is None:
        from ascend_spec.vllm.releases import v2_release

        release = v2_release()
    where = f"on vLLM {release.version}'s Model Runner V2"
    if settings.dynamic.enabled and not release.v2_shims.dynamic_verification:
        raise ValueError(
            f"additional_config['ascend_spec']['dynamic'] {where}: its adaptive verification is not the seam the "
            "plugin's budgets replace (vLLM 0.32.0's); remove 'dynamic' (drafts are verified at full length) or "
            "set VLLM_USE_V2_MODEL_RUNNER=0"
        )
    if settings.dynamic.enabled:
        from ascend_spec.vllm.v2.dynamic_hooks import check_v2_dynamic_engine

        check_v2_dynamic_engine(vllm_config, settings)
    check_gdn_engine(vllm_config, settings)


def _use_block_slots(runner, settings: AscendSpecConfig) -> None:  # noqa: ANN001
    """DFlash / DSpark speculators (DSpark's subclasses DFlash's) take their block inputs from the project's op."""
    speculator = getattr(runner, "speculator", None)
    if speculator is None:
        return
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

    if isinstance(speculator, DFlashSpeculator):
        from ascend_spec.vllm.v2.dflash_inputs import use_block_slots

        use_block_slots(speculator, settings.backend)


def _install_runner_hooks(runner) -> None:  # noqa: ANN001
    load_model = runner.load_model
    finish_requests = runner.finish_requests
    remove_request = runner._remove_request

    def _load_model_with_log(self, *args: Any, **kwargs: Any):  # noqa: ANN202
        if self.__dict__.pop("_ascend_spec_block_slots_pending", False):
            _use_block_slots(self, self.ascend_spec)
        result = load_model(*args, **kwargs)
        self.__dict__.pop("_ascend_spec_gdn_layers", None)
        self.__dict__.pop("_ascend_spec_gdn_groups", None)
        layers = gdn_layers(self)
        self._ascend_spec_gdn_layers = layers  # kept for every step, also when empty (a dense target)
        if layers and self.speculative_config is not None and self.cache_config.mamba_cache_mode == "align":
            from ascend_spec.vllm.v2.gdn_align import install_v2_align_hooks

            install_v2_align_hooks(self)
        speculator = getattr(self, "speculator", None)
        logger.info(
            "ascend-spec %s on vLLM %s (Model Runner V2): %d GDN layers verify drafts on one state slot per "
            "request; speculator %s; %s",
            package_version(),
            installed_vllm_version(),
            len(layers),
            type(speculator).__name__ if speculator is not None else "none",
            self.ascend_spec.describe(),
        )
        return result

    def _finish_requests_with_flush(self, scheduler_output):  # noqa: ANN001, ANN202
        if self.__dict__.get("_ascend_spec_gdn_layers") == []:  # a loaded model without GDN layers
            return finish_requests(scheduler_output)
        from ascend_spec.vllm.gdn_layer import new_step

        new_step()  # V2 calls finish_requests first in every real step
        leaving = scheduler_output.finished_req_ids | (scheduler_output.preempted_req_ids or set())
        if self.ascend_spec_release.v2_shims.zero_draft_decodes_run_plain:
            leaving = leaving | plain_decodes(self, scheduler_output)
        flush_leaving_requests(self, leaving)
        self._ascend_spec_flushed = leaving
        try:
            return finish_requests(scheduler_output)
        finally:
            self._ascend_spec_flushed = frozenset()

    def _remove_request_with_flush(self, req_id: str) -> bool:
        # finish_requests flushed its requests in one batch; other removals (a streaming input's re-add) here
        if req_id not in self.__dict__.get("_ascend_spec_flushed", ()):
            flush_leaving_requests(self, (req_id,))
        return remove_request(req_id)

    runner._ascend_spec_flushed = frozenset()
    runner.load_model = types.MethodType(_load_model_with_log, runner)
    runner.finish_requests = types.MethodType(_finish_requests_with_flush, runner)
    runner._remove_request = types.MethodType(_remove_request_with_flush, runner)


def plain_decodes(runner, scheduler_output) -> set[str]:  # noqa: ANN001
    """Requests V2 holds that this step schedules without drafts: on a release whose hybrid state runs them
    through the GDN layer's plain kernels (``V2Shims.zero_draft_decodes_run_plain``), which start from the
    committed state, their pending records are committed first. A request without records flushes nothing."""
    drafts = scheduler_output.scheduled_spec_decode_tokens
    index = runner.req_states.req_id_to_index
    return {rid for rid in scheduler_output.num_scheduled_tokens if rid in index and not drafts.get(rid)}


def flush_leaving_requests(runner, req_ids: Iterable[str]) -> None:  # noqa: ANN001
    """Commit every GDN layer's pending records of the requests in ``req_ids`` that V2 still holds, before V2
    forgets their request slots. Slots and accepted counts are gathered on the device."""
    layers = gdn_layers(runner)
    if not layers:
        return
    index = runner.req_states.req_id_to_index
    rows = sorted(index[r] for r in req_ids if r in index)
    if not rows:
        return
    accepted_all = runner.model_state.num_accepted_tokens_gpu
    rows_t = torch.tensor(rows, dtype=torch.long).to(accepted_all.device, non_blocking=True)
    accepted = accepted_all.index_select(0, rows_t)
    for gid, group_layers in mamba_groups(runner, layers):  # each group's layers at that group's state slots
        table = runner.block_tables.block_tables[gid].gpu
        flush_slots(group_layers, _running_slots(runner, table, rows_t), accepted)
    runner._ascend_spec_flushed_requests = runner.__dict__.get("_ascend_spec_flushed_requests", 0) + len(rows)


def _running_slots(runner, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """The running state slot of V2 request slots ``rows``: their first block's, or with prefix caching (align
    mode) the block of their last scheduled token (-1 for a request not scheduled yet: nothing to commit)."""
    if runner.cache_config.mamba_cache_mode != "align":
        return table.index_select(0, rows)[:, 0]
    columns = runner.model_state._mamba_state_idx_gpu.index_select(0, rows).long()
    slots = table[rows, columns.clamp(min=0)]
    return torch.where(columns >= 0, slots, torch.full_like(slots, -1))
