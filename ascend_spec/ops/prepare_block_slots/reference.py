"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.ops.prepare_block_slots`.

Query and context tokens share one slot lookup; no per-request loop. Writes every output into ``out``.
"""

from __future__ import annotations

import torch

from ascend_spec.ops.prepare_block_slots import BlockSlots, BlockSlotsArgs


def _slots(
    table: torch.Tensor, num_pages: int, row_base: torch.Tensor, pos: torch.Tensor, bs: int
) -> torch.Tensor:
    """slot = block_table[row, pos // bs] * bs + pos % bs, or -1 where the position cannot be placed.

    ``table`` is the flattened block table and ``row_base = row * num_pages``. Lookups use ``index_select``:
    CPU advanced indexing and ``repeat_interleave`` open an OpenMP region even for a few thousand elements,
    which costs milliseconds on a loaded host.
    """
    if num_pages == 0:
        return torch.full_like(pos, -1)
    page_idx = torch.div(pos, bs, rounding_mode="floor")  # negative positions give negative page indices
    clamped = page_idx.clamp(0, num_pages - 1)
    page = table.index_select(0, row_base + clamped).to(torch.int64)
    ok = (clamped == page_idx) & (page >= 0)
    return torch.where(ok, page * bs + (pos - page_idx * bs), -1)


def prepare_block_slots(args: BlockSlotsArgs, out: BlockSlots) -> None:
    """Query and context tokens share one slot lookup: the B*Q query tokens first, then the context tokens."""
    dev = args.anchor_positions.device
    b, r, q = args.num_reqs, args.num_padded_reqs, args.num_query_tokens
    i = torch.arange(q, device=dev)
    reqs = torch.arange(b, device=dev)
    p = args.anchor_positions
    rope = p if args.rope_positions is None else args.rope_positions  # [B] or [3, B]
    num_pages = args.block_table.shape[1]
    total = args.total_context

    row_base = (reqs * num_pages)[:, None].expand(b, q).reshape(-1)
    pos = (p[:, None] + i).reshape(-1)
    if total:
        ends = out.context_start_loc[1:].to(torch.int64)
        # request of each context token: how many requests 1..B-1 start at or before it
        req = torch.cumsum(torch.bincount(ends[: b - 1], minlength=total + 1)[:total], 0)
        back = ends.index_select(0, req) - torch.arange(total, device=dev)  # n_b - j, in 1..n_b
        row_base = torch.cat([row_base, req * num_pages])
        pos = torch.cat([pos, p.index_select(0, req) - back])
        out.context_positions.copy_(rope.index_select(-1, req) - back)
    slots = _slots(args.block_table.reshape(-1), num_pages, row_base, pos, args.block_size)

    ids = out.input_ids.view(r, q)
    ids.fill_(args.mask_token_id)
    ids[:b, 0] = args.anchor_token_ids
    positions = out.positions.view(*rope.shape[:-1], r, q)
    positions.zero_()
    positions[..., :b, :] = rope[..., None] + i
    out.slot_mapping.fill_(-1)
    out.slot_mapping[: b * q] = slots[: b * q]
    out.context_slot_mapping.copy_(slots[b * q :])
    out.seq_lens.zero_()
    out.seq_lens[:b] = p + q
    torch.arange(0, (r + 1) * q, q, out=out.query_start_loc)
    first = 0 if args.sample_from_anchor else 1
    out.sample_indices.copy_((reqs[:, None] * q + i[first:]).reshape(-1))
