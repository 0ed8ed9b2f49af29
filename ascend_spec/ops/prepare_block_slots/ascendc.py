"""AscendC backend of :func:`ascend_spec.ops.prepare_block_slots`: the compiled NPU op, or the same kernel source
under the host model on CPU tensors.

Kernel: ``csrc/kernels/prepare_block_slots.cpp``, arguments ``PrepareBlockSlotsArgs`` in
``prepare_block_slots_tiling.h`` (mirrored here by :data:`KernelArgs`); NPU binding:
``torch.ops._C_ascend_spec.npu_prepare_block_slots`` (``csrc/torch_binding.cpp``, with a Meta implementation for
graph capture), which allocates its outputs: on the NPU they are copied into ``out``.
"""

from __future__ import annotations

import torch

from ascend_spec.ascendc import host_model, npu_op
from ascend_spec.ascendc.cost_model import Minimum, instructions_of, repeats_of
from ascend_spec.ops.prepare_block_slots import BlockSlots, BlockSlotsArgs

KERNEL = "prepare_block_slots"
_INPUTS = ("anchorIds", "anchorPos", "ropePos", "blockTable", "ctxStart")
_OUTPUTS = (
    "inputIds", "positions", "slotMapping", "queryStartLoc", "seqLens", "sampleIndices", "ctxSlots", "ctxPositions",
)  # fmt: skip
_OUT_FIELDS = (
    "input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "sample_indices",
    "context_slot_mapping", "context_positions",
)  # fmt: skip
KernelArgs = host_model.arguments_struct(
    "PrepareBlockSlotsArgs",
    pointers=(*_INPUTS, *_OUTPUTS),
    ints=(
        "idsAreInt64", "numReqs", "numPaddedReqs", "numQueryTokens", "blockSize", "maxPages", "ropeRows",
        "sampleFromAnchor", "maskTokenId", "totalContext",
    ),
)  # fmt: skip


def prepare_block_slots(args: BlockSlotsArgs, out: BlockSlots) -> None:
    """Writes every output but ``context_start_loc`` (filled by the public op, read by the kernel)."""
    table = args.block_table.contiguous()
    rope = args.rope_positions
    if args.anchor_positions.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        outs = npu_op("npu_prepare_block_slots", KERNEL)(
            args.anchor_token_ids, args.anchor_positions, rope, table, out.context_start_loc, args.total_context,
            args.block_size, args.num_query_tokens, args.mask_token_id, args.sample_from_anchor,
            args.num_padded_reqs,
        )  # fmt: skip
        for name, t in zip(_OUT_FIELDS, outs):
            getattr(out, name).copy_(t)
        return
    inputs = [args.anchor_token_ids, args.anchor_positions, rope, table, out.context_start_loc]
    outputs = [getattr(out, name) for name in _OUT_FIELDS]
    ptr = host_model.tensor_ptr
    kernel_args = KernelArgs(
        *(ptr(t) for t in inputs + outputs),
        args.anchor_token_ids.dtype == torch.int64, args.num_reqs, args.num_padded_reqs, args.num_query_tokens,
        args.block_size, table.shape[1], 0 if rope is None else rope.dim() * 2 - 1, args.sample_from_anchor,
        args.mask_token_id, args.total_context,
    )  # fmt: skip
    tensors = [t for t in inputs + outputs if t is not None]
    host_model.launch(KERNEL, "prepare_block_slots_host", kernel_args, tensors=tensors)


def instruction_minimum(
    output_elements: list[int], bytes_read: int, bytes_written: int, num_padded_reqs: int
) -> Minimum:
    """Write every output once, read the inputs once; at least one vector pass over each output array (its
    elements are computed, not copied)."""
    repeats = [repeats_of(n) for n in output_elements]
    return Minimum(
        gm_read_bytes=bytes_read, gm_write_bytes=bytes_written, vector_repeats=sum(repeats),
        vector_instructions=sum(instructions_of(r) for r in repeats), parallel_units=max(1, num_padded_reqs),
    )  # fmt: skip


# docs/host_model.md, "Cost model": measured ratios to instruction_minimum this kernel must stay within
# (tests/test_kernel_cost_bounds.py).
VECTOR_INSTRUCTION_RATIO_BOUND = 0
TIME_RATIO_BOUND = 350
