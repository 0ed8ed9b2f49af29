"""Triton kernel for max-softmax partials: one pass over [N, V] logits with a running (max, sum) per row.

Imported lazily by the dispatch (``TRITON_INTERPRET`` is read when ``@triton.jit`` runs).
Each program owns BLOCK_N rows and walks the vocabulary in BLOCK_V tiles: per tile one max reduction, one exp per
element, and a rescale of the running sum by ``exp((m_old - m_new) / T)``. Logits are loaded in their own dtype
and upcast to fp32 in registers; nothing of size N x V is written.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ascend_spec.backend import triton_interpret_enabled
from ascend_spec.ops.max_softmax_confidence import MaxSoftmaxArgs, MaxSoftmaxPartials


@triton.jit
def _max_softmax_partials_kernel(
    x_ptr,
    max_ptr,
    sum_ptr,
    n_rows,
    n_cols,
    stride_n,
    stride_v,
    inv_t,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_V)
    row_off = rows.to(tl.int64) * stride_n
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    for v0 in range(0, n_cols, BLOCK_V):
        c = v0 + cols
        mask = row_ok[:, None] & (c < n_cols)[None, :]
        ptrs = x_ptr + row_off[:, None] + c.to(tl.int64)[None, :] * stride_v
        x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        # While a row has seen only -inf, subtract 0 instead of -inf so exp(-inf - -inf) never makes a NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp((x - m_safe[:, None]) * inv_t)
        s = s * tl.exp((m - m_safe) * inv_t) + tl.sum(p, axis=1)
        m = m_new
    tl.store(max_ptr + rows, m, mask=row_ok)
    tl.store(sum_ptr + rows, s, mask=row_ok)


def _blocks(n_cols: int) -> tuple[int, int]:
    """Tile shape: up to 4096 (interpreter: 1024) vocabulary columns, rows stacked up to the same element count."""
    cap = 1024 if triton_interpret_enabled() else 4096
    block_v = min(triton.next_power_of_2(n_cols), cap)
    block_n = max(1, min(16, cap // block_v))
    return block_n, block_v


def max_softmax_partials(args: MaxSoftmaxArgs, out: MaxSoftmaxPartials) -> None:
    logits = args.logits
    n, v = logits.shape
    block_n, block_v = _blocks(v)
    grid = (triton.cdiv(n, block_n),)
    _max_softmax_partials_kernel[grid](
        logits,
        out.row_max,
        out.row_sumexp,
        n,
        v,
        logits.stride(0),
        logits.stride(1),
        1.0 / args.temperature,
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        num_warps=8 if block_n * block_v >= 4096 else 4,
    )
