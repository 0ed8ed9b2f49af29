"""Causal conv1d verification with deferred commit: one conv state slot per request, ragged draft lengths.

The short causal conv in front of a Gated DeltaNet layer keeps, per request, the last ``W-1`` inputs as state.
Verifying drafts runs the conv over ``[bonus, d_1 .. d_n]``; only the accepted prefix may enter the state, and
acceptance is known only after sampling. Instead of keeping ``1+K`` states (or a ``W-1+K`` wide state that
every kernel slides), a verify call *records* its inputs per state slot. The caller then sets ``pending[b]`` =
accepted tokens, and the next verify call (or :func:`flush_conv_pending`) commits them: the new state is the
last ``W-1`` entries of ``(pool state ++ recorded x[:pending])``, a pure copy, so the commit is exact in every
dtype.

Protocol (shared with the GDN recurrence :mod:`ascend_spec.gdn.verify_gated_delta_rule`; docs/verify_gated_delta_rule.md):

* ``records`` are keyed by state slot, so batch order may change from step to step.
* ``pending`` is int32 ``[B]`` aligned with this call's ``state_indices``; 0 = nothing pending. Verify never
  modifies it; :func:`flush_conv_pending` zeroes it unless ``reset_pending=False`` (multi-layer callers).
* Rows of length 0 leave state and records untouched; rows with state index -1 (graph padding) write nothing
  and produce zeros.
* Kernels clamp ``pending`` to what is recorded (never reading stale records); with value checks on, a pending
  count above the recorded count is a ValueError.

This package holds the contract (:class:`ConvRecords`, :class:`CausalConv1dArgs`), the checks and the dispatch;
``reference.py``, ``triton.py`` and ``ascendc.py`` implement every call as ``verify_causal_conv1d(args, out)``
(``args.mode`` says verify, flush, or flush and reset). Design and measurements: docs/verify_causal_conv1d.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_spec.backend import dispatch, value_checks_enabled
from ascend_spec.checks import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_choice,
    check_int,
    check_out_tensor,
    check_tensor,
)
from ascend_spec.gdn.protocol import (
    KernelMode,
    check_flush,
    check_row_values,
    check_rows,
)

OP = "verify_causal_conv1d"
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


@dataclass(frozen=True)
class CausalConv1dArgs:
    """One call's arguments after checks: what every backend takes, for a verify call and for the flushes (csrc
    mirror: ``VerifyCausalConv1dArgs`` in csrc/kernels/verify_causal_conv1d_tiling.h)."""

    mode: KernelMode
    conv_state_pool: torch.Tensor  # [S, C, W-1]
    state_indices: torch.Tensor  # [B] int32/int64, -1 = padding row
    records: ConvRecords
    pending: torch.Tensor  # [B] int32
    x: torch.Tensor | None = None  # [T, C] (None in the flushes, as are weight, bias, cu_seqlens)
    weight: torch.Tensor | None = None  # [C, W]
    bias: torch.Tensor | None = None  # [C] or None
    cu_seqlens: torch.Tensor | None = None  # [B+1]
    silu: bool = False

    @property
    def width(self) -> int:
        return self.conv_state_pool.shape[2] + 1


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
    num_slots = check_int("num_slots", num_slots, minimum=1)
    max_tokens_per_step = check_int("max_tokens_per_step", max_tokens_per_step, minimum=1)
    channels = check_int("channels", channels, minimum=1)
    width = check_int("width", width, minimum=2)
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
    if (
        not records.x.is_contiguous()
        or not nrec.is_contiguous()
        or nrec.dtype != torch.int32
        or tuple(nrec.shape) != (num_slots,)
    ):
        raise ValueError(
            "records must come from allocate_conv_records (contiguous x, contiguous int32 num_recorded [S]); got "
            f"x strides {records.x.stride()}, num_recorded {nrec.dtype} {list(nrec.shape)} strides {nrec.stride()}"
        )
    return records


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
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Commit each row's pending tokens into its conv state, then run the causal conv over this call's tokens.

    ``x [T, C]`` holds the rows' tokens back to back (``cu_seqlens [B+1]``); ``weight [C, W]``; ``bias [C]``
    or None. Returns ``y [T, C]`` in ``x``'s dtype (fp32 accumulation). Writes each active row's committed
    state to ``conv_state_pool[state_indices[b]]`` once and records this call's inputs for the next commit.
    ``out`` (contiguous, x's shape and dtype) receives ``y`` when given.
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
        check_row_values(state_indices, pending, records.num_slots, records.num_recorded, active)

    run = dispatch(OP, backend, device)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=device)
    else:
        check_out_tensor(out, tuple(x.shape), x.dtype, device)
    args = CausalConv1dArgs(
        KernelMode.VERIFY, pool, state_indices, records, pending, x=x, weight=weight, bias=bias,
        cu_seqlens=cu_seqlens, silu=activation is not None,
    )  # fmt: skip
    run(args, out)
    return out


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
    check_flush(state_indices, pending, records.num_slots, records.num_recorded, reset_pending)
    run = dispatch(OP, backend, device, caller="flush_conv_pending")
    mode = KernelMode.FLUSH_AND_RESET if reset_pending else KernelMode.FLUSH
    run(CausalConv1dArgs(mode, pool, state_indices, records, pending), None)
