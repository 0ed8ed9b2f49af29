"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.gdn.verify_gated_delta_rule` and its flush.

The commit of pending records is closed-form (:func:`replay_states`: one matmul of rank n, no loop, stable for
every ``g <= 0`` including ``-inf``), applied to the pool in place; this call's tokens run in chunk form
(:func:`_chunk`: one projection of the committed state, a unit lower-triangular solve over the call's tokens, no
loop over tokens). It was the CPU engine's verify path before the native kernel (``cpu.py``, the same math), so
it is written for few passes over the states and few operator calls (docs/verify_gated_delta_rule.md, "CPU engine
path").
"""

from __future__ import annotations

import functools

import torch

from ascend_spec.gdn.protocol import KernelMode, owned_slots, uniform_row_length
from ascend_spec.gdn.records import GDNRecords
from ascend_spec.gdn.verify_gated_delta_rule import GatedDeltaRuleArgs


def verify_gated_delta_rule(args: GatedDeltaRuleArgs, out: torch.Tensor | None) -> None:
    """A verify call (outputs into ``out``) or, in ``KernelMode.FLUSH``, the flush of the pending records."""
    if args.mode == KernelMode.FLUSH:
        _flush(args.state_pool, args.state_indices, args.records, args.pending)
        return
    assert out is not None
    _verify(args, out)


def _replay_factors(
    k: torch.Tensor, g: torch.Tensor, u: torch.Tensor, n: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(decay [A, HV], lhs [A, HV, Dk, L], rhs [A, HV, L, Dv])`` with ``S_n = decay S_0 + lhs @ rhs``.

    ``S_n = exp(G_n) S_0 + sum_{t<n} exp(R_t) k_t u_t^T`` with ``R_t = g_{t+1} + ... + g_{n-1}`` the decay after
    token t, summed directly from the tail (a reversed cumulative sum) rather than as ``G_n - G_t`` of prefix sums:
    no difference of two large sums, so no cancellation for large ``|g|`` and no ``-inf - -inf`` = NaN for a
    full forget ``g = -inf``; every weight is ``exp`` of a sum of ``g <= 0`` terms, in ``[0, 1]``.
    ``k [A, L, H, Dk]``, ``g [A, L, HV]``, ``u [A, L, HV, Dv]``, ``n [A]``.
    """
    cap, num_heads = k.shape[1], k.shape[2]
    num_v_heads = u.shape[2]
    live = (torch.arange(cap, device=k.device)[None, :] < n[:, None])[:, :, None]  # [A, L, 1]
    zero = torch.zeros((), dtype=g.dtype, device=g.device)
    g = torch.where(live, g, zero)  # dead tokens decay nothing
    tail = torch.flip(torch.cumsum(torch.flip(g, (1,)), dim=1), (1,))  # [A, L, HV]: g_t + ... + g_{L-1}
    after = torch.cat((tail[:, 1:], torch.zeros_like(tail[:, :1])), dim=1)  # R_t (no subtraction)
    weight = torch.where(live, torch.exp(after), zero)  # [A, L, HV]
    k_v = k.repeat_interleave(num_v_heads // num_heads, dim=2) if num_heads != num_v_heads else k
    lhs = (k_v * weight[..., None]).permute(0, 2, 3, 1)  # [A, HV, Dk, L]
    decay = torch.exp(tail[:, 0]) if cap else torch.ones(n.shape[0], num_v_heads, device=g.device)
    return decay, lhs, u.transpose(1, 2)


def replay_states(
    states: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor, n: torch.Tensor
) -> torch.Tensor:
    """Closed-form commit of the first ``n[a]`` records into ``states [A, HV, Dk, Dv]`` (fp32, returns new):
    one batched matmul of rank ``n``, no loop (:func:`_replay_factors`)."""
    decay, lhs, rhs = _replay_factors(k, g, u, n)
    return decay[..., None, None] * states + torch.matmul(lhs, rhs)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _per_head(x: torch.Tensor, num_v_heads: int) -> torch.Tensor:
    """``[A, L, H*, D] -> [A, HV, L, D]`` (a k-head's rows shared by its ``HV / H`` value heads)."""
    if x.shape[2] != num_v_heads:
        x = x.repeat_interleave(num_v_heads // x.shape[2], dim=2)
    return x.transpose(1, 2)


def _rank_update(lhs: torch.Tensor, rhs: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``lhs @ rhs`` (``[.., Dk, Dv]``) laid out as the states ``like``: for a value-major pool (slots stored
    ``[HV, Dv, Dk]``) it is computed as ``(rhs^T @ lhs^T)^T``, so adding it into the pool runs along memory."""
    if like.stride(-1) == 1:
        return torch.matmul(lhs, rhs)
    return torch.matmul(rhs.transpose(-1, -2), lhs.transpose(-1, -2)).transpose(-1, -2)


def _project(qk: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """``qk @ states`` for ``states [A, HV, Dk, Dv]``: one batched matmul when the ``(A, HV)`` batch is one stride,
    else one per row (slots apart in a wider buffer: batching would copy every state first)."""
    if states.shape[0] == 1 or states.stride(0) == states.shape[1] * states.stride(1):
        return torch.matmul(qk, states)
    out = torch.empty(*qk.shape[:-1], states.shape[-1], dtype=states.dtype, device=states.device)
    for a in range(states.shape[0]):
        torch.bmm(qk[a], states[a], out=out[a])
    return out


def _commit_and_project(
    pool: torch.Tensor,
    slot_list: list[int],
    n_list: list[int],
    factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    qk: torch.Tensor,
) -> torch.Tensor:
    """Commit each row's pending records into its pool slot in place, then ``[q; k] @ S`` per row and head.

    ``qk [A, HV, 2L, Dk]``; returns ``[A, HV, 2L, Dv]``. The pool is updated where it lies: rows on consecutive
    slots as one view, others slot by slot, so the state is read once, written once where something is pending
    and never copied (a gather + scatter would move every state twice more). Either slot layout (``[HV, Dk, Dv]``
    or value-major) is used through its strides; the rank-n update is formed in the pool's layout.
    """
    num_rows = len(slot_list)
    first = slot_list[0]
    if slot_list == list(range(first, first + num_rows)):
        view = pool[first : first + num_rows]  # [A, HV, Dk, Dv]
        if factors is not None:
            decay, lhs, rhs = factors
            if all(n > 0 for n in n_list):
                view.mul_(decay[..., None, None])
                view.add_(_rank_update(lhs, rhs, view))
            else:
                for a, n in enumerate(n_list):
                    if n > 0:
                        view[a].mul_(decay[a, :, None, None]).baddbmm_(lhs[a], rhs[a])
        return _project(qk, view)
    out = torch.empty(*qk.shape[:-1], pool.shape[-1], dtype=pool.dtype, device=pool.device)
    for a, (slot, n) in enumerate(zip(slot_list, n_list)):
        state = pool[slot]
        if factors is not None and n > 0:
            decay, lhs, rhs = factors
            state.mul_(decay[a, :, None, None]).baddbmm_(lhs[a], rhs[a])
        torch.bmm(qk[a], state, out=out[a])
    return out


@functools.lru_cache(maxsize=64)
def _strictly_lower(length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``[L, L]`` bool mask of ``s < t`` and a 0-d fp32 zero, made once per length and device (each engine step
    of every layer asks for the same ones). Read-only: callers never write them."""
    t_idx = torch.arange(length, device=device)
    return t_idx[:, None] > t_idx[None, :], torch.zeros((), dtype=torch.float32, device=device)


def _chunk(
    qk_s: torch.Tensor,
    qh: torch.Tensor,
    kh: torch.Tensor,
    vh: torch.Tensor,
    gh: torch.Tensor,
    bh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All tokens of a call at once: ``(u, o)`` ``[A, HV, L, Dv]`` from ``qk_s = [S_0^T q; S_0^T k]``.

    With ``D[t, s] = g_{s+1} + ... + g_t`` (the decay between two tokens, summed directly: every term <= 0,
    no difference of prefix sums) and ``Gamma_t = g_1 + ... + g_t``, the recurrence unrolls to
    ``u_t = beta_t (v_t - e^{Gamma_t} S_0^T k_t - sum_{s<t} e^{D[t,s]} (k_t . k_s) u_s)``: a unit lower-triangular
    system ``(I + M) U = R`` (forward substitution is exactly the token loop), and
    ``o_t = e^{Gamma_t} S_0^T q_t + sum_{s<=t} e^{D[t,s]} (q_t . k_s) u_s``. ``qh, kh [A, HV, L, Dk]`` (q scaled),
    ``vh [A, HV, L, Dv]``, ``gh, bh [A, HV, L]``. A verify call keeps no state of its tokens (records only).
    """
    length = kh.shape[2]
    after, zero = _strictly_lower(length, kh.device)  # [t, s]: s < t; a 0-d fp32 zero
    decay = torch.cumsum(torch.where(after, gh[..., :, None], zero), dim=-2)  # D[t, s] for s < t
    gamma = torch.exp(torch.cumsum(gh, dim=-1))[..., None]  # e^{Gamma_t}
    lower = torch.where(after, torch.exp(decay), zero)  # e^{D[t, s]}, s < t
    kt = kh.transpose(-1, -2)
    m = bh[..., None] * lower * torch.matmul(kh, kt)
    m.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    rhs = bh[..., None] * (vh - gamma * qk_s[..., length:, :])
    u = torch.linalg.solve_triangular(m, rhs, upper=False, unitriangular=True)  # [A, HV, L, Dv]
    lower.diagonal(dim1=-2, dim2=-1).fill_(1.0)  # e^{D[t, t]} = 1
    o = torch.matmul(lower * torch.matmul(qh, kt), u).add_(gamma * qk_s[..., :length, :])
    return u, o


def _verify(args: GatedDeltaRuleArgs, o: torch.Tensor) -> None:
    """Commit + projection per slot in place, then this call's tokens in chunk form (module docstring)."""
    q, k, v, g, beta, cu_seqlens = args.q, args.k, args.v, args.g, args.beta, args.cu_seqlens
    assert q is not None and k is not None and v is not None and g is not None and beta is not None
    assert cu_seqlens is not None
    pool, state_indices, records, pending = args.state_pool, args.state_indices, args.records, args.pending
    device = q.device
    num_tokens = q.shape[0]
    num_v_heads, dv = v.shape[1:]
    f32 = torch.float32
    length = uniform_row_length(cu_seqlens, state_indices, num_tokens, pool.shape[0])
    if length:  # a fixed-K step: rows back to back, each owning its slot: views, no gathers
        ragged = None
        slots = state_indices.long()
        num_rows = slots.shape[0]
        pending_r = pending

        def take(t: torch.Tensor) -> torch.Tensor:
            return t.view(num_rows, length, *t.shape[1:]).to(f32)

    else:
        o.zero_()
        cu = cu_seqlens.long().clamp(0, num_tokens)  # checks off: rows never reach outside the T tokens
        lens = cu[1:] - cu[:-1]
        valid, slot_all = owned_slots(state_indices, pool.shape[0])  # out of range (checks off): padding
        rows = (valid & (lens > 0)).nonzero().squeeze(1)
        if rows.numel() == 0:
            return
        lens_r = lens.index_select(0, rows)
        slots = slot_all.index_select(0, rows)
        num_rows = rows.numel()
        pending_r = pending.index_select(0, rows)
        length = int(lens_r.max())
        t_idx = torch.arange(length, device=device)
        live = t_idx[None, :] < lens_r[:, None]  # [A, L]
        flat_pos = torch.where(
            live,
            cu.index_select(0, rows)[:, None] + t_idx[None, :],
            torch.zeros((), dtype=torch.long, device=device),
        ).reshape(-1)
        ragged = (lens_r, live, flat_pos)

        def take(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, flat_pos).view(num_rows, length, *t.shape[1:]).to(f32)

    # This call's tokens as [A, L, ...]; in the ragged case padding tokens get g = 0 and beta = 0 (u = 0: they
    # change nothing, and they come after every live token of their row).
    q_p, k_p = take(q), take(k)  # [A, L, H, Dk]
    if args.use_qk_l2norm:
        q_p, k_p = _l2norm(q_p), _l2norm(k_p)
    g_p, b_p, v_p = take(g), take(beta), take(v)
    if ragged is not None:
        zero = torch.zeros((), dtype=f32, device=device)
        g_p = torch.where(ragged[1][:, :, None], g_p, zero)
        b_p = torch.where(ragged[1][:, :, None], b_p, zero)
    qh, kh = _per_head(q_p * args.scale, num_v_heads), _per_head(k_p, num_v_heads)  # [A, HV, L, Dk]

    # 1) commit pending records into the pool (one state write where something is pending), then [q; k] @ S.
    bank = records.bank.index_select(0, slots).long()
    n_rep = torch.minimum(pending_r.long().clamp(min=0), records.num_recorded.index_select(0, slots).long())
    n_list = n_rep.tolist()  # host values (a CPU path; a device run syncs here)
    factors = None
    if any(n > 0 for n in n_list):
        factors = _replay_factors(records.k[slots, bank], records.g[slots, bank], records.u[slots], n_rep)
    qk_s = _commit_and_project(pool, slots.tolist(), n_list, factors, torch.cat((qh, kh), dim=2))

    # 2) this call's tokens in chunk form.
    u_h, o_h = _chunk(qk_s, qh, kh, v_p.transpose(1, 2), g_p.transpose(1, 2), b_p.transpose(1, 2))
    u_p, o_p = u_h.transpose(1, 2), o_h.transpose(1, 2)  # [A, L, HV, Dv]
    if ragged is None:
        o.view(num_rows, length, num_v_heads, dv).copy_(o_p)
    else:
        live_tok = ragged[1].reshape(-1).nonzero().squeeze(1)
        o_live = o_p.reshape(-1, num_v_heads, dv).index_select(0, live_tok)
        o.index_copy_(0, ragged[2].index_select(0, live_tok), o_live.to(o.dtype))

    # 3) records of this call into the other bank (u: single copy), then the metadata. Lengths above the
    # capacity only get here with value checks off: no record is written past it, num_recorded = capacity.
    new_bank = 1 - bank
    cap = min(length, records.max_tokens_per_step)
    records.k[slots, new_bank, :cap] = k_p[:, :cap]
    records.g[slots, new_bank, :cap] = g_p[:, :cap]
    records.u[slots, :cap] = u_p[:, :cap]
    records.bank.index_copy_(0, slots, new_bank.to(torch.int32))
    if ragged is None:
        records.num_recorded.index_fill_(0, slots, cap)
    else:
        recorded = ragged[0].clamp(max=records.max_tokens_per_step).to(torch.int32)
        records.num_recorded.index_copy_(0, slots, recorded)


def _flush(
    pool: torch.Tensor, state_indices: torch.Tensor, records: GDNRecords, pending: torch.Tensor
) -> None:
    valid, slot_all = owned_slots(state_indices, pool.shape[0])
    n_all = torch.minimum(pending.long().clamp(min=0), records.num_recorded[slot_all].long())
    rows = (valid & (n_all > 0)).nonzero().squeeze(1)
    if rows.numel():
        slots = slot_all[rows]
        bank = records.bank[slots].long()
        pool[slots] = replay_states(
            pool[slots], records.k[slots, bank], records.g[slots, bank], records.u[slots], n_all[rows]
        )
    records.num_recorded[slot_all[valid]] = 0
