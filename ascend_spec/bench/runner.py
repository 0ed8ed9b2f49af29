"""Run the bench cases, print a table, optionally write JSON."""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ascend_spec.bench.bandwidth import DeviceBandwidth
from ascend_spec.bench.cases import CASE_MODULES
from ascend_spec.bench.core import BenchContext, BenchRow


def best_device() -> torch.device:
    """NPU if torch_npu sees one, then CUDA, else CPU."""
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():  # pragma: no cover - needs torch_npu
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def case_names() -> tuple[str, ...]:
    """The bench cases, in table order (the registry in :mod:`ascend_spec.bench.cases`)."""
    return tuple(CASE_MODULES)


def run_cases(ctx: BenchContext, only: Sequence[str] | None = None) -> list[BenchRow]:
    unknown = sorted(set(only or ()) - set(CASE_MODULES))
    if unknown:
        raise ValueError(f"unknown bench case(s) {unknown}; known: {list(CASE_MODULES)}")
    rows: list[BenchRow] = []
    for name in CASE_MODULES:
        if only and name not in only:
            continue
        module = importlib.import_module(f"ascend_spec.bench.cases.{name}")
        start = time.perf_counter()
        case_rows = module.run(ctx)
        rows.extend(case_rows)
        # Progress on stderr: the full CPU run takes minutes and the table only prints at the end.
        print(
            f"[bench] {name}: {len(case_rows)} rows in {time.perf_counter() - start:.1f} s", file=sys.stderr
        )
    return rows


def _fmt_metric(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 1 << 20:
        return f"{value / (1 << 20):.2f}Mi"
    return str(value)


def format_table(rows: Sequence[BenchRow]) -> str:
    header = ["op", "case", "impl", "ms", "baseline", "base ms", "speedup", "metrics"]
    body = [
        [
            r.op,
            r.case,
            r.impl,
            f"{r.time_ms:.4f}",
            r.baseline,
            f"{r.baseline_ms:.4f}",
            f"{r.speedup:.2f}x",
            " ".join(f"{k}={_fmt_metric(v)}" for k, v in r.metrics.items()),
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(
    rows: Sequence[BenchRow], ctx: BenchContext, path: Path, *, bandwidth: DeviceBandwidth | None = None
) -> None:
    payload: dict[str, object] = {
        "device": str(ctx.device),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
        "quick": ctx.quick,
        "rows": [r.to_json() for r in rows],
    }
    if bandwidth is not None:
        payload["bandwidth"] = bandwidth.to_json()
    path.write_text(json.dumps(payload, indent=2) + "\n")
