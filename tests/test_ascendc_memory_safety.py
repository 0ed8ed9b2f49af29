"""AscendC kernels where the chip would corrupt memory or depend on undocumented behaviour, run through the host
model's stricter rules (docs/host_model.md): each test fails on the kernel before its fix.

* allocate_verify_budget calls Select in tensor-scalar mode, whose scratch block sits at UB offset 184 KiB on
  A2/A3: its buffers must end below that, so a batch needing more is refused with a clear error.
* its bisection used to probe subnormal fp32 thresholds on the vector unit (denormal handling undocumented): keys
  are now shifted into the normal floats, so survival values of 0 and subnormals select as the reference does.
* prepare_block_slots wrote query_start_loc one entry past its 1024-entry UB tile when a core owned >= 1024
  padded requests.
"""

from __future__ import annotations

import pytest
import torch

from ascend_spec.ascendc import host_model
from ascend_spec.ops import allocate_verify_budget, prepare_block_slots
from ascend_spec.ops.allocate_verify_budget.ascendc import SELECT_SCRATCH_OFFSET, ub_bytes_needed


def _same(a, b) -> None:
    for name in ("num_drafts", "query_lens", "query_start_loc", "draft_index"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_budget_buffers_end_below_the_select_scratch() -> None:
    """256 x 55 slots need 189312 bytes: inside GetCoreMemSize(UB) but over Select's scratch at 184 KiB."""
    assert SELECT_SCRATCH_OFFSET < ub_bytes_needed(256, 55, 256 * 55) <= host_model.soc_spec().ub_bytes
    surv = torch.rand(256, 55, generator=torch.Generator().manual_seed(0)).cummin(dim=1).values
    with pytest.raises(ValueError, match=r"survival: 256 x 55 slots need 189312 bytes .*Select's scratch"):
        allocate_verify_budget(surv, 500, max_budget=256 * 55, backend="ascendc")


def test_budget_at_the_largest_batch_below_the_scratch_matches_the_reference() -> None:
    k = max(k for k in range(1, 64) if ub_bytes_needed(256, k, 256 * k) <= SELECT_SCRATCH_OFFSET)
    surv = torch.rand(256, k, generator=torch.Generator().manual_seed(1)).cummin(dim=1).values
    _same(
        allocate_verify_budget(surv, 1000, max_budget=256 * k, backend="ascendc"),
        allocate_verify_budget(surv, 1000, max_budget=256 * k, backend="reference"),
    )


@pytest.mark.parametrize("budget", [3, 40, 64])
def test_bisection_never_compares_subnormals(budget: int) -> None:
    """Zeros and subnormal survivals: the threshold lands at or below the smallest normal float."""
    tiny = torch.finfo(torch.float32).tiny
    surv = torch.tensor(
        [[1.0, tiny / 2, tiny / 4, 0.0], [0.5, tiny / 8, 0.0, 0.0], [tiny, tiny / 2, 0.0, 0.0]] * 4,
        dtype=torch.float32,
    )
    _same(
        allocate_verify_budget(surv, budget, backend="ascendc"),
        allocate_verify_budget(surv, budget, backend="reference"),
    )


def test_block_slots_with_1024_padded_requests_per_core() -> None:
    """48 vector cores x 1024 padded requests: each core fills whole 1024-entry tiles of query_start_loc."""
    cores = host_model.soc_spec().vector_cores
    padded = cores * 1024
    ids = torch.tensor([5, 6, 7], dtype=torch.int64)
    pos = torch.tensor([3, 40, 17], dtype=torch.int64)
    table = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    kw = dict(block_size=16, num_query_tokens=2, mask_token_id=9, num_padded_reqs=padded)
    got = prepare_block_slots(ids, pos, table, **kw, backend="ascendc")
    want = prepare_block_slots(ids, pos, table, **kw, backend="reference")
    for field in ("input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "sample_indices"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
