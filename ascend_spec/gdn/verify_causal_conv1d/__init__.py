"""Causal conv1d verification with deferred commit: one conv state slot per request, ragged draft lengths.

The short causal conv in front of a Gated DeltaNet layer keeps, per request, the last ``W-1`` inputs as state.
Verifying drafts runs the conv over ``[bonus, d_1 .. d_n]``; only the accepted prefix may enter the state, and
acceptance is known only after sampling. Instead of keeping ``1+K`` states (or a ``W-1+K`` wide state that
every kernel slides), a verify call *records* its inputs per state slot. The caller then sets ``pending[b]`` =
accepted tokens, and the next verify call (or :func:`flush_conv_pending`) commits them: the new state is the
last ``W-1`` entries of ``(pool state ++ recorded x[:pending])``, a pure copy, so the commit is exact in every
dtype.

Protocol (shared with :mod:`ascend_spec.gdn` recurrence, see docs/verify_gated_delta_rule.md):

* ``records`` are keyed by state slot, so batch order may change from step to step.
* ``pending`` is int32 ``[B]`` aligned with this call's ``state_indices``; 0 = nothing pending. Verify never
  modifies it; :func:`flush_conv_pending` zeroes it unless ``reset_pending=False`` (multi-layer callers).
* Rows of length 0 leave state and records untouched; rows with state index -1 (graph padding) write nothing
  and produce zeros.
* Kernels clamp ``pending`` to what is recorded (never reading stale records); with value checks on, a pending
  count above the recorded count is a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, INDEX_DTYPES, check_choice, check_positive_int, check_tensor
from ascend_spec.gdn.protocol import (
    check_pending_recorded,
    check_reset_pending,
    check_rows,
    check_slot_values,
)

ACTIVATIONS = (None, "silu", "swish")

# Record dtypes that hold each input dtype exactly (the commit must be a lossless copy).
_EXACT_HOLDERS = {
    torch.float32: (torch.float32,),
    torch.bfloat16: (torch.bfloat16, torch.float32),
    torch.float16: (torch.float16, torch.float32),
}


@dataclass
class ConvRecords:
    """Per state slot: the inputs of its last verify call (``x [S, L, C]``) and how many were recorded."""

    x: torch.Tensor
    num_recorded: torch.Tensor
    width: int

    @property
    def num_slots(self) -> int:
        return self.x.shape[0]

    @property
    def max_tokens_per_step(self) -> int:
        return self.x.shape[1]

    @property
    def channels(self) -> int:
        return self.x.shape[2]

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def nbytes(self) -> int:
        return self.x.numel() * self.x.element_size() + self.num_recorded.numel() * 4

    @property
    def bytes_per_slot(self) -> int:
        return self.nbytes // self.num_slots

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.x, self.num_recorded)


# The reference's conv works in channel blocks whose fp32 working set stays about 2 MiB (cache-sized), at least
# 256 channels so short batches do not pay a Python iteration per few channels.
_REFERENCE_BLOCK_BYTES = 2 << 20
_REFERENCE_MIN_CHANNEL_BLOCK = 256


def conv_record_bytes_per_slot(
    max_tokens_per_step: int, channels: int, *, dtype: torch.dtype = torch.bfloat16
) -> int:
    """Bytes :func:`allocate_conv_records` uses per state slot (memory planning without allocating)."""
    return max_tokens_per_step * channels * torch.empty((), dtype=dtype).element_size() + 4


def allocate_conv_records(
    num_slots: int,
    max_tokens_per_step: int,
    channels: int,
    width: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> ConvRecords:
    """Records for ``num_slots`` state slots and up to ``max_tokens_per_step`` tokens per request and call.

    ``dtype`` must hold the conv inputs exactly (bf16 inputs: bf16 or fp32 records; fp32 inputs: fp32).
    Memory: ``num_slots * max_tokens_per_step * channels * dtype size`` plus 4 bytes per slot.
    """
    check_positive_int("num_slots", num_slots)
    check_positive_int("max_tokens_per_step", max_tokens_per_step)
    check_positive_int("channels", channels)
    check_positive_int("width", width, minimum=2)
    check_choice("dtype", dtype, FLOAT_DTYPES)
    x = torch.zeros(num_slots, max_tokens_per_step, channels, dtype=dtype, device=device)
    num_recorded = torch.zeros(num_slots, dtype=torch.int32, device=x.device)
    return ConvRecords(x=x, num_recorded=num_recorded, width=width)


# --------------------------------------------------------------------------------------------------- checks


def _check_records(records: object, pool: torch.Tensor) -> ConvRecords:
    if not isinstance(records, ConvRecords):
        raise ValueError(
            f"records must be a ConvRecords from allocate_conv_records; got {type(records).__name__}"
        )
    num_slots, channels, wm1 = pool.shape
    if records.num_slots != num_slots or records.channels != channels or records.width - 1 != wm1:
        raise ValueError(
            f"records (slots={records.num_slots}, channels={records.channels}, width={records.width}) do not "
            f"match conv_state_pool [S={num_slots}, C={channels}, W-1={wm1}]"
        )
    if records.x.device != pool.device:
        raise ValueError(f"records are on {records.x.device} but conv_state_pool is on {pool.device}")
    nrec = records.num_recorded
    if not records.x.is_contiguous() or nrec.dtype != torch.int32 or tuple(nrec.shape) != (num_slots,):
        raise ValueError(
            "records must come from allocate_conv_records (contiguous x, int32 num_recorded [S]); got x strides "
            f"{records.x.stride()}, num_recorded {nrec.dtype} {list(nrec.shape)}"
        )
    return records


def _check_row_values(
    state_indices: torch.Tensor, pending: torch.Tensor, records: ConvRecords, active: torch.Tensor
) -> None:
    """Value checks (host sync): slots in range and distinct, pending within what each slot recorded."""
    check_slot_values(state_indices, records.num_slots)
    if bool((pending < 0).any()):
        raise ValueError(f"pending must be >= 0; got {pending.tolist()}")
    check_pending_recorded(state_indices, pending, records.num_recorded, active)


def _check_cu_seqlens(
    cu_seqlens: torch.Tensor, num_tokens: int, max_len: int, state_indices: torch.Tensor
) -> None:
    """Value checks (host sync): starts at 0, non-decreasing, ends at T, no recorded row above capacity."""
    if int(cu_seqlens[0]) != 0:
        raise ValueError(f"cu_seqlens must start at 0; got {int(cu_seqlens[0])}")
    lens = cu_seqlens[1:] - cu_seqlens[:-1]
    if bool((lens < 0).any()):
        raise ValueError(f"cu_seqlens must be non-decreasing; got {cu_seqlens.tolist()}")
    if int(cu_seqlens[-1]) != num_tokens:
        raise ValueError(f"cu_seqlens must end at T = {num_tokens} (x rows); got {int(cu_seqlens[-1])}")
    over = (lens > max_len) & (state_indices >= 0)  # padding rows record nothing
    if bool(over.any()):
        i = int(over.nonzero()[0, 0])
        raise ValueError(
            f"cu_seqlens gives row {i} {int(lens[i])} tokens, above the records' "
            f"max_tokens_per_step = {max_len}"
        )


def _validate_pool(conv_state_pool: object, device: torch.device | None = None) -> torch.Tensor:
    pool = check_tensor("conv_state_pool", conv_state_pool, ndim=3, dtypes=FLOAT_DTYPES, device=device)
    if pool.shape[2] < 1:
        raise ValueError(
            f"conv_state_pool must hold W-1 >= 1 inputs per channel; got shape {list(pool.shape)}"
        )
    return pool


# ------------------------------------------------------------------------------------------------ public ops


def verify_causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    cu_seqlens: torch.Tensor,
    conv_state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    activation: str | None = "silu",
    backend: str = "auto",
) -> torch.Tensor:
    """Commit each row's pending tokens into its conv state, then run the causal conv over this call's tokens.

    ``x [T, C]`` holds the rows' tokens back to back (``cu_seqlens [B+1]``); ``weight [C, W]``; ``bias [C]``
    or None. Returns ``y [T, C]`` in ``x``'s dtype (fp32 accumulation). Writes each active row's committed
    state to ``conv_state_pool[state_indices[b]]`` once and records this call's inputs for the next commit.
    """
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    device = x.device
    num_tokens, channels = x.shape
    check_tensor("weight", weight, ndim=2, dtypes=FLOAT_DTYPES, device=device)
    if weight.shape[0] != channels:
        raise ValueError(f"weight must have shape [C={channels}, W]; got {list(weight.shape)}")
    width = weight.shape[1]
    if width < 2:
        raise ValueError(f"weight width W must be >= 2 (the state holds W-1 inputs); got {width}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=FLOAT_DTYPES, device=device, shape=(channels,))
    pool = _validate_pool(conv_state_pool, device)
    if pool.shape[1] != channels or pool.shape[2] != width - 1:
        raise ValueError(
            f"conv_state_pool must have shape [S, C={channels}, W-1={width - 1}]; got {list(pool.shape)}"
        )
    records = _check_records(records, pool)
    if x.dtype not in _EXACT_HOLDERS or records.x.dtype not in _EXACT_HOLDERS[x.dtype]:
        raise ValueError(
            f"records hold {records.x.dtype}, which cannot store x ({x.dtype}) exactly; allocate them with "
            f"allocate_conv_records(..., dtype={x.dtype})"
        )
    check_tensor("cu_seqlens", cu_seqlens, ndim=1, dtypes=INDEX_DTYPES, device=device)
    check_rows(state_indices, pending, device)
    if cu_seqlens.shape[0] != state_indices.shape[0] + 1:
        raise ValueError(
            f"cu_seqlens must have B+1 = {state_indices.shape[0] + 1} entries (B = state_indices rows); "
            f"got {cu_seqlens.shape[0]}"
        )
    check_choice("activation", activation, ACTIVATIONS)
    if value_checks_enabled(device):
        _check_cu_seqlens(cu_seqlens, num_tokens, records.max_tokens_per_step, state_indices)
        active = (cu_seqlens[1:] - cu_seqlens[:-1]) > 0
        _check_row_values(state_indices, pending, records, active)

    silu = activation is not None
    which = resolve_backend(backend, device, op="verify_causal_conv1d")
    if which == "triton":
        from ascend_spec.gdn.verify_causal_conv1d.triton import verify_conv1d_triton

        return verify_conv1d_triton(x, weight, bias, cu_seqlens, pool, state_indices, records, pending, silu)
    if which == "ascendc":
        from ascend_spec.gdn.verify_causal_conv1d.ascendc import verify_conv1d_ascendc

        return verify_conv1d_ascendc(x, weight, bias, cu_seqlens, pool, state_indices, records, pending, silu)
    return _verify_reference(x, weight, bias, cu_seqlens, pool, state_indices, records, pending, silu)


def flush_conv_pending(
    conv_state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    *,
    reset_pending: bool = True,
    backend: str = "auto",
) -> None:
    """Commit every row's pending tokens into its conv state (preemption, finish, prefix caching).

    Rows with state index -1 are skipped. Flushed slots get ``num_recorded = 0`` so the same records can never
    be committed twice; ``pending`` is zeroed unless ``reset_pending=False`` (a multi-layer caller flushes
    every layer's records with the shared ``pending`` and zeroes it once at the end).
    """
    pool = _validate_pool(conv_state_pool)
    device = pool.device
    records = _check_records(records, pool)
    check_rows(state_indices, pending, device)
    check_reset_pending(reset_pending)
    if value_checks_enabled(device):
        _check_row_values(state_indices, pending, records, torch.ones_like(pending, dtype=torch.bool))
    which = resolve_backend(backend, device, op="flush_conv_pending")
    if which == "triton":
        from ascend_spec.gdn.verify_causal_conv1d.triton import flush_conv_triton

        flush_conv_triton(pool, state_indices, records, pending, reset_pending)
    elif which == "ascendc":
        from ascend_spec.gdn.verify_causal_conv1d.ascendc import flush_conv_ascendc

        flush_conv_ascendc(pool, state_indices, records, pending, reset_pending)
    else:
        _flush_reference(pool, state_indices, records, pending, reset_pending)


# ------------------------------------------------------------------------------------------------- reference


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


def _verify_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    silu: bool,
) -> torch.Tensor:
    """Vectorised oracle: each tap of each token reads either a token of its row or the row's committed state."""
    device = x.device
    num_tokens, channels = x.shape
    wm1 = weight.shape[1] - 1
    cu = cu_seqlens.long()
    lens = cu[1:] - cu[:-1]
    slot = state_indices.long()
    active = (slot >= 0) & (lens > 0)
    committed = _committed_states(pool, slot.clamp(min=0), records, pending)  # [B, W-1, C] fp32

    # One depthwise conv over every row at once: row b's committed state (W-1 columns) then its tokens, rows back
    # to back, so each token's window spans only its own row; outputs whose window straddles two rows are dropped.
    tok = torch.arange(num_tokens, device=device)
    row_of_token = torch.searchsorted(cu[1:], tok, right=True)  # no repeat_interleave (OpenMP on CPU)
    local = tok - cu.index_select(0, row_of_token)
    num_rows = slot.shape[0]
    row_start = cu[:-1] + torch.arange(num_rows, device=device) * wm1  # where row b's state columns begin
    state_at = (row_start[:, None] + torch.arange(wm1, device=device)).reshape(-1)
    token_at = tok + (row_of_token + 1) * wm1
    keep = (slot.index_select(0, row_of_token) >= 0)[:, None]  # padding rows output zeros
    y = torch.empty(num_tokens, channels, dtype=x.dtype, device=device)
    w32 = weight.to(torch.float32).unsqueeze(1)
    b32 = None if bias is None else bias.to(torch.float32)
    # Channel blocks keep each block's working set cache-sized; a Python loop over blocks, never over tokens.
    seq_len = num_tokens + num_rows * wm1
    block = max(_REFERENCE_MIN_CHANNEL_BLOCK, _REFERENCE_BLOCK_BYTES // (4 * max(seq_len, 1)))
    for c0 in range(0, channels if num_tokens else 0, block):
        c1 = min(c0 + block, channels)
        seq = torch.empty(seq_len, c1 - c0, dtype=torch.float32, device=device)
        seq.index_copy_(0, state_at, committed[:, :, c0:c1].reshape(-1, c1 - c0))
        seq.index_copy_(0, token_at, x[:, c0:c1].to(torch.float32))
        bias_c = None if b32 is None else b32[c0:c1]
        conv = F.conv1d(seq.t().unsqueeze(0), w32[c0:c1], bias_c, groups=c1 - c0)
        out = conv.squeeze(0).t().index_select(0, token_at - wm1)  # [T, block]
        if silu:
            out = F.silu(out)
        y[:, c0:c1] = torch.where(keep, out, torch.zeros((), device=device))

    # Writes: committed state once per active row; this call's inputs as the slot's new records.
    rows = active.nonzero().squeeze(1)
    slots = slot.index_select(0, rows)
    pool.index_copy_(0, slots, committed.index_select(0, rows).transpose(1, 2).to(pool.dtype))
    cap = records.max_tokens_per_step  # checks off: nothing past the capacity is recorded (outputs complete)
    toks = (active.index_select(0, row_of_token) & (local < cap)).nonzero().squeeze(1)
    dest = slot.index_select(0, row_of_token.index_select(0, toks)) * records.max_tokens_per_step
    records.x.view(-1, channels).index_copy_(
        0, dest + local.index_select(0, toks), x.index_select(0, toks).to(records.x.dtype)
    )
    records.num_recorded.index_copy_(0, slots, lens.index_select(0, rows).clamp(max=cap).to(torch.int32))
    return y


def _flush_reference(
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: ConvRecords,
    pending: torch.Tensor,
    reset_pending: bool,
) -> None:
    slot = state_indices.long()
    valid = (slot >= 0).nonzero().squeeze(1)
    rows = ((slot >= 0) & (pending > 0)).nonzero().squeeze(1)
    slots = slot.index_select(0, rows)
    committed = _committed_states(pool, slots, records, pending.index_select(0, rows))
    pool.index_copy_(0, slots, committed.transpose(1, 2).to(pool.dtype))
    records.num_recorded.index_fill_(0, slot.index_select(0, valid), 0)
    if reset_pending:
        pending.zero_()
