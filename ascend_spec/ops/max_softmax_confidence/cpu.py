"""Native CPU backend of max_softmax_partials (``csrc/cpu/max_softmax_partials.cpp``).

Dynamic verification scores every draft each step with ``max_softmax_confidence``; on a CPU engine with a real
vocabulary that is B*K rows of ~150k logits. One C++ call reads each row once (any dtype, any strides) and
sums a vectorised exp over it, rows in parallel; no N x V temporary. :class:`DraftSurvival` is dynamic
verification's CPU step: confidence and survival of a [B, K] draft block in that one call, its arguments built
once.
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.cpu import native
from ascend_spec.ops.max_softmax_confidence import MaxSoftmaxArgs, MaxSoftmaxPartials

KERNEL = "max_softmax_partials"
Arguments = native.arguments_struct(
    "MaxSoftmaxArgs",
    (
        "logits",
        "row_max",
        "row_sumexp",
        "confidence",
        "survival",
        "block",
        "num_rows",
        "vocab",
        "s0",
        "s1",
        "dtype",
        "threads",
        "argmax",
    ),
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
            logits.data_ptr(), ptr(row_max), ptr(row_sum), ptr(confidence), 0, 1, n, v, logits.stride(0),
            logits.stride(1), native.DTYPE_CODES[logits.dtype], torch.get_num_threads(), 0, 1.0 / temperature,
        ),
    )  # fmt: skip


class DraftSurvival:
    """``survival_probs(max_softmax_confidence(logits).view(B, K))`` into fixed [B, K] buffers, one native call.

    A CPU engine step pays ~15 us of Python around the two ops (argument checks, backend resolution, two
    calls) for ~2 us of arithmetic at a decode step's sizes; this binds the outputs and the kernel once and per
    call checks only what can change: the logits' shape, dtype and strides.
    """

    def __init__(self, confidence: torch.Tensor, survival: torch.Tensor) -> None:
        b, k = confidence.shape
        for name, t in (("confidence", confidence), ("survival", survival)):
            if (
                t.shape != (b, k)
                or t.dtype != torch.float32
                or t.device.type != "cpu"
                or not t.is_contiguous()
                or k < 1
            ):
                raise ValueError(
                    f"{name} must be a contiguous float32 CPU tensor of shape [B, K] with K >= 1 (the confidence's "
                    f"shape {list(confidence.shape)}); got {t.dtype} {list(t.shape)} on {t.device}"
                )
        self.confidence, self.survival = confidence, survival
        self.num_rows = b * k
        self._args = Arguments(
            0, 0, 0, confidence.data_ptr(), survival.data_ptr(), k, self.num_rows, 0, 0, 0, 0, 1, 0, 1.0
        )  # fmt: skip
        self._run = native.bound(KERNEL, Arguments)

    @property
    def entry(self) -> tuple[int, int]:
        """(address of the kernel's entry, address of the bound arguments): for a compiled caller that runs the
        kernel itself after :meth:`prepare` (:class:`~ascend_spec.graph.host_plan.StepPlan`)."""
        fn = native.entry(KERNEL, Arguments)
        return ctypes.cast(fn, ctypes.c_void_p).value, ctypes.addressof(self._args)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """The survivals of this step's draft logits ``[B*K, V]`` (any float dtype and strides)."""
        self.prepare(logits)
        self._run(self._args)
        return self.survival

    def draft_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """A greedy drafter's tokens ``[B*K]`` (int64, ``torch.argmax`` of each row, ties and NaN alike) from
        the same pass that writes the survivals: the draft logits are read once for both."""
        tokens = torch.empty(self.num_rows, dtype=torch.int64)
        self.prepare(logits, tokens)
        self._run(self._args)
        return tokens

    def prepare(self, logits: torch.Tensor, argmax: torch.Tensor | None = None) -> None:
        """Check ``logits [B*K, V]`` and bind them (and an int64 [B*K] ``argmax`` output, or none) to the
        arguments (the kernel runs on the next call)."""
        code = native.DTYPE_CODES.get(logits.dtype)
        if (
            code is None
            or logits.dim() != 2
            or logits.shape[0] != self.num_rows
            or logits.shape[1] < 1
            or logits.device.type != "cpu"
        ):
            raise ValueError(
                f"logits must be a float32/bfloat16/float16 CPU tensor of shape [{self.num_rows}, V] with V >= 1; "
                f"got {logits.dtype} {list(logits.shape)} on {logits.device}"
            )
        a = self._args
        a.logits = logits.data_ptr()
        a.vocab = logits.shape[1]
        a.s0, a.s1 = logits.stride()
        a.dtype = code
        a.threads = torch.get_num_threads()
        a.argmax = 0 if argmax is None else argmax.data_ptr()
