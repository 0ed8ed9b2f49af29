"""AscendC path of verify_gated_delta_rule / flush_pending: the compiled NPU op, or the same kernel source under
the host model on CPU tensors.

Kernel: ``csrc/kernels/verify_gated_delta_rule.cpp`` (main kernel over (row, value head, value tile) units, then
a one-block kernel that flips ``bank`` and sets ``num_recorded``). The kernel takes g and beta as fp32 and
cu_seqlens / state_indices / pending as int32; the wrapper converts them (T x HV floats, B ints).
NPU binding (lead's ``csrc/torch_binding.cpp``): ``torch.ops._C_ascend_spec.npu_verify_gated_delta_rule(q, k, v,
g32, beta32, cu32, idx32, pending, pool, rec_k, rec_g, rec_u, bank, num_recorded, scale, use_qk_l2norm) -> o``
and ``npu_flush_gated_delta_rule(idx32, pending, pool, rec_k, rec_g, rec_u, bank, num_recorded)``, both calling
``ascend_spec::verify_gated_delta_rule_impl`` (mode 0 / 1).
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.backend import BackendUnavailableError
from ascend_spec.gdn.records import GDNRecords

KERNEL = "verify_gated_delta_rule"
_MODE_VERIFY, _MODE_FLUSH = 0, 1
# Tests flip these: run the host model's blocks last-to-first (exposes cross-core order dependence) / other SoCs.
REVERSE_BLOCKS = False
SOC: str | None = None


def _npu_op(name: str):  # pragma: no cover - needs CANN and an NPU
    op = getattr(torch.ops._C_ascend_spec, name, None)
    if op is None:
        raise BackendUnavailableError(
            f"the loaded ascend_spec._C_ascend_spec has no {name}; rebuild the extension with "
            "csrc/kernels/verify_gated_delta_rule.cpp"
        )
    return op


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()


def tiling(num_rows: int, num_heads: int, num_v_heads: int, dk: int, dv: int, x_dtype: torch.dtype) -> dict:
    """The tiling the kernel picks on the host model's SoC: value tile, token chunk, cores, UB bytes."""
    spec = host_model.soc_spec(SOC)
    fn = host_model.load_kernel(KERNEL).verify_gated_delta_rule_tiling
    fn.restype = None
    out = (ctypes.c_int64 * 4)()
    ints = (num_rows, num_heads, num_v_heads, dk, dv, DTYPE_CODES[x_dtype], spec.ub_bytes)
    fn(ctypes.c_uint32(spec.vector_cores), *(ctypes.c_int64(v) for v in ints), out)
    return {"tile_v": out[0], "tile_t": out[1], "block_dim": out[2], "ub_bytes": out[3]}


def _launch(
    *,
    inputs: tuple[torch.Tensor, ...] | None,
    o: torch.Tensor | None,
    cu: torch.Tensor | None,
    idx: torch.Tensor,
    pending: torch.Tensor,
    pool: torch.Tensor,
    records: GDNRecords,
    scale: float,
    use_qk_l2norm: bool,
    mode: int,
) -> None:
    """Run the kernel pair under the host model; ``pool`` must be contiguous (written in place)."""
    spec = host_model.soc_spec(SOC)
    q, k, v, g, beta = inputs if inputs is not None else (None,) * 5
    num_slots, hv, dk, dv = pool.shape
    ptr = host_model.tensor_ptr
    rec = (records.k, records.g, records.u, records.bank, records.num_recorded)
    x_dtype = v.dtype if v is not None else torch.float32
    args = [
        ptr(q), ptr(k), ptr(v), ptr(g), ptr(beta), ptr(o), ptr(cu), ptr(idx), ptr(pending), ptr(pool),
        *(ptr(t) for t in rec),
        ctypes.c_int64(DTYPE_CODES[x_dtype]), ctypes.c_int64(0 if q is None else q.shape[0]),
        ctypes.c_int64(idx.shape[0]), ctypes.c_int64(records.num_k_heads), ctypes.c_int64(hv), ctypes.c_int64(dk),
        ctypes.c_int64(dv), ctypes.c_int64(num_slots), ctypes.c_int64(records.max_tokens_per_step),
        ctypes.c_int64(pool.stride(0)), ctypes.c_bool(use_qk_l2norm), ctypes.c_float(scale),
        ctypes.c_int64(mode), ctypes.c_int64(spec.ub_bytes),
    ]  # fmt: skip
    tensors = [t for t in (q, k, v, g, beta, o, cu, idx, pending, pool, *rec) if t is not None]
    host_model.launch(
        KERNEL, "verify_gated_delta_rule_host", args, tensors=tensors, soc=spec, reverse_blocks=REVERSE_BLOCKS
    )


def verify_ascendc(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records: GDNRecords,
    pending: torch.Tensor,
    scale: float,
    use_qk_l2norm: bool,
) -> torch.Tensor:
    """Arguments are validated by :func:`ascend_spec.gdn.verify_gated_delta_rule.verify_gated_delta_rule`."""
    g32, beta32 = g.to(torch.float32).contiguous(), beta.to(torch.float32).contiguous()
    cu32, idx32, pend32 = _i32(cu_seqlens), _i32(state_indices), _i32(pending)
    rec = (records.k, records.g, records.u, records.bank, records.num_recorded)
    if q.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        return _npu_op("npu_verify_gated_delta_rule")(
            q.contiguous(), k.contiguous(), v.contiguous(), g32, beta32, cu32, idx32, pend32, pool, *rec,
            scale, use_qk_l2norm,
        )  # fmt: skip
    o = torch.empty_like(v, memory_format=torch.contiguous_format)
    if state_indices.shape[0] == 0 or q.shape[0] == 0:
        return o
    with host_model.written_in_place(pool) as work:
        _launch(
            inputs=(q.contiguous(), k.contiguous(), v.contiguous(), g32, beta32), o=o, cu=cu32, idx=idx32,
            pending=pend32, pool=work, records=records, scale=scale, use_qk_l2norm=use_qk_l2norm,
            mode=_MODE_VERIFY,
        )  # fmt: skip
    return o


def flush_ascendc(
    pool: torch.Tensor, state_indices: torch.Tensor, records: GDNRecords, pending: torch.Tensor
) -> None:
    """Arguments are validated by :func:`ascend_spec.gdn.verify_gated_delta_rule.flush_pending` (which zeroes pending)."""
    idx32, pend32 = _i32(state_indices), _i32(pending)
    if pool.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        rec = (records.k, records.g, records.u, records.bank, records.num_recorded)
        _npu_op("npu_flush_gated_delta_rule")(idx32, pend32, pool, *rec)
        return
    if state_indices.shape[0] == 0:
        return
    with host_model.written_in_place(pool) as work:
        _launch(
            inputs=None, o=None, cu=None, idx=idx32, pending=pend32, pool=work, records=records, scale=1.0,
            use_qk_l2norm=False, mode=_MODE_FLUSH,
        )  # fmt: skip
