"""AscendC backend of max-softmax partials: the compiled NPU op, or the same kernel source under the host model.

Kernel: ``csrc/kernels/max_softmax_confidence.cpp`` (one pass per row, per-tile max/sum combined at the row's
end), arguments ``MaxSoftmaxConfidenceArgs`` (``max_softmax_confidence_tiling.h``, mirrored by
:data:`KernelArgs`). NPU binding: ``torch.ops._C_ascend_spec.npu_max_softmax_partials`` (logits,
inv_temperature) -> (row_max, row_sumexp), copied into ``out``; see docs/max_softmax_confidence.md.

The kernel reads rows whose vocabulary axis is contiguous, with any row stride. Logits with a strided vocabulary
axis are passed through in row chunks made contiguous one at a time, so the temporary stays bounded by the
reference's workspace (never N x V).
"""

from __future__ import annotations

import torch

from ascend_spec.ascendc import host_model, npu_op
from ascend_spec.ascendc.cost_model import Minimum, instructions_of, repeats_of
from ascend_spec.ascendc.host_model import DTYPE_CODES
from ascend_spec.ops.max_softmax_confidence import REFERENCE_CHUNK_ELEMS, MaxSoftmaxArgs, MaxSoftmaxPartials

KERNEL = "max_softmax_confidence"
KernelArgs = host_model.arguments_struct(
    "MaxSoftmaxConfidenceArgs",
    pointers=("logits", "rowMax", "rowSum"),
    ints=("dtype", "numRows", "vocab", "rowStride"),
    floats=("invTemperature",),
)


def _npu_partials(logits: torch.Tensor, inv_t: float, out: MaxSoftmaxPartials) -> None:  # pragma: no cover
    row_max, row_sum = npu_op("npu_max_softmax_partials", KERNEL)(logits, inv_t)
    out.row_max.copy_(row_max)
    out.row_sumexp.copy_(row_sum)


def _launch(logits: torch.Tensor, row_max: torch.Tensor, row_sum: torch.Tensor, inv_t: float) -> None:
    """One launch over rows with a contiguous vocabulary axis (row stride free)."""
    n, v = logits.shape
    if logits.device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        _npu_partials(logits, inv_t, MaxSoftmaxPartials(row_max, row_sum))
        return
    stride = logits.stride(0) if n > 1 else v
    # The GM region the kernel may touch: from the first row's start to the last row's end.
    span = logits.as_strided(((n - 1) * stride + v,), (1,))
    ptr = host_model.tensor_ptr
    args = KernelArgs(
        logits.data_ptr(), ptr(row_max), ptr(row_sum), DTYPE_CODES[logits.dtype], n, v, stride, inv_t
    )
    host_model.launch(KERNEL, "max_softmax_partials_host", args, tensors=[span, row_max, row_sum])


def max_softmax_partials(args: MaxSoftmaxArgs, out: MaxSoftmaxPartials) -> None:
    logits = args.logits
    n, v = logits.shape
    inv_t = 1.0 / args.temperature
    if logits.stride(1) == 1:
        _launch(logits, out.row_max, out.row_sumexp, inv_t)
        return
    rows = max(1, REFERENCE_CHUNK_ELEMS // v)
    for start in range(0, n, rows):  # bounded temporaries: one contiguous chunk of rows at a time
        stop = start + rows
        _launch(logits[start:stop].contiguous(), out.row_max[start:stop], out.row_sumexp[start:stop], inv_t)


def instruction_minimum(num_rows: int, vocab: int, x_bytes: int, inv_temperature: float = 1.0) -> Minimum:
    """Read the logits once, write the two fp32 partials; per row the passes over V in fp32: the cast (16-bit
    logits), the max, the shift (and the temperature scale), the exp and the sum."""
    passes = 4 + int(x_bytes != 4) + int(inv_temperature != 1.0)
    repeats = repeats_of(vocab)
    return Minimum(
        gm_read_bytes=num_rows * vocab * x_bytes, gm_write_bytes=num_rows * 8,
        vector_repeats=num_rows * passes * repeats, vector_instructions=num_rows * passes * instructions_of(repeats),
        parallel_units=num_rows,
    )  # fmt: skip


# docs/host_model.md, "Cost model": measured ratios to instruction_minimum this kernel must stay within
# (tests/test_kernel_cost_bounds.py).
VECTOR_INSTRUCTION_RATIO_BOUND = 4.0  # the pairwise TreeSum's log-depth Adds (docs/host_model.md)
TIME_RATIO_BOUND = 1.5
