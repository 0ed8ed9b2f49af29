"""Instruction accounting of the host model: exact counts for a kernel whose instruction stream is known."""

from __future__ import annotations

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ops import allocate_verify_budget


def test_rules_probe_counts() -> None:
    """4 blocks x 2 tiles of 64 floats; per tile DataCopy in, Adds, Exp, ReduceMax, ReduceSum, 3 scalar UB reads,
    DataCopy out; per block 2 scalar UB writes and one 8-byte DataCopyPad out."""
    from test_host_model import run_probe

    with host_model.count_instructions() as counts:
        run_probe(0)
    assert counts == {
        "vector_instructions": 32, "vector_repeats": 32, "scalar_ub_reads": 24, "scalar_ub_writes": 8,
        "scalar_gm_reads": 0, "scalar_gm_writes": 0, "mte2_bursts": 8, "mte2_bytes": 8 * 256, "mte3_bursts": 12,
        "mte3_bytes": 8 * 256 + 4 * 8, "ub_copy_bursts": 0, "ub_copy_bytes": 0, "blocks": 4, "launches": 1,
    }  # fmt: skip


def test_counts_scale_with_the_work_and_nest() -> None:
    """The budget kernel's 32 bisection steps + the GT count each issue CompareScalar, Duplicate, Select (with its
    scratch Duplicate) and ReduceSum over all slots; nested scopes both see every launch."""
    surv = torch.rand(8, 8, generator=torch.Generator().manual_seed(0)).cummin(dim=1).values
    with host_model.count_instructions() as outer:
        with host_model.count_instructions() as inner:
            allocate_verify_budget(surv, 10, backend="ascendc")
        allocate_verify_budget(surv, 10, backend="ascendc")
    assert outer["launches"] == 2 and inner["launches"] == 1
    assert all(outer[k] == 2 * inner[k] for k in host_model.COUNTERS)
    counts_per_step = 5  # CompareScalar, Duplicate, scratch Duplicate, Select, ReduceSum
    assert inner["vector_instructions"] == 33 * counts_per_step + 1  # + the index fill in Admit
    assert inner["blocks"] == 1


def test_bench_rows_carry_the_counts_of_ascendc_runs() -> None:
    """``ascend-spec bench --backend ascendc`` reports the host model's counts; other backends report none."""
    from ascend_spec.bench.cases import allocate_verify_budget as verify_budget_case
    from ascend_spec.bench.core import BenchContext

    ctx = BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True, backend="ascendc")
    (row,) = verify_budget_case.run(ctx)
    assert (
        row.metrics["hm_vector_instructions"] == 33 * 5 + 1
    )  # as in test_counts_scale_with_the_work_and_nest
    assert row.metrics["hm_dma_bursts"] > 0 and row.metrics["hm_scalar_gm_accesses"] == 1  # the budget scalar
    (row,) = verify_budget_case.run(BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True,
                                            backend="reference"))  # fmt: skip
    assert not any(key.startswith("hm_") for key in row.metrics)
