"""Triton pieces the GDN verify ops share: zeroing the output rows no request covers (imported lazily).

The verify kernels write the outputs of rows ``[cu_seqlens[0], cu_seqlens[B])`` only. With value checks off a
caller may pass ``cu_seqlens[-1] < T`` (or ``cu_seqlens[0] > 0``); the outputs are still complete, as the
reference's: every token outside that range gets zeros. One launch over ``[T, width]`` tiles that reads two
entries of ``cu_seqlens`` (no host sync) and stores only into uncovered rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK_T = 16
_BLOCK_W = 128


@triton.jit
def _zero_uncovered_kernel(
    out_ptr, cu_ptr, s_cu, B, T, W, BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr
):  # fmt: skip
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    lo = tl.load(cu_ptr).to(tl.int64)
    hi = tl.load(cu_ptr + B * s_cu).to(tl.int64)
    uncovered = (t < T) & ((t < lo) | (t >= hi))
    zeros = tl.zeros((BLOCK_T, BLOCK_W), dtype=tl.float32).to(out_ptr.dtype.element_ty)
    tl.store(
        out_ptr + t.to(tl.int64)[:, None] * W + w[None, :], zeros, mask=uncovered[:, None] & (w < W)[None, :]
    )


def zero_uncovered_rows(out: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    """Zero rows of the contiguous ``out [T, ...]`` outside ``[cu_seqlens[0], cu_seqlens[-1])`` (any strides of
    ``cu_seqlens``)."""
    if out.numel() == 0:
        return
    num_tokens = out.shape[0]
    width = out.numel() // num_tokens
    grid = (triton.cdiv(num_tokens, _BLOCK_T), triton.cdiv(width, _BLOCK_W))
    _zero_uncovered_kernel[grid](
        out, cu_seqlens, cu_seqlens.stride(0), cu_seqlens.shape[0] - 1, num_tokens, width,
        BLOCK_T=_BLOCK_T, BLOCK_W=_BLOCK_W,
    )  # fmt: skip
