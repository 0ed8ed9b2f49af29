"""Timing and memory measurement for the microbenchmarks.

Times are medians over repeats, taken with the device's own timer (CUDA/NPU events, wall clock on CPU) after
warm-up; a case reports its op and its baseline from the same run so the ratio is meaningful on any machine.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ascend_spec.ascendc.cost_model import Minimum


@dataclass
class BenchContext:
    """What every case gets: the device to run on, the repeat policy and a quick mode for smoke runs."""

    device: torch.device
    warmup: int = 3
    repeats: int = 10
    quick: bool = False
    backend: str = "auto"

    def time(self, fn: Callable[[], Any]) -> float:
        return measure_ms(fn, self.device, warmup=self.warmup, repeats=self.repeats)

    def instruction_counts(self, fn: Callable[[], Any], minimum: Minimum | None = None) -> dict[str, float]:
        """What one ``fn()`` issued through the AscendC host model (``hm_*`` metrics), or nothing when it did
        not run there (other backends, a real NPU). With the launch's analytical ``minimum``, also its estimated
        A2 time, the minimum's and their ratios (ascend_spec/ascendc/cost_model.py; docs/host_model.md)."""
        from ascend_spec.ascendc import cost_model, host_model

        with host_model.count_instructions() as counts:
            fn()
        if not counts["launches"]:
            return {}
        out: dict[str, float] = {
            "hm_vector_instructions": counts["vector_instructions"],
            "hm_vector_repeats": counts["vector_repeats"],
            "hm_scalar_ub_accesses": counts["scalar_ub_reads"] + counts["scalar_ub_writes"],
            "hm_scalar_gm_accesses": counts["scalar_gm_reads"] + counts["scalar_gm_writes"],
            "hm_dma_bursts": counts["mte2_bursts"] + counts["mte3_bursts"] + counts["ub_copy_bursts"],
            "hm_dma_bytes": counts["mte2_bytes"] + counts["mte3_bytes"] + counts["ub_copy_bytes"],
        }
        if minimum is not None:
            out.update(cost_model.report(counts, minimum, host_model.soc_spec().vector_cores))
        return out


@dataclass
class BenchRow:
    """One line of the bench table: the op (by some implementation) against a baseline, plus metrics.

    ``metrics`` holds numbers such as ``bytes_moved``, ``bandwidth_gbs``, ``peak_temp_bytes`` and their
    ``baseline_*`` counterparts; keys are free-form but should say their unit.
    """

    op: str
    case: str
    impl: str
    baseline: str
    time_ms: float
    baseline_ms: float
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.baseline_ms / self.time_ms if self.time_ms > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["speedup"] = self.speedup
        return out


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":  # pragma: no cover - needs torch_npu
        torch.npu.synchronize(device)  # type: ignore[attr-defined]


def measure_ms(
    fn: Callable[[], Any],
    device: torch.device,
    *,
    warmup: int = 3,
    repeats: int = 10,
    max_seconds: float | None = 10.0,
) -> float:
    """Median milliseconds of ``fn()`` on ``device``.

    ``max_seconds`` bounds one measurement: warm-up stops after half of it and repeats stop once it is spent
    (at least one sample is always taken), so seconds-long CPU baselines do not stretch the run to hours.
    """
    budget_end = None if max_seconds is None else time.perf_counter() + max_seconds
    for _ in range(warmup):
        fn()
        if budget_end is not None and time.perf_counter() > budget_end - max_seconds / 2:
            break
    _synchronize(device)
    samples: list[float] = []
    mod = None
    if device.type in ("cuda", "npu"):
        mod = torch.cuda if device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
    for _ in range(repeats):
        if mod is not None:
            start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
        if budget_end is not None and time.perf_counter() > budget_end:
            break
    return statistics.median(samples)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the profiler's native start/stop lines (written straight to fd 2) for the bench table's sake."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_allocated_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes allocated by torch while ``fn()`` runs, above what was live before it (outputs included).

    CUDA/NPU: the caching allocator's peak counter. CPU: the profiler's allocation timeline (op-level
    allocations at op start, frees as they happen), which sees every tensor torch allocates.
    """
    if device.type in ("cuda", "npu"):
        mod = torch.cuda if device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
        _synchronize(device)
        mod.reset_peak_memory_stats(device)
        before = mod.memory_allocated(device)
        fn()
        _synchronize(device)
        return int(mod.max_memory_allocated(device) - before)
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    timeline: list[tuple[float, int]] = []
    for event in prof.events():
        delta = event.self_cpu_memory_usage
        if event.name == "[memory]":
            if delta < 0:
                timeline.append((event.time_range.start, delta))
        elif delta > 0:
            timeline.append((event.time_range.start, delta))
    live = peak = 0
    for _, delta in sorted(timeline, key=lambda item: item[0]):
        live += delta
        peak = max(peak, live)
    return int(peak)
