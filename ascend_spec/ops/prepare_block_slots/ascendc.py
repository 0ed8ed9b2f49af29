"""AscendC path of prepare_block_slots: the compiled NPU op, or the same kernel source under the host model.

Kernel: ``csrc/kernels/prepare_block_slots.cpp``; NPU binding:
``torch.ops._C_ascend_spec.npu_prepare_block_slots`` (``csrc/torch_binding.cpp``, with a Meta implementation
for graph capture).
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ops.prepare_block_slots import BlockSlots, context_start_loc_and_total, empty_block_slots


def prepare_block_slots_ascendc(
    *,
    anchor_token_ids: torch.Tensor,
    anchor_positions: torch.Tensor,
    block_table: torch.Tensor,
    rope_positions: torch.Tensor | None,
    context_lens: torch.Tensor | None,
    block_size: int,
    num_query_tokens: int,
    mask_token_id: int,
    sample_from_anchor: bool,
    num_padded_reqs: int,
) -> BlockSlots:
    """Arguments are validated and normalised by :func:`ascend_spec.ops.prepare_block_slots`."""
    dev = anchor_positions.device
    b, r, q = anchor_positions.shape[0], num_padded_reqs, num_query_tokens
    ctx_start, total = context_start_loc_and_total(context_lens, b, dev)
    anchor_token_ids = anchor_token_ids.contiguous()
    anchor_positions = anchor_positions.contiguous()
    block_table = block_table.contiguous()
    rope = None if rope_positions is None else rope_positions.contiguous()
    if dev.type == "npu":  # pragma: no cover - needs CANN and an NPU
        outs = torch.ops._C_ascend_spec.npu_prepare_block_slots(
            anchor_token_ids, anchor_positions, rope, block_table, ctx_start, total,
            block_size, q, mask_token_id, sample_from_anchor, r,
        )  # fmt: skip
        return BlockSlots(*outs[:3], outs[3], outs[4], outs[5], outs[6], outs[7], ctx_start)

    out = empty_block_slots(
        anchor_token_ids, rope, num_padded_reqs=r, num_query_tokens=q, sample_from_anchor=sample_from_anchor,
        context_start_loc=ctx_start, total=total,
    )  # fmt: skip
    if r == 0:
        return out
    rope_rows = 0 if rope is None else (1 if rope.dim() == 1 else 3)
    inputs = [anchor_token_ids, anchor_positions, block_table, ctx_start]
    if rope is not None:
        inputs.append(rope)
    outputs = [
        out.input_ids, out.positions, out.slot_mapping, out.query_start_loc, out.seq_lens, out.sample_indices,
        out.context_slot_mapping, out.context_positions,
    ]  # fmt: skip
    ptr = host_model.tensor_ptr
    args = [
        ctypes.c_bool(anchor_token_ids.dtype == torch.int64),
        ptr(anchor_token_ids), ptr(anchor_positions), ptr(rope), ptr(block_table), ptr(ctx_start),
        *(ptr(t) for t in outputs),
        ctypes.c_int64(b), ctypes.c_int64(r), ctypes.c_int64(q), ctypes.c_int64(block_size),
        ctypes.c_int64(block_table.shape[1]), ctypes.c_int64(rope_rows), ctypes.c_bool(sample_from_anchor),
        ctypes.c_int64(mask_token_id), ctypes.c_int64(total),
    ]  # fmt: skip
    host_model.launch("prepare_block_slots", "prepare_block_slots_host", args, tensors=inputs + outputs)
    return out
