"""AscendC backend of verify_causal_conv1d / flush_conv_pending: the compiled NPU op, or the same kernel source
under the host model on CPU tensors.

Kernel: ``csrc/kernels/verify_causal_conv1d.cpp`` (main kernel over (channel tile, row) units, then a one-block
kernel that updates ``num_recorded`` / zeroes ``pending``; state indices outside ``[0, S)`` are padding rows, output
rows outside ``[cu[0], cu[B])`` are zeroed), arguments ``VerifyCausalConv1dArgs``
(``verify_causal_conv1d_tiling.h``, mirrored by :data:`KernelArgs`; ``mode`` is a :class:`KernelMode`). The kernel
takes the weight as fp32 ``[W, C]`` (rows of channels, as the vector unit consumes them) and the bias as fp32; the
runner converts them (C x W floats). NPU binding: ``torch.ops._C_ascend_spec.npu_verify_causal_conv1d`` (its ``y``
copied into ``out``) and ``npu_flush_conv_pending`` (``csrc/torch_binding.cpp``).
"""

from __future__ import annotations

import contextlib
import ctypes

import torch

from ascend_spec.ascendc import host_model, npu_op
from ascend_spec.ascendc.cost_model import Minimum, instructions_of, repeats_of
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.gdn.protocol import KernelMode, padded_slots_int32
from ascend_spec.gdn.verify_causal_conv1d import CausalConv1dArgs

KERNEL = "verify_causal_conv1d"
_POINTERS = ("x", "weightT", "bias", "y", "pool", "rec", "numRecorded", "cu", "idx", "pending")
_INTS = (
    "xType", "recType", "poolType", "numRows", "numTokens", "channels", "width", "maxTokens", "numSlots", "hasBias", "silu",
    "mode", "poolStride", "tokenMajor", "ubBytes",
)  # fmt: skip
KernelArgs = host_model.arguments_struct("VerifyCausalConv1dArgs", _POINTERS, _INTS)
# Tests flip these: run the host model's blocks last-to-first (exposes cross-core order dependence) / other SoCs.
REVERSE_BLOCKS = False
SOC: str | None = None


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()


def slot_layout(pool: torch.Tensor) -> str | None:
    """How a ``[S, C, W-1]`` pool's slots are stored: ``"channel"`` (``[C, W-1]`` dense), ``"token"`` (``[W-1, C]``
    dense viewed transposed: vLLM's default conv layout, vllm-ascend's) or None (any other strides: the runner
    hands the kernel a dense copy). The kernel takes either layout in place, slots any stride apart."""
    _, c, wm1 = pool.shape
    inner = pool.stride()[1:]
    if inner == (wm1, 1) or pool.numel() == 0:
        return "channel"
    if inner == (1, c):
        return "token"
    return None


def tile_channels(
    channels: int, width: int, x_dtype: torch.dtype, rec_dtype: torch.dtype, pool_dtype: torch.dtype
) -> int:
    """Channels per unit the kernel's tiling picks on the host model's SoC (what fits its Unified Buffer)."""
    spec = host_model.soc_spec(SOC)
    fn = host_model.load_kernel(KERNEL).verify_causal_conv1d_tile_channels
    fn.restype = ctypes.c_int64
    args = KernelArgs()
    args.xType, args.recType, args.poolType = (
        DTYPE_CODES[x_dtype],
        DTYPE_CODES[rec_dtype],
        DTYPE_CODES[pool_dtype],
    )
    args.numRows, args.numTokens, args.channels, args.width = 1, 1, channels, width
    args.maxTokens, args.numSlots = 1, 1
    args.hasBias, args.silu, args.mode, args.ubBytes = 1, 1, KernelMode.VERIFY, spec.ub_bytes
    return int(fn(ctypes.c_uint32(spec.vector_cores), ctypes.byref(args)))


def verify_causal_conv1d(args: CausalConv1dArgs, out: torch.Tensor | None) -> None:
    """A verify call (``y`` into ``out``) or a flush (the kernel zeroes pending in ``FLUSH_AND_RESET``)."""
    verify = args.mode == KernelMode.VERIFY
    pool, records, state_indices, pending = (
        args.conv_state_pool,
        args.records,
        args.state_indices,
        args.pending,
    )
    if verify:
        assert (
            out is not None and args.x is not None and args.weight is not None and args.cu_seqlens is not None
        )
        weight_t = args.weight.t().to(torch.float32).contiguous()
        bias32 = None if args.bias is None else args.bias.to(torch.float32).contiguous()
    # Row tensors (B entries) go to the kernel as contiguous int32 copies, whatever their dtype and strides:
    # explicit and cheap, and the one layout the kernel reads.
    idx = padded_slots_int32(state_indices, pool.shape[0])
    cu = _i32(args.cu_seqlens) if verify else None
    x = args.x.contiguous() if verify else None
    layout = slot_layout(pool)
    if pool.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        rec, nrec = records.x, records.num_recorded
        # Either slot layout goes in place (the binding reads it from the strides); any other is copied.
        kept = contextlib.nullcontext(pool) if layout else host_model.written_in_place(pool)
        with kept as work, host_model.written_in_place(pending) as pend:
            if verify:
                y = npu_op("npu_verify_causal_conv1d", KERNEL)(
                    x, weight_t, bias32, cu, work, idx, rec, nrec, pend, args.silu
                )
                out.copy_(y)
            else:
                reset = args.mode == KernelMode.FLUSH_AND_RESET
                npu_op("npu_flush_conv_pending", KERNEL)(work, idx, rec, nrec, pend, reset)
        return
    if idx.shape[0] == 0:
        if verify:
            out.zero_()  # no row covers any token
        return
    spec = host_model.soc_spec(SOC)
    rec = records.x
    ptr = host_model.tensor_ptr
    num_slots, channels, _ = pool.shape
    # The slots' storage ([S, W-1, C] for token-major slots), their stride kept; any other layout: a dense copy.
    storage = pool.transpose(1, 2) if layout == "token" else pool
    with host_model.slots_in_place(storage) as work, host_model.written_in_place(pending) as pend:
        y = out if verify else None
        kernel_args = KernelArgs(
            ptr(x), ptr(weight_t if verify else None), ptr(bias32 if verify else None), ptr(y), ptr(work), ptr(rec),
            ptr(records.num_recorded), ptr(cu), ptr(idx), ptr(pend),
            DTYPE_CODES[x.dtype if x is not None else rec.dtype], DTYPE_CODES[rec.dtype], DTYPE_CODES[work.dtype],
            idx.shape[0], 0 if x is None else x.shape[0], channels, args.width, rec.shape[1], num_slots,
            verify and bias32 is not None, args.silu, int(args.mode), work.stride(0), int(layout == "token"),
            spec.ub_bytes,
        )  # fmt: skip
        tensors = [
            t for t in (x, weight_t if verify else None, bias32 if verify else None, y, work, rec,
                        records.num_recorded, cu, idx, pend) if t is not None
        ]  # fmt: skip
        host_model.launch(
            KERNEL,
            "verify_causal_conv1d_host",
            kernel_args,
            tensors=tensors,
            soc=spec,
            reverse_blocks=REVERSE_BLOCKS,
        )


def instruction_minimum(
    lengths: list[int],
    replayed: list[int],
    channels: int,
    width: int,
    x_bytes: int,
    rec_bytes: int,
    pool_bytes: int,
    has_bias: bool,
    silu: bool,
) -> Minimum:
    """What a verify call of rows with ``lengths`` tokens and ``replayed`` pending records each must do: read x,
    the weights once, each row's W-1 committed inputs (state and records), write y, this call's records and the
    state of rows that replayed; per row, W multiply-adds, the bias and SiLU (negate, exp, add, divide) as passes
    over its [n, C] fp32 block (one count-form pass per tap: the channels of consecutive tokens are contiguous)."""
    live = [i for i, n in enumerate(lengths) if n > 0]
    tokens = sum(lengths)
    state = channels * (width - 1)
    reads = tokens * channels * x_bytes + channels * (width + int(has_bias)) * 4
    reads += sum(min(replayed[i], width - 1) * channels * rec_bytes + state * pool_bytes for i in live)
    writes = (
        tokens * channels * (x_bytes + rec_bytes)
        + sum(1 for i in live if replayed[i] > 0) * state * pool_bytes
    )
    passes = width + int(has_bias) + 4 * int(silu)
    repeats = sum(passes * repeats_of(lengths[i] * channels) for i in live)
    instructions = sum(passes * instructions_of(repeats_of(lengths[i] * channels)) for i in live)
    return Minimum(
        gm_read_bytes=reads, gm_write_bytes=writes, vector_repeats=repeats, vector_instructions=instructions,
        parallel_units=len(live) * max(1, channels // 16),
    )  # fmt: skip


# docs/host_model.md, "Cost model": measured ratios to instruction_minimum this kernel must stay within
# (tests/test_kernel_cost_bounds.py).
VECTOR_INSTRUCTION_RATIO_BOUND = 25
TIME_RATIO_BOUND = 80
