"""AscendC kernels where the chip would corrupt memory or depend on undocumented behaviour, run through the host
model's stricter rules (docs/host_model.md): each test fails on the kernel before its fix.

* allocate_verify_budget calls Select in tensor-scalar mode, whose scratch block sits at UB offset 184 KiB on
  A2/A3: its buffers must end below that, so a batch needing more is refused with a clear error.
* its bisection used to probe subnormal fp32 thresholds on the vector unit (denormal handling undocumented): keys
  are now shifted into the normal floats, so survival values of 0 and subnormals select as the reference does.
* prepare_block_slots wrote query_start_loc one entry past its 1024-entry UB tile when a core owned >= 1024
  padded requests.
* the GDN and conv launchers never checked that their tiling fits UB (the chip does not either): a Dk or a conv
  width too large for the smallest tile is refused with an error naming the argument (the NPU binding and the
  NPU launchers check the same ub_fit.h functions: tests/test_npu_binding.py).
"""

from __future__ import annotations

import pytest
import torch

from ascend_spec.ascendc import host_model
from ascend_spec.gdn import allocate_records, verify_gated_delta_rule
from ascend_spec.gdn.verify_causal_conv1d import allocate_conv_records, verify_causal_conv1d
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


def test_gdn_with_a_state_tile_past_the_unified_buffer_names_state_pool() -> None:
    """Dk = 2048: even a [2048, 16] fp32 state tile with 4-token chunks needs more than the core's UB."""
    t, dk, dv = 3, 2048, 16
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(t, 1, dk, generator=gen), torch.randn(t, 1, dk, generator=gen)
    v, g, beta = (
        torch.randn(t, 1, dv, generator=gen),
        -torch.rand(t, 1, generator=gen),
        torch.rand(t, 1, generator=gen),
    )
    pool = torch.zeros(2, 1, dk, dv)
    with pytest.raises(
        RuntimeError,
        match=r"verify_gated_delta_rule: state_pool: Dk = state_pool.shape\[2\] = 2048 needs \d+ bytes of Unified Buffer .* above the 196352",
    ):
        verify_gated_delta_rule(
            q, k, v, g, beta, cu_seqlens=torch.tensor([0, 3], dtype=torch.int32), state_pool=pool,
            state_indices=torch.tensor([1], dtype=torch.int32), records=allocate_records(2, 4, 1, dk, dv, num_k_heads=1),
            pending=torch.zeros(1, dtype=torch.int32), backend="ascendc",
        )  # fmt: skip
    assert torch.count_nonzero(pool) == 0


def test_conv_with_a_window_past_the_unified_buffer_names_conv_state_pool() -> None:
    """Width 2048: 16 channels of 2047-token windows need more than the core's UB."""
    c, w = 16, 2048
    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(2, c, w - 1, generator=gen)
    before = pool.clone()
    with pytest.raises(
        RuntimeError,
        match=r"verify_causal_conv1d: conv_state_pool: width = conv_state_pool.shape\[2\] \+ 1 = 2048 needs \d+ bytes of Unified Buffer .* above the 196352",
    ):
        verify_causal_conv1d(
            torch.randn(3, c, generator=gen), torch.randn(c, w, generator=gen), None,
            cu_seqlens=torch.tensor([0, 3], dtype=torch.int32), conv_state_pool=pool,
            state_indices=torch.tensor([1], dtype=torch.int32), records=allocate_conv_records(2, 4, c, w, dtype=torch.float32),
            pending=torch.zeros(1, dtype=torch.int32), backend="ascendc",
        )  # fmt: skip
    assert torch.equal(pool, before)


def test_flushes_past_the_unified_buffer_name_their_op_and_argument() -> None:
    """The flush launches check the same fit: Dk = 2048 for flush_pending, width 2048 for flush_conv_pending."""
    from ascend_spec.gdn import flush_pending
    from ascend_spec.gdn.verify_causal_conv1d import flush_conv_pending

    pool = torch.zeros(2, 1, 2048, 16)
    records = allocate_records(2, 4, 1, 2048, 16, num_k_heads=1)
    records.num_recorded.fill_(2)
    with pytest.raises(
        RuntimeError, match=r"flush_pending: state_pool: Dk = state_pool.shape\[2\] = 2048 needs"
    ):
        flush_pending(pool, torch.tensor([1], dtype=torch.int32), records, torch.ones(1, dtype=torch.int32),
                      backend="ascendc")  # fmt: skip
    conv_pool = torch.zeros(2, 16, 2047)
    conv_records = allocate_conv_records(2, 4, 16, 2048, dtype=torch.float32)
    conv_records.num_recorded.fill_(2)
    with pytest.raises(RuntimeError, match=r"flush_conv_pending: conv_state_pool: width = .* = 2048 needs"):
        flush_conv_pending(conv_pool, torch.tensor([1], dtype=torch.int32), conv_records,
                           torch.ones(1, dtype=torch.int32), backend="ascendc")  # fmt: skip
