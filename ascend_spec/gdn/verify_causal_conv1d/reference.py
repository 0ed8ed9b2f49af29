"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.gdn.verify_causal_conv1d` and its flushes.

Each tap of each token reads either a token of its row or the row's committed state (the last W-1 entries of
pool state ++ recorded inputs): one depthwise conv over every row at once, in cache-sized channel blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ascend_spec.gdn.protocol import KernelMode, owned_slots
from ascend_spec.gdn.verify_causal_conv1d import CausalConv1dArgs, ConvRecords

# The reference's conv works in channel blocks whose fp32 working set stays about 2 MiB (cache-sized), at least
# 256 channels so short batches do not pay a Python iteration per few channels.
_REFERENCE_BLOCK_BYTES = 2 << 20
_REFERENCE_MIN_CHANNEL_BLOCK = 256


def verify_causal_conv1d(args: CausalConv1dArgs, out: torch.Tensor | None) -> None:
    """A verify call (``y`` into ``out``) or a flush (``KernelMode.FLUSH`` / ``FLUSH_AND_RESET``)."""
    if args.mode == KernelMode.VERIFY:
        assert (
            out is not None and args.x is not None and args.weight is not None and args.cu_seqlens is not None
        )
        _verify(
            args.x, args.weight, args.bias, args.cu_seqlens, args.conv_state_pool, args.state_indices,
            args.records, args.pending, args.silu, out,
        )  # fmt: skip
        return
    _flush(
        args.conv_state_pool,
        args.state_indices,
        args.records,
        args.pending,
        args.mode == KernelMode.FLUSH_AND_RESET,
    )


def _committed_states(
    pool: torch.Tensor, slot: torch.Tensor, records: ConvRecords, pending: torch.Tensor
) -> torch.Tensor:
    """``[B, W-1, C]`` fp32: last W-1 of (pool[slot] ++ recorded x[:p]), p clamped to what each slot recorded.

    Entry k is element p+k of that concatenation: the pool's column p+k while p+k < W-1, else recorded token
    p+k-(W-1). Built with index_select (CPU advanced indexing opens an OpenMP region even for small tensors).
    """
    wm1, num_rows = pool.shape[2], slot.shape[0]
    max_len = records.max_tokens_per_step
    recorded = records.num_recorded.index_select(0, slot).long().clamp(max=max_len)
    p = torch.minimum(pending.long().clamp(min=0), recorded)
    q = p[:, None] + torch.arange(wm1, device=pool.device)[None, :]  # [B, W-1]
    old = pool.index_select(0, slot).transpose(1, 2).to(torch.float32)  # [B, W-1, C]
    from_pool = torch.gather(old, 1, q.clamp(max=wm1 - 1)[:, :, None].expand(-1, -1, old.shape[2]))
    rec_row = slot[:, None] * max_len + (q - wm1).clamp(0, max_len - 1)
    flat = records.x.view(-1, records.channels)
    from_rec = flat.index_select(0, rec_row.reshape(-1)).view(num_rows, wm1, flat.shape[1]).to(torch.float32)
    return torch.where((q < wm1)[:, :, None], from_pool, from_rec)


def _verify(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    silu: bool,
    y: torch.Tensor,
) -> None:
    """Each tap of each token reads either a token of its row or the row's committed state."""
    device = x.device
    num_tokens, channels = x.shape
    wm1 = weight.shape[1] - 1
    cu = cu_seqlens.long().clamp(0, num_tokens)  # checks off: rows never reach outside the T tokens
    lens = cu[1:] - cu[:-1]
    valid, slot = owned_slots(state_indices, pool.shape[0])
    active = valid & (lens > 0)
    committed = _committed_states(pool, slot, records, pending)  # [B, W-1, C] fp32

    # One depthwise conv over every row at once: row b's committed state (W-1 columns) then its tokens, rows back
    # to back, so each token's window spans only its own row; outputs whose window straddles two rows are dropped.
    tok = torch.arange(num_tokens, device=device)
    # Tokens past cu_seqlens[-1] (checks off) get row B: a virtual padding row, so their outputs are zeros.
    # searchsorted, not repeat_interleave (OpenMP on CPU)
    row_of_token = torch.searchsorted(cu[1:].contiguous(), tok, right=True)
    local = tok - cu.index_select(0, row_of_token)
    num_rows = slot.shape[0]
    row_start = cu[:-1] + torch.arange(num_rows, device=device) * wm1  # where row b's state columns begin
    state_at = (row_start[:, None] + torch.arange(wm1, device=device)).reshape(-1)
    before = tok < cu[0]  # checks off: tokens before the first row fill the free columns [0, cu[0])
    token_at = torch.where(before, tok, tok + (row_of_token + 1) * wm1)
    covered = torch.cat((valid, valid.new_zeros(1)))  # row B: tokens no row covers
    keep = (covered.index_select(0, row_of_token) & ~before)[:, None]  # padding rows output zeros
    active_of = torch.cat((active, active.new_zeros(1)))
    slot_of = torch.cat((slot, slot.new_zeros(1)))
    w32 = weight.to(torch.float32).unsqueeze(1)
    b32 = None if bias is None else bias.to(torch.float32)
    # Channel blocks keep each block's working set cache-sized; a Python loop over blocks, never over tokens.
    seq_len = num_tokens + (num_rows + 1) * wm1  # + the virtual row B
    block = max(_REFERENCE_MIN_CHANNEL_BLOCK, _REFERENCE_BLOCK_BYTES // (4 * max(seq_len, 1)))
    for c0 in range(0, channels if num_tokens else 0, block):
        c1 = min(c0 + block, channels)
        seq = torch.empty(seq_len, c1 - c0, dtype=torch.float32, device=device)
        seq.index_copy_(0, state_at, committed[:, :, c0:c1].reshape(-1, c1 - c0))
        seq.index_copy_(0, token_at, x[:, c0:c1].to(torch.float32))
        bias_c = None if b32 is None else b32[c0:c1]
        conv = F.conv1d(seq.t().unsqueeze(0), w32[c0:c1], bias_c, groups=c1 - c0)
        out = conv.squeeze(0).t().index_select(0, (token_at - wm1).clamp(min=0))  # [T, block]
        if silu:
            out = F.silu(out)
        y[:, c0:c1] = torch.where(keep, out, torch.zeros((), device=device))

    # Writes: committed state once per active row; this call's inputs as the slot's new records.
    rows = active.nonzero().squeeze(1)
    slots = slot.index_select(0, rows)
    pool.index_copy_(0, slots, committed.index_select(0, rows).transpose(1, 2).to(pool.dtype))
    cap = records.max_tokens_per_step  # checks off: nothing past the capacity is recorded (outputs complete)
    toks = (active_of.index_select(0, row_of_token) & (local < cap) & (local >= 0)).nonzero().squeeze(1)
    dest = slot_of.index_select(0, row_of_token.index_select(0, toks)) * records.max_tokens_per_step
    records.x.view(-1, channels).index_copy_(
        0, dest + local.index_select(0, toks), x.index_select(0, toks).to(records.x.dtype)
    )
    records.num_recorded.index_copy_(0, slots, lens.index_select(0, rows).clamp(max=cap).to(torch.int32))


def _flush(
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    reset_pending: bool,
) -> None:
    owned, slot = owned_slots(state_indices, pool.shape[0])
    valid = owned.nonzero().squeeze(1)
    rows = (owned & (pending > 0)).nonzero().squeeze(1)
    slots = slot.index_select(0, rows)
    committed = _committed_states(pool, slots, records, pending.index_select(0, rows))
    pool.index_copy_(0, slots, committed.transpose(1, 2).to(pool.dtype))
    records.num_recorded.index_fill_(0, slot.index_select(0, valid), 0)
    if reset_pending:
        pending.zero_()
