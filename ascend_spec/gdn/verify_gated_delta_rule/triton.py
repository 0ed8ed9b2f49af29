"""Triton kernels of the deferred-commit gated delta rule (imported lazily: TRITON_INTERPRET is read at jit time).

Grid ``(B * HV, NV)``: a program owns the state tile ``S[slot, hv, :, v0:v0+BV]`` of one row. It replays the
row's pending records into the tile sequentially (``S <- exp(g_t) S + k_t u_t^T``, the same arithmetic as the
recurrence), stores the committed tile once (only when something was pending), then runs this call's tokens with
the tile in registers, writing outputs and this call's records:

* ``u_t[hv, v0:v0+BV]``: the single-copy record this program alone reads and writes; its replay loads complete
  before the first new-token reduction (a barrier) and so before any store of the same addresses;
* ``k_t[h]`` (one writer per k-head: ``v``-tile 0 of the first value head of the group) and ``g_t[hv]``
  (``v``-tile 0) into bank ``1 - bank[slot]``, which no program of this launch reads.

A second launch (grid ``B``) flips ``bank[slot]`` and sets ``num_recorded[slot]`` once every program has read
them. Padding rows (state index -1) load and store no state or record; their outputs are zeros.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascend_spec.backend import BackendUnavailableError
from ascend_spec.gdn.protocol import KernelMode
from ascend_spec.gdn.triton import zero_uncovered_rows
from ascend_spec.gdn.verify_gated_delta_rule import GatedDeltaRuleArgs, is_value_major


@triton.jit
def _replay_tile(
    b_s,
    rec_k,
    rec_g,
    rec_u,
    slot,
    bank,
    n_rep,
    i_h,
    i_hv,
    o_k,
    o_v,
    mask_k,
    mask_v,
    H: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    L: tl.constexpr,
):
    p_k = rec_k + ((slot * 2 + bank) * L * H + i_h) * DK + o_k
    p_g = rec_g + (slot * 2 + bank) * L * HV + i_hv
    p_u = rec_u + (slot * L * HV + i_hv) * DV + o_v
    for _ in range(0, n_rep):
        b_k = tl.load(p_k, mask=mask_k, other=0.0)
        b_u = tl.load(p_u, mask=mask_v, other=0.0)
        b_g = tl.load(p_g)
        b_s = b_s * tl.exp(b_g) + b_k[:, None] * b_u[None, :]
        p_k += H * DK
        p_g += HV
        p_u += HV * DV
    return b_s


@triton.jit
def _verify_kernel(
    q, k, v, g, beta, o,
    cu_seqlens, state_indices, pending,
    pool, sp_slot, sp_h, sp_k, sp_v,
    rec_k, rec_g, rec_u, rec_bank, rec_nrec,
    scale, S, T,
    sq_t, sq_h, sq_d, sk_t, sk_h, sk_d, sv_t, sv_h, sv_d, sg_t, sg_h, sb_t, sb_h, s_cu, s_idx, s_pend,
    H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, L: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, USE_L2NORM: tl.constexpr, HAS_TOKENS: tl.constexpr,
):  # fmt: skip
    i_bh = tl.program_id(0)  # rows x heads on axis 0 (2**31 programs; axis 1 allows only 65535)
    i_v = tl.program_id(1)
    i_b = i_bh // HV
    i_hv = i_bh % HV
    i_h = i_hv // (HV // H)
    slot = tl.load(state_indices + i_b * s_idx).to(tl.int64)
    valid = (slot >= 0) & (slot < S)  # out of range (checks off): a padding row, nothing read or written
    slot = tl.where(valid, slot, 0)
    if HAS_TOKENS:
        # cu_seqlens entries clamped into [0, T] (checks off): no row reads or writes outside the T tokens.
        bos = tl.minimum(tl.maximum(tl.load(cu_seqlens + i_b * s_cu).to(tl.int64), 0), T)
        n_new = tl.minimum(tl.maximum(tl.load(cu_seqlens + (i_b + 1) * s_cu).to(tl.int64), 0), T) - bos
        active = valid & (n_new > 0)
    else:
        active = valid
    bank = tl.load(rec_bank + slot).to(tl.int64)
    n_rep = tl.minimum(tl.load(pending + i_b * s_pend), tl.load(rec_nrec + slot)).to(tl.int64)
    n_rep = tl.where(active & (n_rep > 0), n_rep, 0)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < DK
    mask_v = o_v < DV
    # Within-slot strides (head, k, v): [HV, Dk, Dv] dense or its value-major transpose (Triton specialises the
    # stride 1, so either layout keeps contiguous loads along its inner axis).
    p_s = pool + slot * sp_slot + i_hv * sp_h + o_k[:, None] * sp_k + o_v[None, :] * sp_v
    # Row conditions enter block masks through the index limits (a block & scalar-bool mask is not portable).
    b_s = tl.load(p_s, mask=(o_k < tl.where(active, DK, 0))[:, None] & mask_v[None, :], other=0.0)
    b_s = _replay_tile(b_s, rec_k, rec_g, rec_u, slot, bank, n_rep, i_h, i_hv, o_k, o_v, mask_k, mask_v,
                       H, HV, DK, DV, L)  # fmt: skip
    tl.store(p_s, b_s, mask=(o_k < tl.where(n_rep > 0, DK, 0))[:, None] & mask_v[None, :])

    if HAS_TOKENS:
        nb = 1 - bank
        own_k = active & (i_v == 0) & (i_hv % (HV // H) == 0)
        own_g = active & (i_v == 0)
        k_lim = tl.where(own_k, DK, 0)
        n_loop = tl.where(valid, n_new, 0)
        for t in range(0, n_loop):
            tok = bos + t
            b_q = tl.load(q + tok * sq_t + i_h * sq_h + o_k * sq_d, mask=mask_k, other=0.0).to(tl.float32)
            b_k = tl.load(k + tok * sk_t + i_h * sk_h + o_k * sk_d, mask=mask_k, other=0.0).to(tl.float32)
            b_v = tl.load(v + tok * sv_t + i_hv * sv_h + o_v * sv_d, mask=mask_v, other=0.0).to(tl.float32)
            b_g = tl.load(g + tok * sg_t + i_hv * sg_h).to(tl.float32)
            b_beta = tl.load(beta + tok * sb_t + i_hv * sb_h).to(tl.float32)
            if USE_L2NORM:
                b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
                b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
            b_q = b_q * scale
            b_s = b_s * tl.exp(b_g)
            b_u = b_beta * (b_v - tl.sum(b_s * b_k[:, None], 0))
            b_s = b_s + b_k[:, None] * b_u[None, :]
            b_o = tl.sum(b_s * b_q[:, None], 0)
            p_o = o + (tok * HV + i_hv) * DV + o_v  # out is contiguous
            tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v)
            # t >= L only happens with value checks off: nothing is written there, num_recorded = min(len, L).
            in_cap = t < L
            tl.store(rec_u + ((slot * L + t) * HV + i_hv) * DV + o_v, b_u, mask=o_v < tl.where(in_cap, DV, 0))
            tl.store(rec_k + (((slot * 2 + nb) * L + t) * H + i_h) * DK + o_k, b_k,
                     mask=o_k < tl.where(in_cap, k_lim, 0))  # fmt: skip
            tl.store(rec_g + ((slot * 2 + nb) * L + t) * HV + i_hv, b_g, mask=own_g & in_cap)
        zeros = tl.zeros([BV], dtype=tl.float32)
        for t in range(0, tl.where(valid, 0, n_new)):  # padding row: zero outputs, nothing else
            p_o = o + ((bos + t) * HV + i_hv) * DV + o_v
            tl.store(p_o, zeros.to(p_o.dtype.element_ty), mask=mask_v)


@triton.jit
def _meta_kernel(
    cu_seqlens,
    state_indices,
    rec_bank,
    rec_nrec,
    S,
    T,
    s_cu,
    s_idx,
    L: tl.constexpr,
    HAS_TOKENS: tl.constexpr,
):
    i_b = tl.program_id(0)
    slot = tl.load(state_indices + i_b * s_idx).to(tl.int64)
    valid = (slot >= 0) & (slot < S)
    slot = tl.where(valid, slot, 0)
    if HAS_TOKENS:
        eos = tl.minimum(tl.maximum(tl.load(cu_seqlens + (i_b + 1) * s_cu).to(tl.int64), 0), T)
        n_new = eos - tl.minimum(tl.maximum(tl.load(cu_seqlens + i_b * s_cu).to(tl.int64), 0), T)
        active = valid & (n_new > 0)
        bank = tl.load(rec_bank + slot)
        tl.store(rec_bank + slot, 1 - bank, mask=active)
        tl.store(rec_nrec + slot, tl.minimum(n_new, L).to(tl.int32), mask=active)
    else:
        tl.store(rec_nrec + slot, tl.zeros([], dtype=tl.int32), mask=valid)


def _block_v(dv: int) -> int:
    return min(32, triton.next_power_of_2(dv))


def verify_gated_delta_rule(args: GatedDeltaRuleArgs, out: torch.Tensor | None) -> None:
    """A verify call (outputs into ``out``) or the flush (``KernelMode.FLUSH``): one kernel pair either way.

    Every input, the state pool included (either slot layout the op accepts), is read through its strides (no
    copies); ``out`` is contiguous (checked by the op) and rows no request covers are zeroed by a third small
    launch."""
    pool, state_indices, records, pending = args.state_pool, args.state_indices, args.records, args.pending
    if pool.device.type == "npu" and is_value_major(pool):
        # bishengir-compile plans the strided [Dk, tileV] state tile of this layout past the 192 KiB Unified
        # Buffer (tests/test_triton_ascend_compile.py, GPU_ONLY_CASES); the layout is vLLM's GPU one.
        raise BackendUnavailableError(
            "verify_gated_delta_rule: the triton backend does not compile a value-major state_pool (vLLM's GPU "
            f"layout, slot strides {tuple(pool.stride()[1:])}) for Ascend; pass [HV, Dk, Dv] slots there"
        )
    num_rows = state_indices.shape[0]
    num_slots, hv, dk, dv = pool.shape
    has_tokens = args.mode == KernelMode.VERIFY
    num_tokens = 0 if args.q is None else args.q.shape[0]
    if has_tokens:
        assert out is not None and args.q is not None and args.cu_seqlens is not None
        q, k, v, g, beta = args.q, args.k, args.v, args.g, args.beta
        assert k is not None and v is not None and g is not None and beta is not None
        o, cu = out, args.cu_seqlens
        zero_uncovered_rows(o, cu)
        if q.shape[0] == 0:
            return
        strides = (*q.stride(), *k.stride(), *v.stride(), *g.stride(), *beta.stride(), cu.stride(0))
    else:
        # Dummy pointers: HAS_TOKENS=False removes every access to them.
        q = k = v = g = beta = o = pool
        cu = state_indices
        strides = (0,) * 14
    if num_rows == 0:
        return
    bv = _block_v(dv)
    cap = records.max_tokens_per_step
    _verify_kernel[(num_rows * hv, triton.cdiv(dv, bv))](
        q, k, v, g, beta, o,
        cu, state_indices, pending,
        pool, *pool.stride(),
        records.k, records.g, records.u, records.bank, records.num_recorded,
        args.scale, num_slots, num_tokens, *strides, state_indices.stride(0), pending.stride(0),
        H=records.num_k_heads, HV=hv, DK=dk, DV=dv, L=cap,
        BK=triton.next_power_of_2(dk), BV=bv, USE_L2NORM=args.use_qk_l2norm, HAS_TOKENS=has_tokens,
        num_warps=4,
    )  # fmt: skip
    _meta_kernel[(num_rows,)](
        cu, state_indices, records.bank, records.num_recorded, num_slots, num_tokens, strides[-1],
        state_indices.stride(0),
        L=cap, HAS_TOKENS=has_tokens,
    )  # fmt: skip
