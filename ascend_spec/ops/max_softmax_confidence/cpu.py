"""Native CPU backend of max_softmax_partials (``csrc/cpu/max_softmax_partials.cpp``).

Dynamic verification scores every draft each step with ``max_softmax_confidence``; on a CPU engine with a real
vocabulary that is B*K rows of ~150k logits. One C++ call reads each row once (any dtype, any strides) and
sums a vectorised exp over it, rows in parallel; no N x V temporary.
"""

from __future__ import annotations

import torch

from ascend_spec.cpu import native
from ascend_spec.ops.max_softmax_confidence import MaxSoftmaxArgs, MaxSoftmaxPartials

KERNEL = "max_softmax_partials"
Arguments = native.arguments_struct(
    "MaxSoftmaxArgs",
    ("logits", "row_max", "row_sumexp", "confidence", "num_rows", "vocab", "s0", "s1", "dtype", "threads"),
    floats=("inv_temperature",),
)


def max_softmax_partials(args: MaxSoftmaxArgs, out: MaxSoftmaxPartials) -> None:
    """(row max logit, sum exp((z - max) / T)) in fp32 into ``out``."""
    _run(args.logits, args.temperature, out.row_max, out.row_sumexp, None)


def max_softmax_confidence(logits: torch.Tensor, temperature: float, out: torch.Tensor) -> torch.Tensor:
    """The finalized confidence in the same call (what ``max_softmax_confidence`` returns): no partials tensors,
    no merge operators, for the one-device case a CPU engine step runs."""
    _run(logits, temperature, None, None, out)
    return out


def _run(
    logits: torch.Tensor,
    temperature: float,
    row_max: torch.Tensor | None,
    row_sum: torch.Tensor | None,
    confidence: torch.Tensor | None,
) -> None:
    n, v = logits.shape
    if n == 0:
        return
    ptr = native.ptr
    native.call(
        KERNEL,
        Arguments(
            logits.data_ptr(), ptr(row_max), ptr(row_sum), ptr(confidence), n, v, logits.stride(0),
            logits.stride(1), native.DTYPE_CODES[logits.dtype], torch.get_num_threads(), 1.0 / temperature,
        ),
    )  # fmt: skip
