"""Triton kernels for verify_causal_conv1d / flush_conv_pending (imported lazily: TRITON_INTERPRET matters).

Grid ``(B, ceil(C / BLOCK_C))``: each program owns one row's channel slice of BOTH the conv state and the
records of that row's slot. Nobody else reads or writes those bytes in the call (state slots are distinct per
call), so no program can overwrite records another program still has to replay. Inside a program every read of
the old state/records (the commit window and the first token chunk's taps) happens before a barrier, every
write after it. The per-slot record count is shared by all channel programs of a row, so a second tiny kernel
updates it after the main one (stream order replaces a grid-wide barrier).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascend_spec.gdn.protocol import KernelMode
from ascend_spec.gdn.triton import zero_uncovered_rows
from ascend_spec.gdn.verify_causal_conv1d import CausalConv1dArgs

# [BLOCK_T, BLOCK_C] tiles of 8 x 64: Ascend's compiler keeps every tap's loads and pointers in UB (192 KiB);
# 16 x 128 needs about 660 KiB there (tests/test_triton_ascend_compile.py).
_BLOCK_C = 64
_BLOCK_B = 128


@triton.jit
def _cast(v, dtype: tl.constexpr):
    """fp32 -> dtype with round-to-nearest-even also for bf16 (the interpreter truncates a plain ``.to``)."""
    if dtype == tl.bfloat16:
        u = v.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        v = u.to(tl.float32, bitcast=True)
    return v.to(dtype)


@triton.jit
def _taps(
    x_ptr,
    w_ptr,
    pool_ptr,
    rec_ptr,
    slot,
    p,
    bos,
    n,
    t0,
    offs_c,
    cmask,
    active,
    sx_t,
    sx_c,
    sw_c,
    sw_w,
    sp_s,
    sp_c,
    sp_k,
    sr_s,
    sr_t,
    W: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """fp32 ``[BLOCK_T, BLOCK_C]`` conv sums for tokens t0.. of one row; taps left of the row come from the
    committed state, i.e. from (old pool state ++ recorded x) at offset ``p``."""
    t = t0 + tl.arange(0, BLOCK_T)
    tmask = t < n
    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for j in tl.static_range(W):
        i = t - (W - 1) + j  # position relative to the row's first token
        m_x = tmask & (i >= 0)
        xv = tl.load(
            x_ptr + (bos + i)[:, None] * sx_t + offs_c[None, :] * sx_c,
            mask=m_x[:, None] & cmask[None, :],
            other=0.0,
        ).to(tl.float32)
        q = p + (W - 1) + i  # index into (old pool state ++ recorded x)
        old = tmask & (i < tl.where(active, 0, -W))  # scalar flags folded into bounds (see _committed)
        m_p = old & (q < W - 1)
        m_r = old & (q >= W - 1)
        pv = tl.load(
            pool_ptr + slot * sp_s + offs_c[None, :] * sp_c + q[:, None] * sp_k,
            mask=m_p[:, None] & cmask[None, :],
            other=0.0,
        ).to(tl.float32)
        rv = tl.load(
            rec_ptr + slot * sr_s + (q - (W - 1))[:, None] * sr_t + offs_c[None, :],
            mask=m_r[:, None] & cmask[None, :],
            other=0.0,
        ).to(tl.float32)
        wj = tl.load(w_ptr + offs_c * sw_c + j * sw_w, mask=cmask, other=0.0).to(tl.float32)
        acc += (xv + pv + rv) * wj[None, :]
    return acc


@triton.jit
def _emit(
    acc,
    x_ptr,
    b_ptr,
    y_ptr,
    rec_ptr,
    slot,
    bos,
    n,
    t0,
    L,
    C,
    offs_c,
    cmask,
    valid,
    sx_t,
    sx_c,
    sr_s,
    sr_t,
    s_b,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Bias, activation, store y (zeros on padding rows) and record this chunk's inputs for the slot."""
    t = t0 + tl.arange(0, BLOCK_T)
    tmask = t < n
    m2 = tmask[:, None] & cmask[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_c * s_b, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    acc = tl.where(valid, acc, 0.0)
    tl.store(y_ptr + (bos + t)[:, None] * C + offs_c[None, :], _cast(acc, y_ptr.dtype.element_ty), mask=m2)
    xv = tl.load(x_ptr + (bos + t)[:, None] * sx_t + offs_c[None, :] * sx_c, mask=m2, other=0.0)
    m_rec = m2 & (t < tl.where(valid, L, 0))[:, None]
    tl.store(
        rec_ptr + slot * sr_s + t[:, None] * sr_t + offs_c[None, :],
        xv.to(rec_ptr.dtype.element_ty),
        mask=m_rec,
    )


@triton.jit
def _committed(
    pool_ptr,
    rec_ptr,
    slot,
    p,
    offs_c,
    cmask,
    act,
    sp_s,
    sp_c,
    sp_k,
    sr_s,
    sr_t,
    W: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """``[BLOCK_K, BLOCK_C]`` committed state: entries p .. p+W-2 of (old pool state ++ recorded x)."""
    # Scalar flags are folded into integer bounds: the interpreter makes (bool block & bool scalar) int32.
    k = tl.arange(0, BLOCK_K)
    q = p + k
    kmask = k < tl.where(act, W - 1, 0)
    m_p = kmask & (q < W - 1)
    m_r = kmask & (q >= W - 1)
    pv = tl.load(
        pool_ptr + slot * sp_s + offs_c[None, :] * sp_c + q[:, None] * sp_k,
        mask=m_p[:, None] & cmask[None, :],
        other=0.0,
    )
    rv = tl.load(
        rec_ptr + slot * sr_s + (q - (W - 1))[:, None] * sr_t + offs_c[None, :],
        mask=m_r[:, None] & cmask[None, :],
        other=0.0,
    )
    return pv.to(tl.float32) + rv.to(tl.float32)


@triton.jit
def _verify_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    pool_ptr,
    rec_ptr,
    nrec_ptr,
    cu_ptr,
    idx_ptr,
    pend_ptr,
    C,
    L,
    S,
    T,
    sx_t,
    sx_c,
    sw_c,
    sw_w,
    sp_s,
    sp_c,
    sp_k,
    sr_s,
    sr_t,
    s_b,
    s_cu,
    s_idx,
    s_pend,
    W: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
):
    b = tl.program_id(0)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = offs_c < C
    # cu_seqlens entries clamped into [0, T] (checks off): no row reads x or writes y outside their T rows.
    bos = tl.minimum(tl.maximum(tl.load(cu_ptr + b * s_cu).to(tl.int64), 0), T)
    n = tl.minimum(tl.maximum(tl.load(cu_ptr + (b + 1) * s_cu).to(tl.int64), 0), T) - bos
    raw = tl.load(idx_ptr + b * s_idx).to(tl.int64)
    valid = (raw >= 0) & (raw < S)  # out of range (checks off): a padding row, nothing read or written
    slot = tl.where(valid, raw, 0)
    active = valid & (n > 0)
    nr = tl.load(nrec_ptr + slot, mask=valid, other=0)
    p = tl.minimum(tl.maximum(tl.load(pend_ptr + b * s_pend), 0), nr)
    p = tl.minimum(p, L).to(tl.int64)

    # Everything that reads the old state / old records of the slot, then the barrier, then the writes.
    st = _committed(
        pool_ptr, rec_ptr, slot, p, offs_c, cmask, active, sp_s, sp_c, sp_k, sr_s, sr_t, W, BLOCK_K
    )
    acc = _taps(
        x_ptr, w_ptr, pool_ptr, rec_ptr, slot, p, bos, n, 0, offs_c, cmask, active,
        sx_t, sx_c, sw_c, sw_w, sp_s, sp_c, sp_k, sr_s, sr_t, W, BLOCK_T, BLOCK_C,
    )  # fmt: skip
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_K)
    m_st = (k < tl.where(active & (p > 0), W - 1, 0))[:, None] & cmask[None, :]
    tl.store(
        pool_ptr + slot * sp_s + offs_c[None, :] * sp_c + k[:, None] * sp_k,
        _cast(st, pool_ptr.dtype.element_ty),
        mask=m_st,
    )
    _emit(
        acc, x_ptr, b_ptr, y_ptr, rec_ptr, slot, bos, n, 0, L, C, offs_c, cmask, valid,
        sx_t, sx_c, sr_s, sr_t, s_b, HAS_BIAS, SILU, BLOCK_T,
    )  # fmt: skip
    # Later chunks only see taps inside this call's tokens (BLOCK_T >= W-1): no old data is read any more.
    for t0 in range(BLOCK_T, n, BLOCK_T):
        acc = _taps(
            x_ptr, w_ptr, pool_ptr, rec_ptr, slot, p, bos, n, t0, offs_c, cmask, active,
            sx_t, sx_c, sw_c, sw_w, sp_s, sp_c, sp_k, sr_s, sr_t, W, BLOCK_T, BLOCK_C,
        )  # fmt: skip
        _emit(
            acc, x_ptr, b_ptr, y_ptr, rec_ptr, slot, bos, n, t0, L, C, offs_c, cmask, valid,
            sx_t, sx_c, sr_s, sr_t, s_b, HAS_BIAS, SILU, BLOCK_T,
        )  # fmt: skip


@triton.jit
def _flush_kernel(
    pool_ptr,
    rec_ptr,
    nrec_ptr,
    idx_ptr,
    pend_ptr,
    C,
    L,
    S,
    sp_s,
    sp_c,
    sp_k,
    sr_s,
    sr_t,
    s_idx,
    s_pend,
    W: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = offs_c < C
    raw = tl.load(idx_ptr + b * s_idx).to(tl.int64)
    valid = (raw >= 0) & (raw < S)
    slot = tl.where(valid, raw, 0)
    nr = tl.load(nrec_ptr + slot, mask=valid, other=0)
    p = tl.minimum(tl.minimum(tl.maximum(tl.load(pend_ptr + b * s_pend), 0), nr), L).to(tl.int64)
    act = valid & (p > 0)
    st = _committed(pool_ptr, rec_ptr, slot, p, offs_c, cmask, act, sp_s, sp_c, sp_k, sr_s, sr_t, W, BLOCK_K)
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_K)
    tl.store(
        pool_ptr + slot * sp_s + offs_c[None, :] * sp_c + k[:, None] * sp_k,
        _cast(st, pool_ptr.dtype.element_ty),
        mask=(k < tl.where(act, W - 1, 0))[:, None] & cmask[None, :],
    )


@triton.jit
def _counts_kernel(
    cu_ptr,
    idx_ptr,
    nrec_ptr,
    pend_ptr,
    B,
    L,
    S,
    T,
    s_cu,
    s_idx,
    s_pend,
    MODE: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """MODE = KernelMode: VERIFY (0) sets num_recorded[slot] = row length for active rows; FLUSH (1) and
    FLUSH_AND_RESET (2) set num_recorded[slot] = 0, and FLUSH_AND_RESET also zeroes pending."""
    offs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    m = offs < B
    raw = tl.load(idx_ptr + offs * s_idx, mask=m, other=-1).to(tl.int64)
    valid = m & (raw >= 0) & (raw < S)
    slot = tl.where(valid, raw, 0)
    if MODE == 0:
        eos = tl.minimum(tl.maximum(tl.load(cu_ptr + (offs + 1) * s_cu, mask=m, other=0).to(tl.int64), 0), T)
        n = eos - tl.minimum(tl.maximum(tl.load(cu_ptr + offs * s_cu, mask=m, other=0).to(tl.int64), 0), T)
        tl.store(nrec_ptr + slot, tl.minimum(n, L).to(tl.int32), mask=valid & (n > 0))
    else:
        tl.store(nrec_ptr + slot, tl.zeros((BLOCK_B,), dtype=tl.int32), mask=valid)
        if MODE == 2:
            tl.store(pend_ptr + offs * s_pend, tl.zeros((BLOCK_B,), dtype=tl.int32), mask=m)


def _blocks(width: int) -> tuple[int, int]:
    block_k = triton.next_power_of_2(width - 1)
    return block_k, max(8, block_k)


def verify_causal_conv1d(args: CausalConv1dArgs, out: torch.Tensor | None) -> None:
    """A verify call (``y`` into ``out``) or a flush: the main kernel, then the per-slot counts kernel."""
    if args.mode == KernelMode.VERIFY:
        assert out is not None
        _verify(args, out)
    else:
        _flush(args)


def _verify(args: CausalConv1dArgs, y: torch.Tensor) -> None:
    x, weight, bias, cu_seqlens = args.x, args.weight, args.bias, args.cu_seqlens
    assert x is not None and weight is not None and cu_seqlens is not None
    pool, state_indices, records, pending = (
        args.conv_state_pool,
        args.state_indices,
        args.records,
        args.pending,
    )
    channels = x.shape[1]
    nrows = state_indices.shape[0]
    width = weight.shape[1]
    zero_uncovered_rows(y, cu_seqlens)
    if nrows == 0:
        return
    rec = records.x
    block_k, block_t = _blocks(width)
    grid = (nrows, triton.cdiv(channels, _BLOCK_C))
    _verify_kernel[grid](
        x, weight, bias if bias is not None else weight, y, pool, rec, records.num_recorded,
        cu_seqlens, state_indices, pending, channels, rec.shape[1], pool.shape[0], x.shape[0],
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
        pool.stride(0), pool.stride(1), pool.stride(2), rec.stride(0), rec.stride(1),
        bias.stride(0) if bias is not None else 0, cu_seqlens.stride(0), state_indices.stride(0), pending.stride(0),
        W=width, BLOCK_K=block_k, BLOCK_T=block_t, BLOCK_C=_BLOCK_C, HAS_BIAS=bias is not None, SILU=args.silu,
    )  # fmt: skip
    _counts_kernel[(triton.cdiv(nrows, _BLOCK_B),)](
        cu_seqlens, state_indices, records.num_recorded, pending, nrows, rec.shape[1], pool.shape[0], x.shape[0],
        cu_seqlens.stride(0), state_indices.stride(0), pending.stride(0),
        MODE=int(KernelMode.VERIFY), BLOCK_B=_BLOCK_B,
    )  # fmt: skip


def _flush(args: CausalConv1dArgs) -> None:
    pool, state_indices, records, pending = (
        args.conv_state_pool,
        args.state_indices,
        args.records,
        args.pending,
    )
    nrows = state_indices.shape[0]
    if nrows == 0:
        return
    _, channels, wm1 = pool.shape
    rec = records.x
    block_k, _ = _blocks(wm1 + 1)
    _flush_kernel[(nrows, triton.cdiv(channels, _BLOCK_C))](
        pool, rec, records.num_recorded, state_indices, pending, channels, rec.shape[1], pool.shape[0],
        pool.stride(0), pool.stride(1), pool.stride(2), rec.stride(0), rec.stride(1),
        state_indices.stride(0), pending.stride(0),
        W=wm1 + 1, BLOCK_K=block_k, BLOCK_C=_BLOCK_C,
    )  # fmt: skip
    _counts_kernel[(triton.cdiv(nrows, _BLOCK_B),)](
        state_indices, state_indices, records.num_recorded, pending, nrows, rec.shape[1], pool.shape[0], 0,
        0, state_indices.stride(0), pending.stride(0),
        MODE=int(args.mode), BLOCK_B=_BLOCK_B,
    )  # fmt: skip
