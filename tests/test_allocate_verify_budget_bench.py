"""The allocate_verify_budget bench case runs in quick mode on every backend and reads nothing on the host."""

import torch

from ascend_spec.bench.cases import allocate_verify_budget as case
from ascend_spec.bench.core import BenchContext


def test_allocate_verify_budget_case_quick(backend: str) -> None:
    ctx = BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True, backend=backend)
    (row,) = case.run(ctx)
    assert row.case == "B=8 K=4 T=8" and row.impl == backend
    assert row.metrics["host_syncs"] == 0 and row.metrics["baseline_host_syncs"] == 1
