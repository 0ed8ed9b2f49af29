"""Prefix caching (``mamba_cache_mode="align"``) with ragged GDN verification on Model Runner V2.

V2 moves the state between cache blocks on the device in its hybrid model state
(``vllm/v1/worker/gpu/model_states/mamba_hybrid.py``): ``preprocess_state`` before the forward (the running block's
column in ``_mamba_state_idx_gpu``, the fused pre-copy) and ``postprocess_state`` after sampling (the fused
boundary copy), both picking one of ``1+K`` per-token states. On an enabled runner both moves are the plugin's
(:mod:`ascend_spec.vllm.gdn_align_moves`): the columns and counts are computed on the device from V2's own
request state (``num_computed_tokens``, the query lengths, the accepted counts), and the requests that move or
reach a boundary are found with one read each (a step's ``nonzero``), as Model Runner V1's moves read the
accepted counts once. V2's aligned state indices for the GDN metadata (``compute_aligned_state_indices``) stay
V2's: they name the same running block.
"""

from __future__ import annotations

import types

import torch

from ascend_spec.vllm.gdn_align_moves import (
    AlignStats,
    BoundaryWrite,
    move_running_states,
    write_boundary_states,
)
from ascend_spec.vllm.gdn_setup import gdn_layers, layer_groups


def _block_size(state, kv_cache_config) -> int:  # noqa: ANN001
    return state._get_mamba_group_info(kv_cache_config)[1].block_size


def preprocess_state(runner, input_batch, kv_cache_config, num_computed_tokens: torch.Tensor) -> None:  # noqa: ANN001
    """Before the forward: each request's running block column from its tokens through the step; a request whose
    column changes commits its records in the old block's slot and continues from the new one's."""
    state = runner.model_state
    n = input_batch.num_reqs
    if n == 0:
        return
    bs = _block_size(state, kv_cache_config)
    req = input_batch.idx_mapping[:n].long()
    qsl = input_batch.query_start_loc
    through = num_computed_tokens.index_select(0, req) + (qsl[1 : n + 1] - qsl[:n])
    new_col = ((through + bs - 1) // bs - 1).to(state._mamba_state_idx_gpu.dtype)
    prev = state._mamba_state_idx_gpu.index_select(0, req)
    state._mamba_state_idx_gpu.index_copy_(0, req, new_col)
    rows = ((prev >= 0) & (prev != new_col)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    moving = req.index_select(0, rows)
    accepted = state.num_accepted_tokens_gpu.index_select(0, moving)
    state.num_accepted_tokens_gpu.index_fill_(0, moving, 1)  # the new slot's state is committed: no offset
    old, new = prev.index_select(0, rows).long(), new_col.index_select(0, rows).long()
    for gid, group_layers in layer_groups(kv_cache_config, gdn_layers(runner)):
        table = runner.block_tables.block_tables[gid].gpu
        move_running_states(group_layers, table[moving, old], table[moving, new], accepted)


def postprocess_align(
    runner,  # noqa: ANN001
    idx_mapping: torch.Tensor,
    num_computed_tokens: torch.Tensor,
) -> list[BoundaryWrite]:
    """After sampling (V2 has advanced ``num_computed_tokens`` and scattered the accepted counts): the state at
    every block boundary a request's accepted tokens reached, in the boundary block's slot. Returns what it
    wrote (``row``: the request slot, V2's block tables' row)."""
    state = runner.model_state
    bs = _block_size(state, runner.kv_cache_config)
    req = idx_mapping.long()
    valid = req >= 0  # V2 marks rows another pipeline stage filtered with -1
    req = req.clamp(min=0)
    accepted = state.num_accepted_tokens_gpu.index_select(0, req).long()
    computed = num_computed_tokens.index_select(0, req).long()
    running_tokens = computed - accepted + 1  # through the step's first token; the slot holds one fewer
    aligned = computed // bs * bs
    rows = (valid & (aligned >= running_tokens)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return []
    stats = runner.ascend_spec_align
    hit = req.index_select(0, rows)
    aligned, running_tokens = aligned.index_select(0, rows), running_tokens.index_select(0, rows)
    computed = computed.index_select(0, rows)
    running_col = state._mamba_state_idx_gpu.index_select(0, hit).long()
    boundary_col = aligned // bs - 1
    tokens = (aligned - running_tokens + 1).to(torch.int32)
    inside, partial = aligned > running_tokens, aligned < computed
    stats.boundary_writes += int(rows.numel())
    stats.inside_draft += int(inside.sum())
    stats.partial_commits += int(partial.sum())
    # the running slot is the boundary's: every recorded token is committed now
    same = running_col == boundary_col
    ones = torch.ones_like(state.num_accepted_tokens_gpu.index_select(0, hit))
    kept = torch.where(same, ones, state.num_accepted_tokens_gpu.index_select(0, hit))
    state.num_accepted_tokens_gpu.index_copy_(0, hit, kept)
    for gid, group_layers in layer_groups(runner.kv_cache_config, gdn_layers(runner)):
        table = runner.block_tables.block_tables[gid].gpu
        write_boundary_states(group_layers, table[hit, running_col], table[hit, boundary_col], tokens)
    index_to_req_id = runner.req_states.index_to_req_id
    return [
        BoundaryWrite(index_to_req_id[r], r, c, bool(i))
        for r, c, i in zip(hit.tolist(), boundary_col.tolist(), inside.tolist(), strict=True)
    ]


def install_v2_align_hooks(runner) -> None:  # noqa: ANN001
    """Route an enabled V2 runner's align-mode state moves through the plugin (module docstring); its model
    state exists once the model is loaded."""
    state = runner.model_state
    postprocess = state.postprocess_state

    def _preprocess_state(self, input_batch, block_tables, kv_cache_config, num_computed_tokens):  # noqa: ANN001, ANN202
        preprocess_state(runner, input_batch, kv_cache_config, num_computed_tokens)

    def _postprocess_state(self, idx_mapping, num_sampled, num_computed_tokens=None):  # noqa: ANN001, ANN202
        postprocess(idx_mapping, num_sampled)  # V2's accepted counts, without its fused boundary copy
        if num_computed_tokens is not None and idx_mapping.shape[0]:
            postprocess_align(runner, idx_mapping, num_computed_tokens)

    runner.ascend_spec_align = AlignStats()
    state.preprocess_state = types.MethodType(_preprocess_state, state)
    state.postprocess_state = types.MethodType(_postprocess_state, state)
