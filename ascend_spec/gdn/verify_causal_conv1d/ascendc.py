"""AscendC path of verify_causal_conv1d / flush_conv_pending: the compiled NPU op, or the same kernel source
under the host model on CPU tensors.

Kernel: ``csrc/kernels/verify_causal_conv1d.cpp`` (main kernel over (channel tile, row) units, then a one-block
kernel that updates ``num_recorded`` / zeroes ``pending``). The kernel takes the weight as fp32 ``[W, C]`` (rows
of channels, as the vector unit consumes them) and the bias as fp32; the wrapper converts them (C x W floats).
NPU binding: ``torch.ops._C_ascend_spec.npu_verify_causal_conv1d`` (``csrc/torch_binding.cpp``).
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.backend import BackendUnavailableError

KERNEL = "verify_causal_conv1d"
_MODE_VERIFY, _MODE_FLUSH, _MODE_FLUSH_RESET = 0, 1, 2
# Tests flip these: run the host model's blocks last-to-first (exposes cross-core order dependence) / other SoCs.
REVERSE_BLOCKS = False
SOC: str | None = None


def _npu_op():  # pragma: no cover - needs CANN and an NPU
    op = getattr(torch.ops._C_ascend_spec, "npu_verify_causal_conv1d", None)
    if op is None:
        raise BackendUnavailableError(
            "verify_causal_conv1d: the loaded ascend_spec._C_ascend_spec has no npu_verify_causal_conv1d; "
            "rebuild the extension with csrc/kernels/verify_causal_conv1d.cpp"
        )
    return op


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()


def tile_channels(
    channels: int, width: int, x_dtype: torch.dtype, rec_dtype: torch.dtype, pool_dtype: torch.dtype
) -> int:
    """Channels per unit the kernel's tiling picks on the host model's SoC (what fits its Unified Buffer)."""
    spec = host_model.soc_spec(SOC)
    fn = host_model.load_kernel(KERNEL).verify_causal_conv1d_tile_channels
    fn.restype = ctypes.c_int64
    codes = (DTYPE_CODES[x_dtype], DTYPE_CODES[rec_dtype], DTYPE_CODES[pool_dtype])
    null = ctypes.c_void_p(0)
    ints = (*codes, 1, channels, width, 1, 1)
    return int(
        fn(
            ctypes.c_uint32(spec.vector_cores),
            *([null] * 10),
            *(ctypes.c_int64(v) for v in ints),
            ctypes.c_bool(True),
            ctypes.c_bool(True),
            ctypes.c_int64(_MODE_VERIFY),
            ctypes.c_int64(spec.ub_bytes),
        )  # fmt: skip
    )


def _launch(
    *,
    x: torch.Tensor | None,
    weight_t: torch.Tensor | None,
    bias: torch.Tensor | None,
    y: torch.Tensor | None,
    pool: torch.Tensor,
    records,
    cu: torch.Tensor | None,
    idx: torch.Tensor,
    pending: torch.Tensor,
    x_dtype: torch.dtype,
    width: int,
    silu: bool,
    mode: int,
) -> None:
    """Run the kernel pair under the host model; ``pool``/``pending`` must be contiguous (written in place)."""
    spec = host_model.soc_spec(SOC)
    rec = records.x
    ptr = host_model.tensor_ptr
    args = [
        ptr(x), ptr(weight_t), ptr(bias), ptr(y), ptr(pool), ptr(rec), ptr(records.num_recorded),
        ptr(cu), ptr(idx), ptr(pending),
        ctypes.c_int64(DTYPE_CODES[x_dtype]), ctypes.c_int64(DTYPE_CODES[rec.dtype]),
        ctypes.c_int64(DTYPE_CODES[pool.dtype]), ctypes.c_int64(idx.shape[0]), ctypes.c_int64(pool.shape[1]),
        ctypes.c_int64(width), ctypes.c_int64(rec.shape[1]), ctypes.c_int64(pool.shape[0]),
        ctypes.c_bool(bias is not None), ctypes.c_bool(silu), ctypes.c_int64(mode), ctypes.c_int64(spec.ub_bytes),
    ]  # fmt: skip
    tensors = [
        t for t in (x, weight_t, bias, y, pool, rec, records.num_recorded, cu, idx, pending) if t is not None
    ]
    host_model.launch(
        KERNEL, "verify_causal_conv1d_host", args, tensors=tensors, soc=spec, reverse_blocks=REVERSE_BLOCKS
    )


def verify_conv1d_ascendc(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    pool: torch.Tensor,
    state_indices: torch.Tensor,
    records,
    pending: torch.Tensor,
    silu: bool,
) -> torch.Tensor:
    """Arguments are validated by :func:`ascend_spec.gdn.verify_causal_conv1d.verify_causal_conv1d`."""
    num_tokens, channels = x.shape
    width = weight.shape[1]
    weight_t = weight.t().to(torch.float32).contiguous()
    bias32 = None if bias is None else bias.to(torch.float32).contiguous()
    if x.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        rec, nrec = records.x, records.num_recorded
        return _npu_op()(x, weight_t, bias32, cu_seqlens, pool, state_indices, rec, nrec, pending, silu)
    y = torch.empty(num_tokens, channels, dtype=x.dtype, device=x.device)
    if state_indices.shape[0] == 0:
        return y
    with host_model.written_in_place(pool) as work:
        _launch(
            x=x.contiguous(), weight_t=weight_t, bias=bias32, y=y, pool=work, records=records,
            cu=_i32(cu_seqlens), idx=_i32(state_indices), pending=_i32(pending), x_dtype=x.dtype, width=width,
            silu=silu, mode=_MODE_VERIFY,
        )  # fmt: skip
    return y


def flush_conv_ascendc(
    pool: torch.Tensor, state_indices: torch.Tensor, records, pending: torch.Tensor, reset_pending: bool
) -> None:
    """Arguments are validated by :func:`ascend_spec.gdn.verify_causal_conv1d.flush_conv_pending`."""
    if pool.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        op = getattr(torch.ops._C_ascend_spec, "npu_flush_conv_pending", None)
        if op is None:
            raise BackendUnavailableError(
                "flush_conv_pending: the loaded extension has no npu_flush_conv_pending"
            )
        op(pool, state_indices, records.x, records.num_recorded, pending, reset_pending)
        return
    if state_indices.shape[0] == 0:
        return
    with host_model.written_in_place(pool) as work, host_model.written_in_place(pending) as pend:
        _launch(
            x=None, weight_t=None, bias=None, y=None, pool=work, records=records, cu=None,
            idx=_i32(state_indices), pending=pend, x_dtype=records.x.dtype, width=pool.shape[2] + 1,
            silu=False, mode=_MODE_FLUSH_RESET if reset_pending else _MODE_FLUSH,
        )  # fmt: skip
