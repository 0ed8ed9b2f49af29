"""Triton kernel for verify-budget allocation: threshold search instead of a global sort, one launch, no host read.

Imported lazily by the dispatch. One program walks the [B, K] slots in [BLOCK_B, BLOCK_K] tiles of at most 2048
slots (B*K is small: 256 x 16 = 4096 slots at the batch of Huawei's talk on DFlash and DSpark in vLLM):

1. key pass: survival -> fp32, NaN -> 0, clamp to [0, 1], running minimum along K (``tl.associative_scan``),
   then the float's bit pattern as int32 (non-negative floats order like their bits); ineligible slots
   (position >= capacity) get -1, below every real key. Keys go to an int32 scratch [B, K]; the pass also
   counts the E eligible slots and the budget becomes ``T = min(clamp(budget, 0, max_budget), E)``.
2. bisection: the largest key ``t`` with ``#{key >= t} >= T``, 32 fixed steps over [0, bits(1.0)] (each step a
   count over the scratch), so the trip count never depends on values.
3. admit pass: a slot is admitted when ``key > t``, or ``key == t`` and fewer than ``T - #{key > t}`` equal keys
   precede it in flat b-major order (an exclusive prefix count) - the tie rule "lower request, then lower
   position". Per-request counts, offsets and the draft indices are written in the same pass, running sums
   carried across tiles; the tail of ``draft_index`` is then filled with -1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ascend_spec.ops.allocate_verify_budget import VerifyAllocation, VerifyBudgetArgs

ONE_BITS: tl.constexpr = tl.constexpr(0x3F800000)  # bit pattern of 1.0f, the largest key
# Slots per [BLOCK_B, BLOCK_K] tile: Ascend's compiler keeps a tile's temporaries in UB (192 KiB); 4096 slots
# need about 293 KiB there (tests/test_triton_ascend_compile.py), 2048 fit.
_TILE_SLOTS = 2048


@triton.jit
def _min_combine(a, b):
    return tl.minimum(a, b)


@triton.jit
def _allocate_kernel(
    surv_ptr,
    cap_ptr,
    budget_ptr,
    scratch_ptr,
    num_drafts_ptr,
    query_lens_ptr,
    qsl_ptr,
    index_ptr,
    budget_value,
    max_budget,
    n_req,
    n_pos,
    stride_b,
    stride_k,
    stride_cap,
    index_len,
    HAS_CAP: tl.constexpr,
    BUDGET_IN_MEMORY: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    rb = tl.arange(0, BLOCK_B)
    rk = tl.arange(0, BLOCK_K)
    col_ok = rk < n_pos

    # 1. keys -> scratch, count eligible slots.
    n_elig = tl.zeros((), tl.int64)
    for b0 in range(0, n_req, BLOCK_B):
        rows = b0 + rb
        row_ok = rows < n_req
        m2 = row_ok[:, None] & col_ok[None, :]
        ptrs = surv_ptr + rows.to(tl.int64)[:, None] * stride_b + rk[None, :] * stride_k
        s = tl.load(ptrs, mask=m2, other=0.0).to(tl.float32)
        s = tl.where(s != s, 0.0, s)
        s = tl.minimum(tl.maximum(s, 0.0), 1.0)
        s = tl.where(s == 0.0, 0.0, s)  # -0.0 -> +0.0: equal floats must get equal keys
        s = tl.associative_scan(s, 1, _min_combine)
        key = s.to(tl.int32, bitcast=True)
        if HAS_CAP:
            # Clamped in the capacities' own width (an int64 capacity past int32 must not wrap), then narrowed.
            cap = tl.load(cap_ptr + rows.to(tl.int64) * stride_cap, mask=row_ok, other=0).to(tl.int64)
            cap = tl.minimum(tl.maximum(cap, 0), n_pos).to(tl.int32)
        else:
            cap = tl.full((BLOCK_B,), 0, tl.int32) + n_pos
        elig = m2 & (rk[None, :] < cap[:, None])
        key = tl.where(elig, key, -1)
        tl.store(scratch_ptr + rows[:, None] * n_pos + rk[None, :], key, mask=m2)
        n_elig += tl.sum(elig.to(tl.int64))
    if BUDGET_IN_MEMORY:  # noqa: SIM108  (a constexpr branch: only one side is compiled)
        budget = tl.load(budget_ptr).to(tl.int64)
    else:
        budget = tl.zeros((), tl.int64) + budget_value
    budget = tl.minimum(tl.maximum(budget, 0), tl.zeros((), tl.int64) + max_budget)
    budget = tl.minimum(budget, n_elig)
    tl.debug_barrier()  # scratch written above is read by other threads below

    # 2. bisection for the T-th best key t: invariant #{key >= lo} >= T (lo = 0 counts all E eligible slots).
    lo = tl.zeros((), tl.int64)
    hi = tl.zeros((), tl.int64) + ONE_BITS
    for _ in range(32):
        mid = lo + (hi - lo + 1) // 2
        cnt = tl.zeros((), tl.int64)
        for b0 in range(0, n_req, BLOCK_B):
            rows = b0 + rb
            m2 = (rows < n_req)[:, None] & col_ok[None, :]
            key = tl.load(scratch_ptr + rows[:, None] * n_pos + rk[None, :], mask=m2, other=-1)
            cnt += tl.sum((key.to(tl.int64) >= mid).to(tl.int64))
        ok = cnt >= budget
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    thr = lo
    n_gt = tl.zeros((), tl.int64)
    for b0 in range(0, n_req, BLOCK_B):
        rows = b0 + rb
        m2 = (rows < n_req)[:, None] & col_ok[None, :]
        key = tl.load(scratch_ptr + rows[:, None] * n_pos + rk[None, :], mask=m2, other=-1)
        n_gt += tl.sum((key.to(tl.int64) > thr).to(tl.int64))
    need_eq = budget - n_gt  # equal-to-threshold slots still to admit, in flat order

    # 3. admit, count, offsets, indices.
    eq_before = tl.zeros((), tl.int64)
    drafts_before = tl.zeros((), tl.int64)
    tl.store(qsl_ptr, 0)
    for b0 in range(0, n_req, BLOCK_B):
        rows = b0 + rb
        row_ok = rows < n_req
        m2 = row_ok[:, None] & col_ok[None, :]
        key = tl.load(scratch_ptr + rows[:, None] * n_pos + rk[None, :], mask=m2, other=-1).to(tl.int64)
        eq = (key == thr).to(tl.int64)
        eq_row = tl.sum(eq, axis=1)
        eq_rank = eq_before + (tl.cumsum(eq_row, axis=0) - eq_row)[:, None] + (tl.cumsum(eq, axis=1) - eq)
        admitted = (key > thr) | ((eq != 0) & (eq_rank < need_eq))
        n_row = tl.sum(admitted.to(tl.int64), axis=1)
        start = drafts_before + tl.cumsum(n_row, axis=0) - n_row
        tl.store(num_drafts_ptr + rows, n_row.to(tl.int32), mask=row_ok)
        tl.store(query_lens_ptr + rows, (n_row + 1).to(tl.int32), mask=row_ok)
        tl.store(qsl_ptr + rows + 1, (start + n_row + rows + 1).to(tl.int32), mask=row_ok)
        flat = (rows[:, None] * n_pos + rk[None, :]).to(tl.int32)
        tl.store(index_ptr + start[:, None] + rk[None, :], flat, mask=m2 & admitted)
        eq_before += tl.sum(eq_row)
        drafts_before += tl.sum(n_row)
    rl = tl.arange(0, BLOCK_L)
    for l0 in range(0, index_len, BLOCK_L):
        pos = l0 + rl
        tl.store(
            index_ptr + pos,
            tl.full((BLOCK_L,), -1, tl.int32),
            mask=(pos < index_len) & (pos >= drafts_before),
        )


def allocate_verify_budget(args: VerifyBudgetArgs, out: VerifyAllocation) -> None:
    survival, capacities, budget = args.survival, args.capacities, args.total_budget
    b, k = survival.shape
    scratch = torch.empty(b, k, dtype=torch.int32, device=survival.device)
    in_memory = isinstance(budget, torch.Tensor)  # the kernel loads it in its own int dtype
    block_k = triton.next_power_of_2(k)
    block_b = max(1, min(triton.next_power_of_2(b), _TILE_SLOTS // block_k))
    _allocate_kernel[(1,)](
        survival,
        capacities if capacities is not None else out.num_drafts,  # unused pointer when HAS_CAP is False
        budget if in_memory else out.num_drafts,  # unused pointer when the budget is an int
        scratch,
        out.num_drafts,
        out.query_lens,
        out.query_start_loc,
        out.draft_index,
        args.budget_value,
        min(args.max_budget, b * k),
        b,
        k,
        survival.stride(0),
        survival.stride(1),
        capacities.stride(0) if capacities is not None else 0,
        args.index_length,
        HAS_CAP=capacities is not None,
        BUDGET_IN_MEMORY=in_memory,
        BLOCK_B=block_b,
        BLOCK_K=block_k,
        BLOCK_L=1024,
        num_warps=4,
    )
