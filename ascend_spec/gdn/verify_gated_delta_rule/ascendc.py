"""AscendC backend of verify_gated_delta_rule / flush_pending: the compiled NPU op, or the same kernel source under
the host model on CPU tensors.

Kernel: ``csrc/kernels/verify_gated_delta_rule.cpp`` (main kernel over (row, value head, value tile) units, then
a one-block kernel that flips ``bank`` and sets ``num_recorded``), arguments ``VerifyGatedDeltaRuleArgs``
(``verify_gated_delta_rule_tiling.h``, mirrored by :data:`KernelArgs`; ``mode`` is a :class:`KernelMode`). The
kernel takes g and beta as fp32 and cu_seqlens / state_indices / pending as int32; the runner converts them
(T x HV floats, B ints). NPU binding (``csrc/torch_binding.cpp``):
``torch.ops._C_ascend_spec.npu_verify_gated_delta_rule(q, k, v, g32, beta32, cu32, idx32, pending, pool, rec_k,
rec_g, rec_u, bank, num_recorded, scale, use_qk_l2norm) -> o`` (copied into ``out``) and
``npu_flush_gated_delta_rule(idx32, pending, pool, rec_k, rec_g, rec_u, bank, num_recorded)``.
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model, npu_op
from ascend_spec.ascendc.cost_model import Minimum, instructions_of, repeats_of
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.gdn.protocol import KernelMode, padded_slots_int32
from ascend_spec.gdn.verify_gated_delta_rule import GatedDeltaRuleArgs, is_value_major

KERNEL = "verify_gated_delta_rule"
_POINTERS = (
    "q", "k", "v", "g", "beta", "o", "cu", "idx", "pending", "pool", "recK", "recG", "recU", "bank", "numRecorded",
)  # fmt: skip
_INTS = (
    "xType", "numTokens", "numRows", "numHeads", "numVHeads", "dk", "dv", "numSlots", "maxTokens", "poolStride",
    "useL2norm", "mode", "valueMajor", "ubBytes",
)  # fmt: skip
KernelArgs = host_model.arguments_struct("VerifyGatedDeltaRuleArgs", _POINTERS, _INTS, floats=("scale",))
# Tests flip these: run the host model's blocks last-to-first (exposes cross-core order dependence) / other SoCs.
REVERSE_BLOCKS = False
SOC: str | None = None


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()


def tiling(num_rows: int, num_heads: int, num_v_heads: int, dk: int, dv: int, x_dtype: torch.dtype) -> dict:
    """The tiling the kernel picks on the host model's SoC: value tile, token chunk, cores, UB bytes."""
    spec = host_model.soc_spec(SOC)
    fn = host_model.load_kernel(KERNEL).verify_gated_delta_rule_tiling
    fn.restype = None
    args = KernelArgs()
    args.xType, args.numTokens, args.numRows, args.numHeads = DTYPE_CODES[x_dtype], 1, num_rows, num_heads
    args.numVHeads, args.dk, args.dv, args.numSlots, args.maxTokens = num_v_heads, dk, dv, 1, 1
    args.poolStride, args.mode, args.ubBytes, args.scale = (
        num_v_heads * dk * dv,
        KernelMode.VERIFY,
        spec.ub_bytes,
        1.0,
    )
    out = (ctypes.c_int64 * 4)()
    fn(ctypes.c_uint32(spec.vector_cores), ctypes.byref(args), out)
    return {"tile_v": out[0], "tile_t": out[1], "block_dim": out[2], "ub_bytes": out[3]}


def verify_gated_delta_rule(args: GatedDeltaRuleArgs, out: torch.Tensor | None) -> None:
    """A verify call (outputs into ``out``) or the flush (``KernelMode.FLUSH``); pending is zeroed by the op."""
    verify = args.mode == KernelMode.VERIFY
    records, pool = args.records, args.state_pool
    # Value-major slots (the [S, HV, Dk, Dv] view of dense [HV, Dv, Dk] slots, vllm-ascend's and vLLM's layout): the
    # kernel reads and writes their storage, [S, HV, Dv, Dk], whose Dk rows are the rows of its state tile.
    value_major = is_value_major(pool)
    rec = (records.k, records.g, records.u, records.bank, records.num_recorded)
    idx32, pend32 = padded_slots_int32(args.state_indices, pool.shape[0]), _i32(args.pending)
    if verify:
        assert out is not None and args.q is not None and args.k is not None and args.v is not None
        assert args.g is not None and args.beta is not None and args.cu_seqlens is not None
        tokens = (
            args.q.contiguous(), args.k.contiguous(), args.v.contiguous(), args.g.to(torch.float32).contiguous(),
            args.beta.to(torch.float32).contiguous(),
        )  # fmt: skip
        cu32 = _i32(args.cu_seqlens)
    if pool.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        if verify:
            o = npu_op("npu_verify_gated_delta_rule", KERNEL)(
                *tokens, cu32, idx32, pend32, pool, *rec, args.scale, args.use_qk_l2norm
            )
            out.copy_(o)
        else:
            npu_op("npu_flush_gated_delta_rule", KERNEL)(idx32, pend32, pool, *rec)
        return
    if verify and idx32.shape[0] == 0:
        out.zero_()  # no row covers any token
    if idx32.shape[0] == 0 or (verify and tokens[0].shape[0] == 0):
        return
    spec = host_model.soc_spec(SOC)
    q, k, v, g, beta = tokens if verify else (None,) * 5
    cu = cu32 if verify else None
    num_slots, hv, dk, dv = pool.shape
    ptr = host_model.tensor_ptr
    with host_model.slots_in_place(pool.transpose(-1, -2) if value_major else pool) as work:
        kernel_args = KernelArgs(
            ptr(q), ptr(k), ptr(v), ptr(g), ptr(beta), ptr(out if verify else None), ptr(cu), ptr(idx32),
            ptr(pend32), ptr(work), *(ptr(t) for t in rec),
            DTYPE_CODES[v.dtype if v is not None else torch.float32], 0 if q is None else q.shape[0], idx32.shape[0],
            records.num_k_heads, hv, dk, dv, num_slots, records.max_tokens_per_step, work.stride(0),
            args.use_qk_l2norm, int(args.mode), int(value_major), spec.ub_bytes, args.scale,
        )  # fmt: skip
        tensors = [
            t
            for t in (q, k, v, g, beta, out if verify else None, cu, idx32, pend32, work, *rec)
            if t is not None
        ]
        host_model.launch(
            KERNEL, "verify_gated_delta_rule_host", kernel_args, tensors=tensors, soc=spec,
            reverse_blocks=REVERSE_BLOCKS,
        )  # fmt: skip


# Passes over a [Dk, Dv] fp32 head state a token needs: decay, k-weighted products and their reduction (the
# prediction S^T k), the rank-1 update, q-weighted products and their reduction (the output). A replayed token
# needs the decay and the update only.
VERIFY_STATE_PASSES = 6
REPLAY_STATE_PASSES = 2


def instruction_minimum(
    lengths: list[int], replayed: list[int], num_heads: int, num_v_heads: int, dk: int, dv: int, x_bytes: int
) -> Minimum:
    """What a verify call of rows with ``lengths`` tokens and ``replayed`` pending records each must do: read q,
    k, v, g, beta, each row's state and its pending records once, write o, the state of rows that replayed and
    this call's records once; per token and value head, the state passes above, each at most 255 repeats per
    instruction. Rows without tokens cost nothing."""
    tokens = sum(lengths)
    live = [i for i, n in enumerate(lengths) if n > 0]
    replay = sum(replayed[i] for i in live)
    state_bytes = num_v_heads * dk * dv * 4
    record_token_bytes = 4 * (num_heads * dk + num_v_heads + num_v_heads * dv)
    reads = tokens * (2 * num_heads * dk * x_bytes + num_v_heads * dv * x_bytes + 2 * num_v_heads * 4)
    reads += len(live) * state_bytes + replay * record_token_bytes
    writes = tokens * num_v_heads * dv * x_bytes + sum(1 for i in live if replayed[i] > 0) * state_bytes
    writes += tokens * record_token_bytes
    head_repeats = repeats_of(dk * dv)
    passes = num_v_heads * (VERIFY_STATE_PASSES * tokens + REPLAY_STATE_PASSES * replay)
    return Minimum(
        gm_read_bytes=reads, gm_write_bytes=writes, vector_repeats=passes * head_repeats,
        vector_instructions=passes * instructions_of(head_repeats), parallel_units=len(live) * num_v_heads,
    )  # fmt: skip


# docs/host_model.md, "Cost model": measured ratios to instruction_minimum this kernel must stay within
# (tests/test_kernel_cost_bounds.py).
VECTOR_INSTRUCTION_RATIO_BOUND = 2.0
TIME_RATIO_BOUND = 5
