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
"""

from __future__ import annotations

import math

import torch

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, INDEX_DTYPES, check_tensor
from ascend_spec.gdn.protocol import (
    check_pending_recorded,
    check_reset_pending,
    check_rows,
    check_slot_values,
)
from ascend_spec.gdn.records import GDNRecords

__all__ = ["verify_gated_delta_rule", "flush_pending"]


# --------------------------------------------------------------------------------------------------- checks


def _check_pool(state_pool: object, device: torch.device | None = None) -> torch.Tensor:
    pool = check_tensor("state_pool", state_pool, ndim=4, dtypes=(torch.float32,), device=device)
    _, hv, dk, dv = pool.shape
    if pool.stride()[1:] != (dk * dv, dv, 1):
        raise ValueError(
            f"state_pool must be contiguous within a slot ([HV, Dk, Dv] strides {(dk * dv, dv, 1)}); "
            f"got strides {pool.stride()}"
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
    return records


def _check_row_values(
    state_indices: torch.Tensor, pending: torch.Tensor, records: GDNRecords, rows: torch.Tensor
) -> None:
    """Value checks (host sync): slots in [-1, S) and distinct, 0 <= pending <= recorded on ``rows``."""
    check_slot_values(state_indices, records.num_slots)
    if bool((pending < 0).any()):
        i = int((pending < 0).nonzero()[0, 0])
        raise ValueError(f"pending must be >= 0; got pending[{i}] = {int(pending[i])}")
    check_pending_recorded(state_indices, pending, records.num_recorded, rows)


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
) -> torch.Tensor:
    """Commit each row's pending tokens, then run the gated delta rule over this call's tokens, recording them.

    ``q, k [T, H, Dk]``, ``v [T, HV, Dv]`` (same float dtype; ``HV`` a multiple of ``H``, value head ``hv`` reads
    k-head ``hv // (HV / H)``), ``g, beta [T, HV]`` (any float dtype; ``g`` is the log decay),
    ``cu_seqlens [B+1]``, ``state_pool [S, HV, Dk, Dv]`` fp32, ``state_indices [B]`` (-1 = padding row),
    ``pending [B]`` int32. ``scale`` defaults to ``Dk ** -0.5``; ``use_qk_l2norm`` normalises q and k per head
    in fp32 (eps 1e-6 under the square root, as fla and transformers do). Returns ``o [T, HV, Dv]`` in v's dtype.
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
        _check_row_values(state_indices, pending, records, active)

    which = resolve_backend(backend, device, op="verify_gated_delta_rule")
    args = (q, k, v, g, beta, cu_seqlens, pool, state_indices, records, pending, float(scale), use_qk_l2norm)
    if which == "triton":
        from ascend_spec.gdn.verify_gated_delta_rule.triton import verify_triton

        return verify_triton(*args)
    if which == "ascendc":
        from ascend_spec.gdn.verify_gated_delta_rule.ascendc import verify_ascendc

        return verify_ascendc(*args)
    return _verify_reference(*args)


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
    check_rows(state_indices, pending, device)
    check_reset_pending(reset_pending)
    if value_checks_enabled(device):
        _check_row_values(state_indices, pending, records, torch.ones_like(pending, dtype=torch.bool))
    which = resolve_backend(backend, device, op="flush_pending")
    if which == "triton":
        from ascend_spec.gdn.verify_gated_delta_rule.triton import flush_triton

        flush_triton(pool, state_indices, records, pending)
    elif which == "ascendc":
        from ascend_spec.gdn.verify_gated_delta_rule.ascendc import flush_ascendc

        flush_ascendc(pool, state_indices, records, pending)
    else:
        _flush_reference(pool, state_indices, records, pending)
    if reset_pending:
        pending.zero_()


# ------------------------------------------------------------------------------------------------- reference


def replay_states(
    states: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor, n: torch.Tensor
) -> torch.Tensor:
    """Closed-form commit of the first ``n[a]`` records into ``states [A, HV, Dk, Dv]`` (fp32, returns new).

    ``S_n = exp(G_n) S_0 + sum_{t<n} exp(G_n - G_t) k_t u_t^T`` with ``G`` the inclusive prefix sum of ``g``:
    vectorised over rows, heads and tokens (one batched matmul of rank ``n``), no loop.
    ``k [A, L, H, Dk]``, ``g [A, L, HV]``, ``u [A, L, HV, Dv]``, ``n [A]``.
    """
    num_rows, cap, num_heads, _ = k.shape
    num_v_heads = u.shape[2]
    live = torch.arange(cap, device=k.device)[None, :] < n[:, None]  # [A, L]
    g = torch.where(live[:, :, None], g, torch.zeros((), device=g.device))
    cum = torch.cumsum(g, dim=1)  # [A, L, HV]
    total = cum[:, -1]  # [A, HV] = G_n (dead tokens add 0)
    weight = torch.where(
        live[:, :, None], torch.exp(total[:, None, :] - cum), torch.zeros((), device=g.device)
    )
    k_v = k.repeat_interleave(num_v_heads // num_heads, dim=2)  # [A, L, HV, Dk]
    update = torch.einsum("alhk,alhv->ahkv", k_v * weight[..., None], u)
    return torch.exp(total)[..., None, None] * states + update


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _verify_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: GDNRecords,
    pending: torch.Tensor,
    scale: float,
    use_qk_l2norm: bool,
) -> torch.Tensor:
    """Vectorised oracle: closed-form replay for all rows at once, then a loop over token index t in which the
    rows still running form a prefix (rows sorted by length), updated in place with batched matmuls."""
    device = q.device
    num_tokens, num_heads, dk = q.shape
    num_v_heads, dv = v.shape[1:]
    group = num_v_heads // num_heads
    o = torch.zeros(num_tokens, num_v_heads, dv, dtype=v.dtype, device=device)
    cu = cu_seqlens.long()
    lens = cu[1:] - cu[:-1]
    slot_all = state_indices.long()
    rows = ((slot_all >= 0) & (lens > 0)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return o
    lens_r = lens[rows]
    order = torch.argsort(lens_r, descending=True, stable=True)
    rows, lens_r = rows[order], lens_r[order]
    slots = slot_all[rows]
    num_rows = rows.numel()

    # 1) commit pending records: one state read, one write where something is pending.
    bank = records.bank[slots].long()
    n_rep = torch.minimum(pending[rows].long().clamp(min=0), records.num_recorded[slots].long())
    states = replay_states(
        pool[slots], records.k[slots, bank], records.g[slots, bank], records.u[slots], n_rep
    )  # [A, HV, Dk, Dv] fp32
    committed = n_rep > 0
    pool[slots[committed]] = states[committed]

    # 2) this call's tokens, padded to [A, Lmax, ...] (rows sorted by length: live rows form a prefix).
    max_len = int(lens_r[0])
    t_idx = torch.arange(max_len, device=device)
    live = t_idx[None, :] < lens_r[:, None]
    pos = torch.where(
        live, cu[rows][:, None] + t_idx[None, :], torch.zeros((), dtype=torch.long, device=device)
    )
    f32 = torch.float32
    q_p, k_p = q[pos].to(f32), k[pos].to(f32)  # [A, Lmax, H, Dk]
    if use_qk_l2norm:
        q_p, k_p = _l2norm(q_p), _l2norm(k_p)
    q_p = (q_p * scale).repeat_interleave(group, dim=2)
    k_v = k_p.repeat_interleave(group, dim=2)  # [A, Lmax, HV, Dk]
    v_p, g_p, b_p = v[pos].to(f32), g[pos].to(f32), beta[pos].to(f32)
    u_p = torch.zeros(num_rows, max_len, num_v_heads, dv, dtype=f32, device=device)
    o_p = torch.zeros_like(u_p)
    running = live.sum(dim=0).tolist()  # rows still running at each t
    flat = states.view(num_rows * num_v_heads, dk, dv)
    for t in range(max_len):
        n = running[t]
        s_n = flat[: n * num_v_heads]
        s_n.mul_(torch.exp(g_p[:n, t]).reshape(-1, 1, 1))
        k_t = k_v[:n, t].reshape(-1, 1, dk)
        pred = torch.bmm(k_t, s_n).reshape(n, num_v_heads, dv)  # S~^T k
        u_t = b_p[:n, t, :, None] * (v_p[:n, t] - pred)
        s_n.baddbmm_(k_t.transpose(1, 2), u_t.reshape(-1, 1, dv))
        o_p[:n, t] = torch.bmm(q_p[:n, t].reshape(-1, 1, dk), s_n).reshape(n, num_v_heads, dv)
        u_p[:n, t] = u_t
    o[pos[live]] = o_p[live].to(o.dtype)

    # 3) records of this call into the other bank (u: single copy), then the metadata. Lengths above the
    # capacity only get here with value checks off: no record is written past it, num_recorded = capacity.
    new_bank = 1 - bank
    cap = min(max_len, records.max_tokens_per_step)
    records.k[slots, new_bank, :cap] = k_p[:, :cap]
    records.g[slots, new_bank, :cap] = g_p[:, :cap]
    records.u[slots, :cap] = u_p[:, :cap]
    records.bank[slots] = new_bank.to(torch.int32)
    records.num_recorded[slots] = lens_r.clamp(max=records.max_tokens_per_step).to(torch.int32)
    return o


def _flush_reference(
    pool: torch.Tensor, state_indices: torch.Tensor, records: GDNRecords, pending: torch.Tensor
) -> None:
    slot_all = state_indices.long()
    valid = slot_all >= 0
    n_all = torch.minimum(pending.long().clamp(min=0), records.num_recorded[slot_all.clamp(min=0)].long())
    rows = (valid & (n_all > 0)).nonzero().squeeze(1)
    if rows.numel():
        slots = slot_all[rows]
        bank = records.bank[slots].long()
        pool[slots] = replay_states(
            pool[slots], records.k[slots, bank], records.g[slots, bank], records.u[slots], n_all[rows]
        )
    records.num_recorded[slot_all[valid]] = 0
