"""Bench case for max_softmax_confidence against ``torch.softmax(x.float(), -1).max(-1)``.

Shape from Huawei's talk on DFlash and DSpark in vLLM: N = 1024 drafted positions, V = 131072 vocabulary, fp32 and bf16 logits. Both sides are checked to
agree before timing. Reported per side: time, bytes read/written (the op reads the logits once and writes N
floats; the baseline upcasts, writes the N x V softmax and reads it back) and the peak temporary memory measured
by :func:`~ascend_spec.bench.core.peak_allocated_bytes` (outputs included).
"""

from __future__ import annotations

import torch

from ascend_spec.backend import resolve_backend
from ascend_spec.bench.core import BenchContext, BenchRow, peak_allocated_bytes
from ascend_spec.ops import max_softmax_confidence
from ascend_spec.ops.max_softmax_confidence.ascendc import instruction_minimum


def baseline(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), -1).max(-1).values


def _baseline_traffic(n: int, v: int, esize: int) -> tuple[int, int]:
    """(bytes read, bytes written) of the baseline: optional upcast, softmax (read + write), max (read)."""
    read = written = 0
    if esize != 4:
        read, written = n * v * esize, n * v * 4
    read += 2 * n * v * 4  # softmax reads its input, max reads the softmax
    written += n * v * 4 + n * 12  # the softmax, then values + int64 indices
    return read, written


def run(ctx: BenchContext) -> list[BenchRow]:
    impl = resolve_backend(ctx.backend, ctx.device, op="max_softmax_confidence")
    n, v = (16, 2048) if ctx.quick else (1024, 131072)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        gen = torch.Generator().manual_seed(0)
        x = (torch.randn(n, v, generator=gen) * 3).to(dtype).to(ctx.device)

        def op(x=x) -> torch.Tensor:
            return max_softmax_confidence(x, backend=ctx.backend)

        def base(x=x) -> torch.Tensor:
            return baseline(x)

        got, want = op(), base()
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-7):
            raise AssertionError(
                f"confidence bench: op and baseline disagree ({dtype}): {(got - want).abs().max()}"
            )
        del got, want
        time_ms, base_ms = ctx.time(op), ctx.time(base)
        peak, base_peak = peak_allocated_bytes(op, ctx.device), peak_allocated_bytes(base, ctx.device)
        esize = x.element_size()
        bytes_read = n * v * esize
        base_read, base_written = _baseline_traffic(n, v, esize)
        rows.append(
            BenchRow(
                op="max_softmax_confidence",
                case=f"N={n} V={v} {str(dtype).removeprefix('torch.')}",
                impl=impl,
                baseline="softmax(x.float()).max",
                time_ms=time_ms,
                baseline_ms=base_ms,
                metrics={
                    **ctx.instruction_counts(op, instruction_minimum(n, v, x.element_size())),
                    "bytes_read": bytes_read,
                    "bytes_written": n * 4,
                    "read_gbs": bytes_read / (time_ms * 1e6),
                    "peak_temp_bytes": peak,
                    "baseline_bytes_read": base_read,
                    "baseline_bytes_written": base_written,
                    "baseline_peak_temp_bytes": base_peak,
                    "temp_ratio": peak / base_peak if base_peak else float("nan"),
                },
            )
        )
        del x
    return rows
