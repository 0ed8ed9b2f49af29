"""Native CPU backend of verify_causal_conv1d / flush_conv_pending (``csrc/cpu/verify_causal_conv1d.cpp``).

The reference's semantics in one C++ call over (row, channel block) items: the committed state formed in fp32,
the W taps of each token as dense multiply-adds, the state written once, the inputs recorded. Reads strided
inputs and either conv state layout in place.
"""

from __future__ import annotations

import torch

from ascend_spec.cpu import native
from ascend_spec.gdn.protocol import KernelMode
from ascend_spec.gdn.verify_causal_conv1d import CausalConv1dArgs

KERNEL = "verify_causal_conv1d"
Arguments = native.arguments_struct(
    "ConvArgs",
    (
        "mode", "x", "weight", "bias", "cu_seqlens", "state_indices", "pending", "pool", "out", "rec_x",
        "rec_num", "num_tokens", "num_rows", "num_slots", "channels", "width", "capacity",
        "x_s0", "x_s1", "w_s0", "w_s1", "bias_s0", "p_s0", "p_s1", "p_s2", "idx_s0", "cu_s0", "pending_s0",
        "x_dtype", "w_dtype", "bias_dtype", "pool_dtype", "rec_dtype", "cu_dtype", "idx_dtype", "silu", "threads",
    ),
)  # fmt: skip
_DTYPES, _INDEX = native.DTYPE_CODES, native.INDEX_CODES


def verify_causal_conv1d(args: CausalConv1dArgs, out: torch.Tensor | None) -> None:
    """A verify call (``y`` into ``out``) or a flush (``KernelMode.FLUSH`` / ``FLUSH_AND_RESET``)."""
    pool, idx, rec, pending = args.conv_state_pool, args.state_indices, args.records, args.pending
    x, weight, bias, cu = args.x, args.weight, args.bias, args.cu_seqlens
    if args.mode == KernelMode.VERIFY:
        assert x is not None and weight is not None and cu is not None and out is not None
        num_tokens, x_s, w_s = x.shape[0], x.stride(), weight.stride()
        x_dtype, w_dtype, cu_s0, cu_dtype = (
            _DTYPES[x.dtype],
            _DTYPES[weight.dtype],
            cu.stride(0),
            _INDEX[cu.dtype],
        )
    else:
        num_tokens, x_s, w_s, x_dtype, w_dtype, cu_s0, cu_dtype = 0, (0, 0), (0, 0), 0, 0, 0, 0
    bias_s0, bias_dtype = (0, 0) if bias is None else (bias.stride(0), _DTYPES[bias.dtype])
    ptr = native.ptr
    native.call(
        KERNEL,
        Arguments(
            int(args.mode), ptr(x), ptr(weight), ptr(bias), ptr(cu), ptr(idx), ptr(pending), ptr(pool), ptr(out),
            ptr(rec.x), ptr(rec.num_recorded), num_tokens, idx.shape[0], pool.shape[0], pool.shape[1],
            pool.shape[2] + 1, rec.max_tokens_per_step, *x_s, *w_s, bias_s0, *pool.stride(), idx.stride(0),
            cu_s0, pending.stride(0), x_dtype, w_dtype, bias_dtype, _DTYPES[pool.dtype], _DTYPES[rec.x.dtype],
            cu_dtype, _INDEX[idx.dtype], int(args.silu), torch.get_num_threads(),
        ),
    )  # fmt: skip
