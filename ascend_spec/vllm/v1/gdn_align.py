"""Prefix caching (``mamba_cache_mode="align"``) with ragged GDN verification on Model Runner V1.

In align mode vLLM keeps one mamba state slot per cache block: the running state lives in the block of the
request's last scheduled token (``mamba_get_block_table_tensor``), and a block that fills keeps the state at its
last token, which a later request with the same prefix starts from. vLLM moves the state between blocks itself
(``preprocess_mamba`` before the forward, ``postprocess_mamba_align_gpu`` after sampling,
``vllm/v1/worker/mamba_utils.py``), picking one of ``1+K`` speculative states; the plugin keeps one state and
per-token records instead, so on an enabled runner both moves are the plugin's:

* before the forward (:func:`preprocess_mamba`), a request whose running block changes commits its pending records
  in the old block's slot and copies the committed state (recurrent and conv) into the new block's slot, which
  holds no records;
* after sampling (:func:`postprocess_align`), a request whose accepted tokens reach a block boundary gets that
  boundary's state in the boundary block's slot: the running slot's committed state and records copied there and
  committed up to the boundary (the boundary may fall anywhere inside the accepted draft).

vLLM's fused align kernels (``precopy_mamba_align_fused_kernel``, ``postprocess_mamba_fused_kernel``) are Triton
kernels with no CPU implementation; the enabled runner builds its mamba buffers without them and needs none.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch

from ascend_spec.vllm.gdn_setup import layer_groups

#: vLLM's ``preprocess_mamba``, kept when the module function is routed through :func:`preprocess_mamba`.
_vllm_preprocess: Any = None


@dataclass
class AlignStats:
    """What the align-mode moves did in one runner (``runner.ascend_spec_align``): the boundary states written
    after sampling, those whose boundary fell at an accepted draft token (after the step's first token), and
    those that committed only part of the step's records (tokens accepted past the boundary)."""

    boundary_writes: int = 0
    inside_draft: int = 0
    partial_commits: int = 0


def _verifying_layers(forward_context: dict[str, Any]) -> list:
    from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention

    return [
        layer
        for layer in forward_context.values()
        if isinstance(layer, AscendSpecGDNAttention) and layer.ascend_spec is not None
    ]


def copy_slot(layer, src: torch.Tensor, dst: torch.Tensor, *, records: bool) -> None:  # noqa: ANN001
    """Copy the committed recurrent and conv states of slots ``src`` into ``dst`` (int64 [N]) and, with
    ``records``, their verify records; without, ``dst`` holds no records (nothing of an older call replays)."""
    ssm, conv = layer._ssm_pool(), layer._conv_pool()
    ssm.index_copy_(0, dst, ssm.index_select(0, src))
    conv.index_copy_(0, dst, conv.index_select(0, src))
    if layer.records is None:
        return
    if records:
        for t in (*layer.records.tensors(), layer.conv_records.x, layer.conv_records.num_recorded):
            t.index_copy_(0, dst, t.index_select(0, src))
    else:
        layer.records.num_recorded.index_fill_(0, dst, 0)
        layer.conv_records.num_recorded.index_fill_(0, dst, 0)


def preprocess_mamba(
    scheduler_output,  # noqa: ANN001
    kv_cache_config,  # noqa: ANN001
    cache_config,  # noqa: ANN001
    mamba_state_idx: dict[str, int],
    input_batch,  # noqa: ANN001
    requests: dict,
    forward_context: dict[str, Any],
    mamba_state_copy_funcs,  # noqa: ANN001
    copy_bufs,  # noqa: ANN001
    align_ctx=None,  # noqa: ANN001
) -> None:
    """vLLM's ``preprocess_mamba`` for runners whose GDN layers verify with the plugin (module docstring); any
    other runner gets vLLM's."""
    layers = _verifying_layers(forward_context)
    if not layers:
        return _vllm_preprocess(
            scheduler_output,
            kv_cache_config,
            cache_config,
            mamba_state_idx,
            input_batch,
            requests,
            forward_context,
            mamba_state_copy_funcs,
            copy_bufs,
            align_ctx=align_ctx,
        )
    if align_ctx is not None:
        raise RuntimeError(
            "ascend-spec's align-mode GDN state moves run without vLLM's fused align kernels; the runner handed "
            "preprocess_mamba a fused context (align_ctx)"
        )
    from vllm.utils.math_utils import cdiv
    from vllm.v1.worker.mamba_utils import cleanup_mamba_state_idx

    cleanup_mamba_state_idx(scheduler_output, mamba_state_idx)
    block_size = copy_bufs.mamba_spec.block_size
    moves: list[tuple[int, int, int, int]] = []  # (batch row, old column, new column, pending accepted)
    for i, req_id in enumerate(input_batch.req_ids):
        req_state = requests[req_id]
        prev = mamba_state_idx.get(req_id)
        fresh = prev is None
        if fresh:  # new or resumed: it starts from a cached block's committed state (no records), or none
            prev = (req_state.num_computed_tokens - 1) // block_size
        scheduled = scheduler_output.num_scheduled_tokens[req_id]
        curr = cdiv(req_state.num_computed_tokens + scheduled, block_size) - 1
        mamba_state_idx[req_id] = curr
        if prev != -1 and prev != curr:
            accepted = 0 if fresh else int(input_batch.num_accepted_tokens_cpu[i])
            moves.append((i, prev, curr, accepted))
            input_batch.num_accepted_tokens_cpu[i] = 1
    if not moves:
        return
    for gid, group_layers in layer_groups(kv_cache_config, layers):
        table = input_batch.block_table[gid].block_table.np
        src = torch.tensor([int(table[row, old]) for row, old, _, _ in moves], dtype=torch.int64)
        dst = torch.tensor([int(table[row, new]) for row, _, new, _ in moves], dtype=torch.int64)
        accepted = torch.tensor([m[3] for m in moves], dtype=torch.int32)
        device = group_layers[0].kv_cache[1].device
        src, dst, accepted = src.to(device), dst.to(device), accepted.to(device)
        for layer in group_layers:
            layer.flush(src, accepted)
            copy_slot(layer, src, dst, records=False)


@dataclass(frozen=True)
class BoundaryWrite:
    """One boundary state written after sampling: the request, its batch row, the boundary block's column in
    the request's block table, and whether the boundary fell at an accepted draft token."""

    req_id: str
    row: int
    column: int
    inside_draft: bool


def postprocess_align(runner, scheduler_output, num_reqs: int) -> list[BoundaryWrite]:  # noqa: ANN001
    """After sampling: the boundary state of every request whose accepted tokens reach a block boundary, in that
    boundary block's slot (module docstring); vLLM's ``postprocess_mamba_align_gpu`` with one state. Returns
    what it wrote."""
    from ascend_spec.vllm.gdn_setup import gdn_layers

    layers = gdn_layers(runner)
    stats = runner.ascend_spec_align
    block_size = runner._get_mamba_bufs().preprocess.mamba_spec.block_size
    accepted = runner.num_accepted_tokens.gpu[:num_reqs].cpu()
    drafts = scheduler_output.scheduled_spec_decode_tokens
    writes: list[tuple[int, int, int, int]] = []  # (batch row, running column, boundary column, tokens)
    written: list[BoundaryWrite] = []
    for i, req_id in enumerate(runner.input_batch.req_ids[:num_reqs]):
        computed = runner.requests[req_id].num_computed_tokens
        scheduled = scheduler_output.num_scheduled_tokens.get(req_id, 0)
        if scheduled == 0:
            continue
        running_tokens = computed + scheduled - len(drafts.get(req_id, ()))
        new_computed = running_tokens + int(accepted[i]) - 1
        aligned = new_computed // block_size * block_size
        if aligned < running_tokens:
            continue
        # Records start at the committed state (``computed`` tokens); a prefill row has none (its slot holds the
        # state after its chunk, which vLLM's align scheduling ends at the boundary).
        running, boundary = runner.mamba_state_idx[req_id], aligned // block_size - 1
        writes.append((i, running, boundary, aligned - computed))
        written.append(BoundaryWrite(req_id, i, boundary, aligned > running_tokens))
        stats.boundary_writes += 1
        stats.inside_draft += int(aligned > running_tokens)
        stats.partial_commits += int(aligned < new_computed)
        if running == boundary:  # the running slot is the boundary's: every recorded token is committed now
            runner.num_accepted_tokens.gpu[i] = 1
    if not writes:
        return written
    for gid, group_layers in layer_groups(runner.kv_cache_config, layers):
        table = runner.input_batch.block_table[gid].block_table.np
        src = torch.tensor([int(table[row, run]) for row, run, _, _ in writes], dtype=torch.int64)
        dst = torch.tensor([int(table[row, bound]) for row, _, bound, _ in writes], dtype=torch.int64)
        tokens = torch.tensor([w[3] for w in writes], dtype=torch.int32)
        device = group_layers[0].kv_cache[1].device
        src, dst, tokens = src.to(device), dst.to(device), tokens.to(device)
        moved = src != dst
        for layer in group_layers:
            if bool(moved.any()):
                copy_slot(layer, src[moved], dst[moved], records=True)
            layer.flush(dst, tokens)
    return written


def install_align_hooks(runner) -> None:  # noqa: ANN001
    """Route an enabled V1 runner's align-mode state moves through the plugin (module docstring)."""
    global _vllm_preprocess
    from vllm.v1.worker import mamba_utils

    if _vllm_preprocess is None:
        _vllm_preprocess = mamba_utils.preprocess_mamba
        mamba_utils.preprocess_mamba = preprocess_mamba
    update_after = runner._update_states_after_model_execute

    def _get_mamba_bufs(self):  # noqa: ANN001, ANN202
        if self._mamba_bufs is None:
            self._mamba_bufs = mamba_utils.MambaBuffers.create(
                max_num_reqs=self.max_num_reqs,
                kv_cache_config=self.kv_cache_config,
                copy_funcs=self._get_mamba_state_copy_funcs(),
                make_buffer=self._make_buffer,
                device=self.device,
                with_postprocess_align=False,  # vLLM's fused align kernels: no CPU implementation, not needed
            )
        return self._mamba_bufs

    def _update_states_after_model_execute(self, output_token_ids, scheduler_output):  # noqa: ANN001, ANN202
        if not self.__dict__.get("_ascend_spec_gdn_layers"):
            return update_after(output_token_ids, scheduler_output)
        num_reqs = output_token_ids.size(0)
        self.num_accepted_tokens.gpu[:num_reqs] = (output_token_ids != -1).sum(dim=1)
        postprocess_align(self, scheduler_output, num_reqs)
        self.input_batch.num_accepted_tokens_cpu_tensor[:num_reqs].copy_(
            self.num_accepted_tokens.gpu[:num_reqs]
        )
        self.num_accepted_tokens_event.record()

    runner.ascend_spec_align = AlignStats()
    runner._get_mamba_bufs = types.MethodType(_get_mamba_bufs, runner)
    runner._update_states_after_model_execute = types.MethodType(_update_states_after_model_execute, runner)
