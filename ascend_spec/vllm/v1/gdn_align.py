"""Prefix caching (``mamba_cache_mode="align"``) with ragged GDN verification on Model Runner V1.

vLLM moves the state between cache blocks in ``preprocess_mamba`` before the forward and
``postprocess_mamba_align_gpu`` after sampling (``vllm/v1/worker/mamba_utils.py``); on an enabled runner both are
the plugin's moves (:mod:`ascend_spec.vllm.gdn_align_moves`), decided here on the host from the scheduler's counts
and one read of the step's accepted counts. vLLM's fused align kernels (``precopy_mamba_align_fused_kernel``,
``postprocess_mamba_fused_kernel``) are Triton kernels with no CPU implementation; the enabled runner builds its
mamba buffers without them and needs none.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ascend_spec.vllm.gdn_align_moves import (
    AlignStats,
    BoundaryWrite,
    boundary_reached,
    move_running_states,
    write_boundary_states,
)
from ascend_spec.vllm.gdn_setup import layer_groups

#: vLLM's ``preprocess_mamba``, kept when the module function is routed through :func:`preprocess_mamba`.
_vllm_preprocess: Any = None


def _verifying_layers(forward_context: dict[str, Any]) -> list:
    from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention

    return [
        layer
        for layer in forward_context.values()
        if isinstance(layer, AscendSpecGDNAttention) and layer.ascend_spec is not None
    ]


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
        move_running_states(
            group_layers, *_slots(input_batch.block_table[gid].block_table.np, moves, group_layers)
        )


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
        # Records start at the committed state (``computed`` tokens); a prefill row has none (its slot holds the
        # state after its chunk, which vLLM's align scheduling ends at the boundary).
        reached = boundary_reached(
            committed=computed,
            running_tokens=running_tokens,
            accepted=int(accepted[i]),
            block_size=block_size,
        )
        if reached is None:
            continue
        running = runner.mamba_state_idx[req_id]
        writes.append((i, running, reached.column, reached.tokens))
        written.append(BoundaryWrite(req_id, i, reached.column, reached.inside_draft))
        stats.boundary_writes += 1
        stats.inside_draft += int(reached.inside_draft)
        stats.partial_commits += int(reached.partial)
        if (
            running == reached.column
        ):  # the running slot is the boundary's: every recorded token is committed now
            runner.num_accepted_tokens.gpu[i] = 1
    if not writes:
        return written
    for gid, group_layers in layer_groups(runner.kv_cache_config, layers):
        table = runner.input_batch.block_table[gid].block_table.np
        write_boundary_states(group_layers, *_slots(table, writes, group_layers))
    return written


def _slots(table, moves: list[tuple[int, int, int, int]], layers: list) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
    """``(src, dst, counts)`` on the layers' device from ``(batch row, src column, dst column, count)`` moves: the
    state slots of one KV-cache group's block ``table`` (host) and the counts (accepted or committed tokens)."""
    device = layers[0].kv_cache[1].device
    src = torch.tensor([int(table[row, col]) for row, col, _, _ in moves], dtype=torch.int64)
    dst = torch.tensor([int(table[row, col]) for row, _, col, _ in moves], dtype=torch.int64)
    counts = torch.tensor([m[3] for m in moves], dtype=torch.int32)
    return src.to(device), dst.to(device), counts.to(device)


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
