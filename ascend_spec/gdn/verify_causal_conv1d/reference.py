"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.gdn.verify_causal_conv1d` and its flushes.

Each tap of each token reads either a token of its row or the row's committed state (the last W-1 entries of
pool state ++ recorded inputs): one gather of every token's W source rows and a weighted sum over the taps, for
every row at once, in cache-sized channel blocks. It was the CPU engine's verify path before the native kernel
(``cpu.py``): no convolution primitive (a depthwise conv over a few tokens costs more in its setup than in its
arithmetic).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ascend_spec.gdn.protocol import KernelMode, owned_slots, uniform_row_length
from ascend_spec.gdn.verify_causal_conv1d import CausalConv1dArgs, ConvRecords

# The reference works in channel blocks whose fp32 [T, W, block] working set stays about 2 MiB (cache-sized), at
# least 256 channels so short batches do not pay a Python iteration per few channels.
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

    Entry k is element p+k of that concatenation. Built with index_select and gather (CPU advanced indexing opens
    an OpenMP region even for small tensors).
    """
    wm1 = pool.shape[2]
    max_len = records.max_tokens_per_step
    recorded = records.num_recorded.index_select(0, slot).clamp(max=max_len)
    p = torch.minimum(pending.clamp(min=0), recorded).long()
    old = pool.index_select(0, slot).transpose(1, 2).to(torch.float32)  # [B, W-1, C]
    history = torch.cat((old, records.x.index_select(0, slot).to(torch.float32)), dim=1)  # [B, W-1+L, C]
    at = p[:, None] + torch.arange(wm1, device=pool.device)[None, :]  # [B, W-1]
    return torch.gather(history, 1, at[:, :, None].expand(-1, -1, history.shape[2]))


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
    length = uniform_row_length(cu_seqlens, state_indices, num_tokens, pool.shape[0])
    if length:
        slot = state_indices.long()
        committed = _committed_states(pool, slot, records, pending)  # [B, W-1, C] fp32
        _verify_uniform(x, weight, bias, committed, pool, slot, records, silu, y, length)
        return
    width = weight.shape[1]
    wm1 = width - 1
    cu = cu_seqlens.long().clamp(0, num_tokens)  # checks off: rows never reach outside the T tokens
    lens = cu[1:] - cu[:-1]
    valid, slot = owned_slots(state_indices, pool.shape[0])
    active = valid & (lens > 0)
    committed = _committed_states(pool, slot, records, pending)  # [B, W-1, C] fp32
    num_rows = slot.shape[0]

    # Tap j of token t (local index l in row b) reads source row l + j - (W-1) of its row: a token of the row
    # when >= 0, else entry l + j of the row's committed state. Sources: this call's tokens, then every row's
    # W-1 committed entries; one gather of [T, W] source rows per channel block and a weighted sum over taps.
    tok = torch.arange(num_tokens, device=device)
    # Tokens past cu_seqlens[-1] (checks off) get row B: a virtual padding row, so their outputs are zeros.
    # searchsorted, not repeat_interleave (OpenMP on CPU)
    row_of_token = torch.searchsorted(cu[1:].contiguous(), tok, right=True)
    local = tok - cu.index_select(0, row_of_token)
    taps = torch.arange(width, device=device)
    back = local[:, None] + taps[None, :] - wm1  # [T, W]
    state_row = (row_of_token.clamp(max=max(num_rows - 1, 0)) * wm1)[:, None] + local[:, None] + taps[None, :]
    source = torch.where(back >= 0, tok[:, None] + taps[None, :] - wm1, num_tokens + state_row)
    before = tok < cu[0]  # checks off: tokens before the first row read nothing of a row
    covered = torch.cat((valid, valid.new_zeros(1)))  # row B: tokens no row covers
    keep = (covered.index_select(0, row_of_token) & ~before)[:, None]  # padding rows output zeros
    source = torch.where(keep, source, torch.zeros((), dtype=source.dtype, device=device)).reshape(-1)
    active_of = torch.cat((active, active.new_zeros(1)))
    slot_of = torch.cat((slot, slot.new_zeros(1)))
    w_t = weight.to(torch.float32).t()  # [W, C]
    b32 = None if bias is None else bias.to(torch.float32)
    state_flat = committed.reshape(-1, channels)
    # Channel blocks keep each block's [T, W, block] working set cache-sized; a loop over blocks, never tokens.
    block = max(_REFERENCE_MIN_CHANNEL_BLOCK, _REFERENCE_BLOCK_BYTES // (4 * width * max(num_tokens, 1)))
    for c0 in range(0, channels if num_tokens else 0, block):
        c1 = min(c0 + block, channels)
        src = torch.cat((x[:, c0:c1].to(torch.float32), state_flat[:, c0:c1]))
        windows = src.index_select(0, source).view(num_tokens, width, c1 - c0)
        out = (windows * w_t[None, :, c0:c1]).sum(dim=1)
        if b32 is not None:
            out += b32[c0:c1]
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


def _verify_uniform(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    committed: torch.Tensor,
    pool: torch.Tensor,
    slot: torch.Tensor,
    records: ConvRecords,
    silu: bool,
    y: torch.Tensor,
    length: int,
) -> None:
    """A fixed-K step (every row owns its slot, ``length`` tokens each, back to back): the rows as ``[B, L]``,
    each row's committed state then its tokens, and the conv as one multiply-add per tap (no gather, no
    ``[T, W, C]`` window tensor)."""
    num_rows, channels = slot.shape[0], x.shape[1]
    width = weight.shape[1]
    seq = torch.cat((committed, x.view(num_rows, length, channels).to(torch.float32)), dim=1)  # [B, W-1+L, C]
    w_t = weight.to(torch.float32).t()  # [W, C]
    out = seq[:, :length] * w_t[0]
    for j in range(1, width):
        out.addcmul_(seq[:, j : j + length], w_t[j])
    if bias is not None:
        out += bias.to(torch.float32)
    if silu:
        out = F.silu(out)
    y.view(num_rows, length, channels).copy_(out)
    pool.index_copy_(0, slot, committed.transpose(1, 2).to(pool.dtype))
    cap = min(length, records.max_tokens_per_step)  # checks off: nothing past the capacity is recorded
    records.x[slot, :cap] = x.view(num_rows, length, channels)[:, :cap].to(records.x.dtype)
    records.num_recorded.index_fill_(0, slot, cap)


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
