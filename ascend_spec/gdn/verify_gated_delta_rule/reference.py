"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.gdn.verify_gated_delta_rule` and its flush.

The commit of pending records is closed-form (:func:`replay_states`, one batched matmul of rank n, no loop, stable
for every ``g <= 0`` including ``-inf``); this
call's tokens run in a loop over token index in which the rows still running form a prefix (rows sorted by
length), updated in place with batched matmuls.
"""

from __future__ import annotations

import torch

from ascend_spec.gdn.protocol import KernelMode, owned_slots
from ascend_spec.gdn.records import GDNRecords
from ascend_spec.gdn.verify_gated_delta_rule import GatedDeltaRuleArgs


def verify_gated_delta_rule(args: GatedDeltaRuleArgs, out: torch.Tensor | None) -> None:
    """A verify call (outputs into ``out``) or, in ``KernelMode.FLUSH``, the flush of the pending records."""
    if args.mode == KernelMode.FLUSH:
        _flush(args.state_pool, args.state_indices, args.records, args.pending)
        return
    assert out is not None
    _verify(args, out)


def replay_states(
    states: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor, n: torch.Tensor
) -> torch.Tensor:
    """Closed-form commit of the first ``n[a]`` records into ``states [A, HV, Dk, Dv]`` (fp32, returns new).

    ``S_n = exp(G_n) S_0 + sum_{t<n} exp(R_t) k_t u_t^T`` with ``R_t = g_{t+1} + ... + g_{n-1}`` the decay after
    token t, summed directly from the tail (a reversed cumulative sum) rather than as ``G_n - G_t`` of prefix sums:
    no difference of two large sums, so no cancellation for large ``|g|`` and no ``-inf - -inf`` = NaN for a
    full forget ``g = -inf``; every weight is ``exp`` of a sum of ``g <= 0`` terms, in ``[0, 1]``. Vectorised
    over rows, heads and tokens (one batched matmul of rank ``n``), no loop.
    ``k [A, L, H, Dk]``, ``g [A, L, HV]``, ``u [A, L, HV, Dv]``, ``n [A]``.
    """
    num_rows, cap, num_heads, _ = k.shape
    num_v_heads = u.shape[2]
    live = torch.arange(cap, device=k.device)[None, :] < n[:, None]  # [A, L]
    g = torch.where(live[:, :, None], g, torch.zeros((), device=g.device))  # dead tokens decay nothing
    tail = torch.flip(torch.cumsum(torch.flip(g, (1,)), dim=1), (1,))  # [A, L, HV]: g_t + ... + g_{L-1}
    total = tail[:, 0] if cap else torch.zeros(num_rows, num_v_heads, device=g.device)  # G_n
    after = torch.cat((tail[:, 1:], torch.zeros_like(tail[:, :1])), dim=1)  # R_t (no subtraction)
    weight = torch.where(live[:, :, None], torch.exp(after), torch.zeros((), device=g.device))
    k_v = k.repeat_interleave(num_v_heads // num_heads, dim=2)  # [A, L, HV, Dk]
    update = torch.einsum("alhk,alhv->ahkv", k_v * weight[..., None], u)
    return torch.exp(total)[..., None, None] * states + update


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _verify(args: GatedDeltaRuleArgs, o: torch.Tensor) -> None:
    """Closed-form replay for all rows at once, then this call's tokens (module docstring)."""
    q, k, v, g, beta, cu_seqlens = args.q, args.k, args.v, args.g, args.beta, args.cu_seqlens
    assert q is not None and k is not None and v is not None and g is not None and beta is not None
    assert cu_seqlens is not None
    pool, state_indices, records, pending = args.state_pool, args.state_indices, args.records, args.pending
    scale, use_qk_l2norm = args.scale, args.use_qk_l2norm
    device = q.device
    num_tokens, num_heads, dk = q.shape
    num_v_heads, dv = v.shape[1:]
    group = num_v_heads // num_heads
    o.zero_()
    cu = cu_seqlens.long().clamp(0, num_tokens)  # checks off: rows never reach outside the T tokens
    lens = cu[1:] - cu[:-1]
    valid, slot_all = owned_slots(state_indices, pool.shape[0])  # out of range (checks off): padding
    rows = (valid & (lens > 0)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return
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
