"""Triton backend of :func:`ascend_spec.ops.prepare_block_slots`: one launch, one program per padded request.

Program ``r`` writes the Q query rows of request ``r`` (ids, rope positions on every rope row, slots),
``seq_lens[r]``, ``query_start_loc[r + 1]`` (program 0 also the leading 0), its ``sample_indices`` and, for
real requests, its context tokens' slots and rope positions in chunks of ``BLOCK_C`` (a context can be a whole
prompt after prefill, so its length is a runtime loop bound). The context prefix sums are computed before the
launch: they size the outputs. Imported lazily: ``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ascend_spec.ops.prepare_block_slots import BlockSlots, BlockSlotsArgs

_BLOCK_C = 64


@triton.jit
def _place(table_row_ptr, table_col_stride, pos, num_pages, block_size, mask):
    """Slot of each logical position, -1 where it is negative, past the table or on a negative page id."""
    safe = tl.maximum(pos, 0)
    page_idx = safe // block_size
    ok = mask & (pos >= 0) & (page_idx < num_pages)
    page = tl.load(table_row_ptr + page_idx * table_col_stride, mask=ok, other=-1).to(tl.int64)
    ok = ok & (page >= 0)
    return tl.where(ok, page * block_size + safe % block_size, -1)


@triton.jit
def _prepare_block_slots_kernel(
    ids_ptr,
    pos_ptr,
    rope_ptr,
    table_ptr,
    ctx_len_ptr,
    ctx_start_ptr,
    out_ids_ptr,
    out_pos_ptr,
    out_slot_ptr,
    out_qsl_ptr,
    out_seq_ptr,
    out_sample_ptr,
    out_ctx_slot_ptr,
    out_ctx_pos_ptr,
    num_reqs,
    num_pages,
    table_stride,
    table_col_stride,
    rope_stride,
    pos_stride,
    ctx_pos_stride,
    block_size,
    mask_token_id,
    Q: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    ROPE_ROWS: tl.constexpr,
    HAS_ROPE: tl.constexpr,
    HAS_CTX: tl.constexpr,
    SAMPLE_FROM_ANCHOR: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK_Q)
    qmask = offs < Q
    rows = r * Q + offs
    tl.store(out_qsl_ptr + r + 1, (r + 1) * Q)
    if r == 0:
        tl.store(out_qsl_ptr, 0)
    if r < num_reqs:
        p = tl.load(pos_ptr + r).to(tl.int64)
        anchor = tl.load(ids_ptr + r)
        ids = tl.where(offs == 0, anchor, tl.full([BLOCK_Q], mask_token_id, anchor.dtype))
        tl.store(out_ids_ptr + rows, ids, mask=qmask)
        table_row = table_ptr + r.to(tl.int64) * table_stride
        slots = _place(table_row, table_col_stride, p + offs, num_pages, block_size, qmask)
        tl.store(out_slot_ptr + rows, slots, mask=qmask)
        tl.store(out_seq_ptr + r, (p + Q).to(tl.int32))
        if SAMPLE_FROM_ANCHOR:
            tl.store(out_sample_ptr + r * Q + offs, (rows).to(tl.int64), mask=qmask)
        else:
            tl.store(out_sample_ptr + r * (Q - 1) + offs, (rows + 1).to(tl.int64), mask=offs < Q - 1)
        if HAS_CTX:
            n = tl.maximum(tl.load(ctx_len_ptr + r).to(tl.int64), 0)
            start = tl.load(ctx_start_ptr + r).to(tl.int64)
        for k in tl.static_range(ROPE_ROWS):
            base = tl.load(rope_ptr + k * rope_stride + r).to(tl.int64) if HAS_ROPE else p
            tl.store(out_pos_ptr + k * pos_stride + rows, base + offs, mask=qmask)
            if HAS_CTX:
                for c in range(0, n, BLOCK_C):
                    j = c + tl.arange(0, BLOCK_C)
                    tl.store(out_ctx_pos_ptr + k * ctx_pos_stride + start + j, base - n + j, mask=j < n)
        if HAS_CTX:
            for c in range(0, n, BLOCK_C):
                j = c + tl.arange(0, BLOCK_C)
                cmask = j < n
                ctx_slots = _place(table_row, table_col_stride, p - n + j, num_pages, block_size, cmask)
                tl.store(out_ctx_slot_ptr + start + j, ctx_slots, mask=cmask)
    else:
        pad_ids = tl.full([BLOCK_Q], mask_token_id, out_ids_ptr.dtype.element_ty)
        tl.store(out_ids_ptr + rows, pad_ids, mask=qmask)
        tl.store(out_slot_ptr + rows, tl.full([BLOCK_Q], -1, tl.int64), mask=qmask)
        tl.store(out_seq_ptr + r, 0)
        for k in tl.static_range(ROPE_ROWS):
            tl.store(out_pos_ptr + k * pos_stride + rows, tl.zeros([BLOCK_Q], tl.int64), mask=qmask)


def prepare_block_slots(args: BlockSlotsArgs, out: BlockSlots) -> None:
    """One launch of R programs writing every output but ``context_start_loc`` (filled by the public op)."""
    b, r, q = args.num_reqs, args.num_padded_reqs, args.num_query_tokens
    rope = args.rope_positions
    has_rope = rope is not None
    has_ctx = args.total_context > 0
    _prepare_block_slots_kernel[(r,)](
        args.anchor_token_ids,
        args.anchor_positions,
        rope if has_rope else args.anchor_positions,
        args.block_table,
        args.context_lens if has_ctx else args.anchor_positions,
        out.context_start_loc,
        out.input_ids,
        out.positions,
        out.slot_mapping,
        out.query_start_loc,
        out.seq_lens,
        out.sample_indices,
        out.context_slot_mapping,
        out.context_positions,
        b,
        args.block_table.shape[1],
        args.block_table.stride(0),
        args.block_table.stride(1),
        rope.stride(0) if args.mrope else 0,
        r * q,
        args.total_context,
        args.block_size,
        args.mask_token_id,
        Q=q,
        BLOCK_Q=triton.next_power_of_2(q),
        ROPE_ROWS=3 if args.mrope else 1,
        HAS_ROPE=has_rope,
        HAS_CTX=has_ctx,
        SAMPLE_FROM_ANCHOR=args.sample_from_anchor,
        BLOCK_C=_BLOCK_C,
    )
