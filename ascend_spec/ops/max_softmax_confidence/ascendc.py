"""AscendC path of max-softmax partials: the compiled NPU op, or the same kernel source under the host model.

Kernel: ``csrc/kernels/max_softmax_confidence.cpp`` (one pass per row, per-tile max/sum combined at the row's
end). NPU binding: ``torch.ops._C_ascend_spec.npu_max_softmax_partials`` (logits, inv_temperature) ->
(row_max, row_sumexp); see docs/max_softmax_confidence.md for the binding text.

The kernel reads rows whose vocabulary axis is contiguous, with any row stride. Logits with a strided vocabulary
axis are passed through in row chunks made contiguous one at a time, so the temporary stays bounded by the
reference's workspace (never N x V).
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.backend import BackendUnavailableError
from ascend_spec.ops.max_softmax_confidence import REFERENCE_CHUNK_ELEMS


def _npu_partials(
    logits: torch.Tensor, inv_t: float
) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover
    op = getattr(torch.ops._C_ascend_spec, "npu_max_softmax_partials", None)
    if op is None:
        raise BackendUnavailableError(
            "max_softmax_confidence: the loaded ascend_spec._C_ascend_spec has no npu_max_softmax_partials; "
            "rebuild the extension with csrc/kernels/max_softmax_confidence.cpp"
        )
    return op(logits, inv_t)


def _launch(logits: torch.Tensor, row_max: torch.Tensor, row_sum: torch.Tensor, inv_t: float) -> None:
    """One host-model launch over rows with a contiguous vocabulary axis (row stride free)."""
    n, v = logits.shape
    stride = logits.stride(0) if n > 1 else v
    # The GM region the kernel may touch: from the first row's start to the last row's end.
    span = logits.as_strided(((n - 1) * stride + v,), (1,))
    args = [
        ctypes.c_int64(DTYPE_CODES[logits.dtype]),
        ctypes.c_void_p(logits.data_ptr()),
        host_model.tensor_ptr(row_max),
        host_model.tensor_ptr(row_sum),
        ctypes.c_int64(n),
        ctypes.c_int64(v),
        ctypes.c_int64(stride),
        ctypes.c_float(inv_t),
    ]
    host_model.launch(
        "max_softmax_confidence", "max_softmax_partials_host", args, tensors=[span, row_max, row_sum]
    )


def _partials_contiguous_vocab(logits: torch.Tensor, inv_t: float) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        return _npu_partials(logits, inv_t)
    n = logits.shape[0]
    row_max = torch.empty(n, dtype=torch.float32, device=logits.device)
    row_sum = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n:
        _launch(logits, row_max, row_sum, inv_t)
    return row_max, row_sum


def max_softmax_partials_ascendc(
    logits: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    n, v = logits.shape
    inv_t = 1.0 / temperature
    if logits.stride(1) == 1 or n == 0:
        return _partials_contiguous_vocab(logits, inv_t)
    rows = max(1, REFERENCE_CHUNK_ELEMS // v)
    parts = [  # bounded temporaries: one contiguous chunk of rows at a time
        _partials_contiguous_vocab(logits[start : start + rows].contiguous(), inv_t)
        for start in range(0, n, rows)
    ]
    return torch.cat([m for m, _ in parts]), torch.cat([s for _, s in parts])
