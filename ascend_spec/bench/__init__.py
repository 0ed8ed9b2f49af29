"""Operator microbenchmarks: each case times an op against a baseline in the same run.

A case module in :mod:`ascend_spec.bench.cases` exposes ``run(ctx: BenchContext) -> list[BenchRow]``; the
runner (:mod:`ascend_spec.bench.runner`) lists the modules, prints one table and optionally writes JSON.
"""

from ascend_spec.bench.core import BenchContext, BenchRow, measure_ms, peak_allocated_bytes

__all__ = ["BenchContext", "BenchRow", "measure_ms", "peak_allocated_bytes"]
