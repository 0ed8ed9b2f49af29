"""The deferred-commit protocol shared by the GDN and conv layers: argument checks both ops run the same way.

Both :mod:`ascend_spec.gdn.verify_gated_delta_rule` and :mod:`ascend_spec.gdn.verify_causal_conv1d` take per call ``state_indices [B]``
(-1 = padding row) and ``pending [B]`` int32 (tokens of the slot's last verify call to commit now), and keep
``num_recorded [S]`` per state slot. The checks below are the parts of that contract the two ops state
identically (one place, one error text); what differs between them (record layouts, the cu_seqlens capacity
rule) stays in each op's module.
"""

from __future__ import annotations

import enum

import torch

from ascend_spec.backend import value_checks_enabled
from ascend_spec.checks import INDEX_DTYPES, check_tensor


class KernelMode(enum.IntEnum):
    """What one call of a GDN or conv kernel pair does (csrc/kernels/kernel_modes.h holds the same values)."""

    VERIFY = 0  # commit pending records, run this call's tokens, record them
    FLUSH = 1  # commit pending records only; num_recorded = 0
    FLUSH_AND_RESET = 2  # FLUSH, then zero pending (the conv kernel; the GDN flush zeroes it in Python)


def check_rows(state_indices: object, pending: object, device: torch.device) -> int:
    """Shape/dtype/device of ``state_indices [B]`` and ``pending [B]`` int32; returns B."""
    check_tensor("state_indices", state_indices, ndim=1, dtypes=INDEX_DTYPES, device=device)
    check_tensor("pending", pending, ndim=1, dtypes=(torch.int32,), device=device)
    if pending.shape[0] != state_indices.shape[0]:
        raise ValueError(
            f"pending must have one entry per state_indices row ({state_indices.shape[0]}); "
            f"got shape {list(pending.shape)}"
        )
    return state_indices.shape[0]


def check_slot_values(state_indices: torch.Tensor, num_slots: int) -> None:
    """Value check (host sync): every slot in [-1, S) and no slot used by two rows (their writes would race)."""
    bad = (state_indices < -1) | (state_indices >= num_slots)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"state_indices[{i}] = {int(state_indices[i])} is out of range [-1, {num_slots}) (-1 = padding)"
        )
    used = state_indices[state_indices >= 0]
    if used.numel() != torch.unique(used).numel():
        raise ValueError(f"state_indices must not repeat a state slot; got {state_indices.tolist()}")


def check_pending_recorded(
    state_indices: torch.Tensor, pending: torch.Tensor, num_recorded: torch.Tensor, rows: torch.Tensor
) -> None:
    """Value check (host sync): on ``rows`` (bool [B]) with a slot, pending <= what the slot recorded.

    The kernels clamp to ``num_recorded`` anyway (never reading stale records); this turns a caller's
    bookkeeping error into a ValueError instead of a silently shorter commit.
    """
    recorded = num_recorded[state_indices.clamp(min=0).long()]
    over = rows & (state_indices >= 0) & (pending > recorded)
    if bool(over.any()):
        i = int(over.nonzero()[0, 0])
        raise ValueError(
            f"pending[{i}] = {int(pending[i])} exceeds the {int(recorded[i])} tokens recorded for state slot "
            f"{int(state_indices[i])} by its last verify call"
        )


def check_row_values(
    state_indices: torch.Tensor,
    pending: torch.Tensor,
    num_slots: int,
    num_recorded: torch.Tensor,
    rows: torch.Tensor,
) -> None:
    """Value checks (host sync): slots in [-1, S) and distinct, 0 <= pending <= recorded on ``rows`` (bool [B])."""
    check_slot_values(state_indices, num_slots)
    if bool((pending < 0).any()):
        i = int((pending < 0).nonzero()[0, 0])
        raise ValueError(f"pending must be >= 0; got pending[{i}] = {int(pending[i])}")
    check_pending_recorded(state_indices, pending, num_recorded, rows)


def owned_slots(state_indices: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(valid [B] bool, slot [B] int64)``: rows whose index is a slot in ``[0, S)``, and each row's slot with 0
    elsewhere (safe to gather with). With value checks off an index outside ``[-1, S)`` is a padding row on every
    backend: nothing is read or written for it and its outputs are zeros (no sync: device ops only)."""
    slot = state_indices.long()
    valid = (slot >= 0) & (slot < num_slots)
    return valid, torch.where(valid, slot, torch.zeros((), dtype=torch.long, device=slot.device))


def uniform_row_length(
    cu_seqlens: torch.Tensor, state_indices: torch.Tensor, num_tokens: int, num_slots: int
) -> int:
    """``L > 0`` when every row owns a slot in ``[0, S)`` and the rows hold ``L`` tokens each, back to back over
    all ``T`` tokens (a fixed-K verify step); else 0. The references' fast path for that case views the tokens as
    ``[B, L]`` instead of gathering them. Reads values on the host: CPU tensors only (0 elsewhere, no sync)."""
    num_rows = state_indices.shape[0]
    if cu_seqlens.device.type != "cpu" or num_rows == 0 or num_tokens == 0 or num_tokens % num_rows:
        return 0
    length = num_tokens // num_rows
    if cu_seqlens.tolist() != list(range(0, num_tokens + 1, length)):
        return 0
    low, high = torch.aminmax(state_indices)
    return length if int(low) >= 0 and int(high) < num_slots else 0


def check_reset_pending(reset_pending: object) -> None:
    """The flushes' ``reset_pending`` flag must be a real bool (a tensor or int would be a caller bug)."""
    if not isinstance(reset_pending, bool):
        raise ValueError(f"reset_pending must be a bool; got {reset_pending!r}")


def padded_slots_int32(state_indices: torch.Tensor, num_slots: int) -> torch.Tensor:
    """Contiguous int32 state indices for kernels that read int32, every index outside ``[0, S)`` as -1 (padding):
    an int64 index past int32 must not wrap into a real slot (device ops only, no sync)."""
    valid, _ = owned_slots(state_indices, num_slots)
    return torch.where(valid, state_indices, -1).to(torch.int32).contiguous()


def check_flush(
    state_indices: object, pending: object, num_slots: int, num_recorded: torch.Tensor, reset_pending: object
) -> None:
    """The checks every layer's flush makes: rows, the flag and, when value checks run, the rows' values."""
    device = num_recorded.device
    check_rows(state_indices, pending, device)
    check_reset_pending(reset_pending)
    if value_checks_enabled(device):
        rows = torch.ones_like(pending, dtype=torch.bool)
        check_row_values(state_indices, pending, num_slots, num_recorded, rows)
