"""Native CPU backend of prepare_block_slots (``csrc/cpu/prepare_block_slots.cpp``).

The engine's drafter runs this op every step; as PyTorch it is ~40 operator calls (~0.1 ms at one request,
more than vLLM's own fused expansion), as one C++ call it costs its few hundred stores. Same tensors as the
reference, written into ``out``.
"""

from __future__ import annotations

from ascend_spec.cpu import native
from ascend_spec.ops.prepare_block_slots import BlockSlots, BlockSlotsArgs

KERNEL = "prepare_block_slots"
Arguments = native.arguments_struct(
    "BlockSlotsArgs",
    (
        "anchor_ids", "anchor_positions", "block_table", "rope", "context_start",
        "input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "sample_indices",
        "context_slot_mapping", "context_positions",
        "num_reqs", "num_padded_reqs", "num_query", "num_pages", "block_size", "mask_token_id",
        "sample_from_anchor", "total_context", "rope_rows", "ids_dtype", "table_s0", "table_s1",
    ),
)  # fmt: skip


def prepare_block_slots(args: BlockSlotsArgs, out: BlockSlots) -> None:
    """Every output of the op into ``out`` (``context_start_loc`` is already written by the op)."""
    ptr = native.ptr
    rope = args.rope_positions
    table = args.block_table
    native.call(
        KERNEL,
        Arguments(
            ptr(args.anchor_token_ids), ptr(args.anchor_positions), ptr(table), ptr(rope), ptr(out.context_start_loc), ptr(out.input_ids), ptr(out.positions), ptr(out.slot_mapping),
            ptr(out.query_start_loc), ptr(out.seq_lens), ptr(out.sample_indices), ptr(out.context_slot_mapping),
            ptr(out.context_positions), args.num_reqs, args.num_padded_reqs, args.num_query_tokens,
            table.shape[1], args.block_size, args.mask_token_id, int(args.sample_from_anchor), args.total_context,
            3 if args.mrope else 1, native.INDEX_CODES[args.anchor_token_ids.dtype], table.stride(0),
            table.stride(1),
        ),
    )  # fmt: skip
