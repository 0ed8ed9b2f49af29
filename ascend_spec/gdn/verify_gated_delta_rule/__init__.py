"""Gated DeltaNet verification over ragged draft lengths with one state slot per request (deferred commit).

A verify call for row ``b`` runs the recurrence (per value head, state ``S [Dk, Dv]`` fp32)::

    S <- exp(g_t) S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = S^T (scale q_t)

over its tokens ``[bonus, d_1 .. d_n]`` starting from the *committed* state, but it does not keep the state of
the verified tokens: acceptance is unknown until after sampling. It records ``(k_t, g_t, u_t)`` per token
(:mod:`ascend_spec.gdn.records`). The caller then sets ``pending[b]`` = accepted tokens of that call, and the
next call of that state slot first replays those records into the state, writes the committed state once and
continues. Per step that is one state read and one state write (none when nothing is pending) plus
``O(tokens x (H Dk + HV Dv))`` record bytes, instead of the ``1 + K`` state slots and ``K + 1`` state writes of a
per-draft-slot layout. :func:`flush_pending` commits without new tokens (preemption, finish, prefix caching).

Protocol (shared with :mod:`ascend_spec.gdn.verify_causal_conv1d`; docs/verify_gated_delta_rule.md):

* ``records`` are keyed by state slot; ``pending`` is int32 ``[B]`` aligned with this call's rows, 0 = nothing
  pending (after a prefill or a flush). Verify never modifies ``pending``; the caller owns it and one tensor
  serves every layer.
* Rows of length 0 leave state and records untouched (their pending stays valid for a later call). Rows with
  state index -1 (graph padding) write no state, no record and no metadata; their outputs are zeros.
* Kernels replay ``min(pending, num_recorded)`` tokens (never stale records); with value checks on, a pending
  count above what the slot recorded is a ValueError, as is any length above the records' capacity.

This package holds the contract (:class:`GatedDeltaRuleArgs`), the checks and the dispatch; ``reference.py``,
``triton.py`` and ``ascendc.py`` implement both calls as ``verify_gated_delta_rule(args, out)`` (``args.mode``
says verify or flush). Design, derivations and measurements: docs/verify_gated_delta_rule.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ascend_spec.backend import dispatch, value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, INDEX_DTYPES, check_out_tensor, check_tensor
from ascend_spec.gdn.protocol import (
    KernelMode,
    check_flush,
    check_row_values,
    check_rows,
)
from ascend_spec.gdn.records import GDNRecords

__all__ = ["GatedDeltaRuleArgs", "verify_gated_delta_rule", "flush_pending", "is_value_major"]
OP = "verify_gated_delta_rule"


@dataclass(frozen=True)
class GatedDeltaRuleArgs:
    """One call's arguments after checks: what every backend takes, for a verify call and for a flush (csrc
    mirror: ``VerifyGatedDeltaRuleArgs`` in csrc/kernels/verify_gated_delta_rule_tiling.h)."""

    mode: KernelMode  # VERIFY or FLUSH
    state_pool: torch.Tensor  # [S, HV, Dk, Dv] fp32; slots [HV, Dk, Dv] or [HV, Dv, Dk] dense
    state_indices: torch.Tensor  # [B] int32/int64, -1 = padding row
    records: GDNRecords
    pending: torch.Tensor  # [B] int32
    q: torch.Tensor | None = None  # [T, H, Dk] (None in a flush, as are k, v, g, beta, cu_seqlens)
    k: torch.Tensor | None = None  # [T, H, Dk]
    v: torch.Tensor | None = None  # [T, HV, Dv]
    g: torch.Tensor | None = None  # [T, HV] log decay
    beta: torch.Tensor | None = None  # [T, HV]
    cu_seqlens: torch.Tensor | None = None  # [B+1]
    scale: float = 1.0
    use_qk_l2norm: bool = False


# --------------------------------------------------------------------------------------------------- checks


def is_value_major(pool: torch.Tensor) -> bool:
    """True when the ``[S, HV, Dk, Dv]`` pool views slots stored ``[HV, Dv, Dk]`` (``vllm_state.transpose(-1, -2)``,
    within-slot strides ``(Dk Dv, 1, Dk)``): vLLM's GPU engine keeps the GDN state value-major (fla's kernels read
    it transposed), and the reference and Triton backends take that buffer in place."""
    _, _, dk, dv = pool.shape
    strides = pool.stride()[1:]
    return strides != (dk * dv, dv, 1) and strides == (dk * dv, 1, dk)


def _check_pool(state_pool: object, device: torch.device | None = None) -> torch.Tensor:
    pool = check_tensor("state_pool", state_pool, ndim=4, dtypes=(torch.float32,), device=device)
    _, hv, dk, dv = pool.shape
    if pool.stride()[1:] not in ((dk * dv, dv, 1), (dk * dv, 1, dk)):
        raise ValueError(
            f"state_pool slots must be [HV, Dk, Dv] contiguous (within-slot strides {(dk * dv, dv, 1)}) or the "
            f"transpose of [HV, Dv, Dk] contiguous slots, vLLM's GPU layout (strides {(dk * dv, 1, dk)}); got "
            f"strides {pool.stride()}"
        )
    return pool


def _check_records(records: object, pool: torch.Tensor) -> GDNRecords:
    if not isinstance(records, GDNRecords):
        raise ValueError(f"records must be a GDNRecords from allocate_records; got {type(records).__name__}")
    num_slots, hv, dk, dv = pool.shape
    got = (records.num_slots, records.num_v_heads, records.head_k_dim, records.head_v_dim)
    if got != (num_slots, hv, dk, dv):
        raise ValueError(
            f"records (slots, v heads, Dk, Dv) = {got} do not match state_pool [S, HV, Dk, Dv] = "
            f"{list(pool.shape)}"
        )
    if records.device != pool.device:
        raise ValueError(f"records are on {records.device} but state_pool is on {pool.device}")
    for name in ("k", "g", "u", "bank", "num_recorded"):
        t = getattr(records, name)
        if not t.is_contiguous():  # the kernels address records as dense buffers
            raise ValueError(
                f"records.{name} must be contiguous (as allocate_records makes it); got strides {t.stride()}"
            )
    if records.bank.dtype != torch.int32 or records.num_recorded.dtype != torch.int32:
        raise ValueError(
            f"records.bank and records.num_recorded must be int32; got {records.bank.dtype}, "
            f"{records.num_recorded.dtype}"
        )
    return records


def _check_cu_seqlens(cu_seqlens: torch.Tensor, num_tokens: int, capacity: int) -> None:
    """Value checks (host sync): starts at 0, non-decreasing, ends at T, no row above the record capacity."""
    if int(cu_seqlens[0]) != 0:
        raise ValueError(f"cu_seqlens must start at 0; got cu_seqlens[0] = {int(cu_seqlens[0])}")
    lens = cu_seqlens[1:] - cu_seqlens[:-1]
    if bool((lens < 0).any()):
        i = int((lens < 0).nonzero()[0, 0])
        raise ValueError(
            f"cu_seqlens must be non-decreasing; got cu_seqlens[{i}] = {int(cu_seqlens[i])} > "
            f"cu_seqlens[{i + 1}] = {int(cu_seqlens[i + 1])}"
        )
    if int(cu_seqlens[-1]) != num_tokens:
        raise ValueError(f"cu_seqlens must end at T = {num_tokens} (rows of q); got {int(cu_seqlens[-1])}")
    if lens.numel() and int(lens.max()) > capacity:
        i = int(lens.argmax())
        raise ValueError(
            f"cu_seqlens gives row {i} {int(lens[i])} tokens, above the records' max_tokens_per_step = "
            f"{capacity}; allocate records with a larger max_tokens_per_step"
        )


# ------------------------------------------------------------------------------------------------ public ops


def verify_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    cu_seqlens: torch.Tensor,
    state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: GDNRecords,
    pending: torch.Tensor,
    scale: float | None = None,
    use_qk_l2norm: bool = False,
    backend: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Commit each row's pending tokens, then run the gated delta rule over this call's tokens, recording them.

    ``q, k [T, H, Dk]``, ``v [T, HV, Dv]`` (same float dtype; ``HV`` a multiple of ``H``, value head ``hv`` reads
    k-head ``hv // (HV / H)``), ``g, beta [T, HV]`` (any float dtype; ``g`` is the log decay),
    ``cu_seqlens [B+1]``, ``state_pool [S, HV, Dk, Dv]`` fp32 (each slot dense as ``[HV, Dk, Dv]`` or, on the
    reference and triton backends, the transposed view of a dense ``[HV, Dv, Dk]``: :func:`is_value_major`;
    any slot stride), ``state_indices [B]`` (-1 = padding row),
    ``pending [B]`` int32. ``scale`` defaults to ``Dk ** -0.5``; ``use_qk_l2norm`` normalises q and k per head
    in fp32 (eps 1e-6 under the square root, as fla and transformers do). Returns ``o [T, HV, Dv]`` in v's dtype,
    written into ``out`` (contiguous, v's shape and dtype) when given.
    """
    check_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    device = q.device
    num_tokens, num_heads, dk = q.shape
    check_tensor("k", k, ndim=3, dtypes=(q.dtype,), device=device, shape=(num_tokens, num_heads, dk))
    check_tensor("v", v, ndim=3, dtypes=(q.dtype,), device=device, shape=(num_tokens, None, None))
    num_v_heads, dv = v.shape[1], v.shape[2]
    if num_v_heads % num_heads:
        raise ValueError(
            f"v has HV = {num_v_heads} heads, not a multiple of the H = {num_heads} heads of q/k"
        )
    check_tensor("g", g, ndim=2, dtypes=FLOAT_DTYPES, device=device, shape=(num_tokens, num_v_heads))
    check_tensor("beta", beta, ndim=2, dtypes=FLOAT_DTYPES, device=device, shape=(num_tokens, num_v_heads))
    pool = _check_pool(state_pool, device)
    if tuple(pool.shape[1:]) != (num_v_heads, dk, dv):
        raise ValueError(
            f"state_pool must have shape [S, HV={num_v_heads}, Dk={dk}, Dv={dv}]; got {list(pool.shape)}"
        )
    records = _check_records(records, pool)
    if records.num_k_heads != num_heads:
        raise ValueError(
            f"records keep keys for {records.num_k_heads} k-heads but q/k have H = {num_heads}; allocate them "
            f"with allocate_records(..., num_k_heads={num_heads})"
        )
    num_rows = check_rows(state_indices, pending, device)
    check_tensor("cu_seqlens", cu_seqlens, ndim=1, dtypes=INDEX_DTYPES, device=device, shape=(num_rows + 1,))
    if scale is None:
        scale = dk**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite float or None; got {scale!r}")
    if not isinstance(use_qk_l2norm, bool):
        raise ValueError(f"use_qk_l2norm must be a bool; got {use_qk_l2norm!r}")
    if value_checks_enabled(device):
        _check_cu_seqlens(cu_seqlens, num_tokens, records.max_tokens_per_step)
        active = (cu_seqlens[1:] - cu_seqlens[:-1]) > 0
        check_row_values(state_indices, pending, records.num_slots, records.num_recorded, active)

    run = dispatch(OP, backend, device)
    if out is None:
        out = torch.empty(v.shape, dtype=v.dtype, device=device)
    else:
        check_out_tensor(out, tuple(v.shape), v.dtype, device)
    args = GatedDeltaRuleArgs(
        mode=KernelMode.VERIFY, state_pool=pool, state_indices=state_indices, records=records, pending=pending,
        q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=cu_seqlens, scale=float(scale), use_qk_l2norm=use_qk_l2norm,
    )  # fmt: skip
    run(args, out)
    return out


def flush_pending(
    state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: GDNRecords,
    pending: torch.Tensor,
    *,
    reset_pending: bool = True,
    backend: str = "auto",
) -> None:
    """Commit every row's pending tokens into its state slot (preemption, finish, prefix caching).

    Writes the state of rows with ``pending > 0`` once; padding rows (-1) are skipped. Every flushed slot gets
    ``num_recorded = 0``, so the same records can never be committed twice. ``pending`` is zeroed unless
    ``reset_pending=False``: a model flushes each GDN (and conv) layer with the shared ``pending`` and
    ``reset_pending=False``, then zeroes ``pending`` once. Conv records (:class:`ConvRecords`) are forwarded to
    :func:`ascend_spec.gdn.verify_causal_conv1d.flush_conv_pending`, so one call serves both kinds of layer.
    """
    if not isinstance(records, GDNRecords):
        from ascend_spec.gdn.verify_causal_conv1d import ConvRecords, flush_conv_pending

        if isinstance(records, ConvRecords):
            flush_conv_pending(
                state_pool, state_indices, records, pending, reset_pending=reset_pending, backend=backend
            )
            return
    pool = _check_pool(state_pool)
    device = pool.device
    records = _check_records(records, pool)
    check_flush(state_indices, pending, records.num_slots, records.num_recorded, reset_pending)
    run = dispatch(OP, backend, device, caller="flush_pending")
    run(GatedDeltaRuleArgs(KernelMode.FLUSH, pool, state_indices, records, pending), None)
    if reset_pending:
        pending.zero_()
