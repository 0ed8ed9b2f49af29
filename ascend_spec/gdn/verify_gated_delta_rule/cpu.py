"""Native CPU backend of verify_gated_delta_rule / flush_pending (``csrc/cpu/verify_gated_delta_rule.cpp``).

The reference's math (closed-form commit fused with the ``[q; k] S`` projection, chunk form over the call's
tokens) in one C++ call over (row, value head) items: one pass over each committed state, no operator per
step of the algorithm. Takes every input as the engine hands it (strided q/k/v views, int32 or int64 indices,
either state layout) without copies.
"""

from __future__ import annotations

import torch

from ascend_spec.cpu import native
from ascend_spec.gdn.protocol import KernelMode
from ascend_spec.gdn.verify_gated_delta_rule import GatedDeltaRuleArgs

KERNEL = "verify_gated_delta_rule"
Arguments = native.arguments_struct(
    "GdnArgs",
    (
        "mode", "q", "k", "v", "g", "beta", "cu_seqlens", "state_indices", "pending", "pool", "out",
        "rec_k", "rec_g", "rec_u", "rec_bank", "rec_num",
        "num_tokens", "num_rows", "num_slots", "num_heads", "num_v_heads", "dk", "dv", "capacity",
        "q_s0", "q_s1", "q_s2", "k_s0", "k_s1", "k_s2", "v_s0", "v_s1", "v_s2", "g_s0", "g_s1", "b_s0", "b_s1",
        "p_s0", "p_s1", "p_s2", "p_s3", "idx_s0", "cu_s0", "pending_s0",
        "qkv_dtype", "g_dtype", "beta_dtype", "cu_dtype", "idx_dtype", "l2norm", "threads",
    ),
    floats=("scale",),
)  # fmt: skip
_DTYPES, _INDEX = native.DTYPE_CODES, native.INDEX_CODES


def verify_gated_delta_rule(args: GatedDeltaRuleArgs, out: torch.Tensor | None) -> None:
    """A verify call (outputs into ``out``) or, in ``KernelMode.FLUSH``, the flush of the pending records."""
    pool, idx, rec, pending = args.state_pool, args.state_indices, args.records, args.pending
    _, num_v_heads, dk, dv = pool.shape
    if args.mode == KernelMode.FLUSH:
        q = k = v = g = beta = cu = None
        num_tokens, num_heads = 0, rec.num_k_heads
        q_s = k_s = v_s = (0, 0, 0)
        g_s = b_s = (0, 0)
        cu_s0, qkv_dtype, g_dtype, b_dtype, cu_dtype = 0, 0, 0, 0, 0
    else:
        q, k, v, g, beta, cu = args.q, args.k, args.v, args.g, args.beta, args.cu_seqlens
        assert q is not None and k is not None and v is not None and g is not None and beta is not None
        assert cu is not None and out is not None
        num_tokens, num_heads = q.shape[0], q.shape[1]
        q_s, k_s, v_s, g_s, b_s = q.stride(), k.stride(), v.stride(), g.stride(), beta.stride()
        cu_s0, cu_dtype = cu.stride(0), _INDEX[cu.dtype]
        qkv_dtype, g_dtype, b_dtype = _DTYPES[v.dtype], _DTYPES[g.dtype], _DTYPES[beta.dtype]
    ptr = native.ptr
    native.call(
        KERNEL,
        Arguments(
            int(args.mode), ptr(q), ptr(k), ptr(v), ptr(g), ptr(beta), ptr(cu), ptr(idx), ptr(pending),
            ptr(pool), ptr(out), ptr(rec.k), ptr(rec.g), ptr(rec.u), ptr(rec.bank), ptr(rec.num_recorded),
            num_tokens, idx.shape[0], pool.shape[0], num_heads, num_v_heads, dk, dv, rec.max_tokens_per_step,
            *q_s, *k_s, *v_s, *g_s, *b_s, *pool.stride(), idx.stride(0), cu_s0, pending.stride(0),
            qkv_dtype, g_dtype, b_dtype, cu_dtype, _INDEX[idx.dtype], int(args.use_qk_l2norm),
            torch.get_num_threads(), args.scale,
        ),
    )  # fmt: skip
