"""DFlash's block inputs on vllm-ascend from ``prepare_block_slots`` (the plugin's ``block_slots`` setting).

vllm-ascend 0.30.0rc2's ``AscendDflashProposer.set_inputs_first_pass`` (``spec_decode/dflash_proposer.py``) builds
the draft pass's inputs with its Triton kernel ``copy_and_expand_dflash_and_dspark_inputs_kernel``: the context
(every target token of the step, rejected ones included, at the target's own slots), the query block (anchor +
K masks at positions ``seq_len - rejected ..``, paged slots from the block table) and the K sample rows per
request, then rewrites the attention metadata in place for a non-causal block. :func:`set_block_inputs` fills the
same buffers from ascend-spec's ``prepare_block_slots`` (the op and contract the CPU/GPU proposer uses): the
context holds each request's accepted tokens only (the rejected ones' keys are never attended: the block's
sequence ends at the accepted length), its hidden states gathered to match; the metadata is rewritten as
vllm-ascend does.
"""

from __future__ import annotations

from typing import Any

import torch

from ascend_spec.ops import prepare_block_slots


def set_block_inputs(
    proposer: Any,
    *,
    next_token_ids: torch.Tensor,
    target_positions: torch.Tensor,
    target_hidden_states: torch.Tensor,
    cad: Any,
    num_rejected_tokens_gpu: torch.Tensor | None,
    backend: str,
) -> tuple[int, torch.Tensor, Any, None]:
    """Fill ``proposer``'s input buffers for one draft pass; returns what ``set_inputs_first_pass`` returns."""
    from vllm_ascend.attention.attention_v1 import AscendAttentionState

    batch = int(cad.num_reqs)
    q = 1 + proposer.num_speculative_tokens
    qsl = cad.query_start_loc[: batch + 1].to(torch.int64)
    step_lens = qsl[1:] - qsl[:-1]
    accepted = step_lens if num_rejected_tokens_gpu is None else step_lens - num_rejected_tokens_gpu[:batch]
    accepted = accepted.clamp_min(1)  # a row always carries its last token
    positions = target_positions if target_positions.dim() == 1 else target_positions[0]
    anchor_positions = positions.index_select(0, qsl[:-1] + accepted - 1) + 1
    block_size = proposer.kernel_block_size
    table = cad.block_table_tensor[:batch].to(torch.int32)
    # A block near the table's end would run past it: extra columns name block 0 (vLLM's null block).
    spare = torch.zeros(batch, -(-q // block_size) + 1, dtype=torch.int32, device=table.device)
    slots = prepare_block_slots(
        next_token_ids[:batch],
        anchor_positions,
        torch.cat([table, spare], dim=1),
        block_size=block_size,
        num_query_tokens=q,
        mask_token_id=int(proposer.parallel_drafting_token_id),
        sample_from_anchor=False,
        context_lens=accepted,
        backend=backend,
    )
    num_query = batch * q
    num_context = slots.context_slot_mapping.numel()
    proposer.input_ids[:num_query].copy_(slots.input_ids)
    proposer.positions[:num_query].copy_(slots.positions)
    proposer._slot_mapping_buffer[:num_query].copy_(slots.slot_mapping)
    proposer._context_positions_buffer[:num_context].copy_(slots.context_positions)
    proposer._context_slot_mapping_buffers[:num_context].copy_(slots.context_slot_mapping)
    if num_context == target_hidden_states.shape[0]:
        proposer._dflash_hidden_states[:num_context] = target_hidden_states
    else:  # accepted rows only: row j of request b is step row qsl[b] + j
        start = slots.context_start_loc.to(torch.int64)
        req = torch.repeat_interleave(
            torch.arange(batch, device=qsl.device), accepted, output_size=num_context
        )
        rows = (
            qsl.index_select(0, req)
            + torch.arange(num_context, device=qsl.device)
            - start.index_select(0, req)
        )
        proposer._dflash_hidden_states[:num_context] = target_hidden_states.index_select(0, rows)
    proposer._dflash_num_context = num_context
    proposer.block_slot_calls = getattr(proposer, "block_slot_calls", 0) + 1

    cad.query_start_loc = slots.query_start_loc.to(cad.query_start_loc.dtype)
    cad.seq_lens = slots.seq_lens.to(cad.seq_lens.dtype)
    cad.query_start_loc_cpu = torch.arange(batch + 1, dtype=torch.int32) * q
    if hasattr(cad, "actual_seq_lengths_q"):
        cad.actual_seq_lengths_q = [q] * batch
    if hasattr(cad, "decode_token_per_req"):
        cad.decode_token_per_req = q
    cad.num_actual_tokens = num_query
    cad.max_query_len = q
    cad.max_seq_len = cad.max_seq_len + q
    cad.slot_mapping = proposer._slot_mapping_buffer[:num_query]
    cad.causal = False
    cad.attn_mask = None
    cad.attn_state = AscendAttentionState.ChunkedPrefill
    return num_query, slots.sample_indices.to(torch.int32), cad, None
