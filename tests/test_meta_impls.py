"""The Meta implementations of torch.ops._C_ascend_spec give the shapes and dtypes the ops really produce.

Graph capture on the NPU traces the ops through these, so a shape mismatch there would only show on the chip.
The test compiles the real schemas and Meta impls (no torch_npu needed) and compares against the reference.
"""

from __future__ import annotations

import pytest
import torch

from ascend_spec.backend import host_compiler
from ascend_spec.paths import CSRC_DIR

pytestmark = pytest.mark.skipif(host_compiler() is None, reason="needs a C++ compiler")


@pytest.fixture(scope="module")
def meta_ops():
    from pathlib import Path

    from torch.utils.cpp_extension import load

    here = Path(__file__).parent / "native"
    load(
        name="ascend_spec_meta_only",
        sources=[str(here / "meta_only_binding.cpp"), str(CSRC_DIR / "torch_binding_meta.cpp")],
        extra_include_paths=[str(CSRC_DIR)],
        extra_cflags=["-O0"],
        is_python_module=False,
        verbose=False,
    )
    return torch.ops._C_ascend_spec


@pytest.mark.parametrize("rope", [None, "1d", "mrope"])
@pytest.mark.parametrize("sample_from_anchor", [False, True])
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_prepare_block_slots_meta_matches_reference(meta_ops, rope, sample_from_anchor, id_dtype) -> None:
    from ascend_spec.ops import prepare_block_slots

    b, r, q, bs, m = 3, 5, 6, 4, 8
    ids = torch.tensor([5, 6, 7], dtype=id_dtype)
    pos = torch.tensor([4, 9, 13])
    table = torch.arange(b * m, dtype=torch.int32).view(b, m)
    ctx = torch.tensor([2, 0, 3])
    rope_t = {None: None, "1d": pos + 2, "mrope": torch.stack([pos, pos + 1, pos + 2])}[rope]
    ref = prepare_block_slots(
        ids, pos, table, block_size=bs, num_query_tokens=q, mask_token_id=1, sample_from_anchor=sample_from_anchor,
        rope_positions=rope_t, context_lens=ctx, num_padded_reqs=r, backend="reference",
    )  # fmt: skip
    meta = lambda t: None if t is None else t.to("meta")  # noqa: E731
    outs = meta_ops.npu_prepare_block_slots(
        meta(ids), meta(pos), meta(rope_t), meta(table), meta(ref.context_start_loc),
        int(ref.context_start_loc[-1]), bs, q, 1, sample_from_anchor, r,
    )  # fmt: skip
    fields = [
        "input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "sample_indices",
        "context_slot_mapping", "context_positions",
    ]  # fmt: skip
    for name, out in zip(fields, outs):
        want = getattr(ref, name)
        assert out.device.type == "meta", name
        assert (tuple(out.shape), out.dtype) == (tuple(want.shape), want.dtype), name


def _meta(t):
    return None if t is None else t.to("meta")


def _assert_like(out: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert out.device.type == "meta", name
    assert (tuple(out.shape), out.dtype) == (tuple(want.shape), want.dtype), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_max_softmax_partials_meta(meta_ops, dtype) -> None:
    from ascend_spec.ops import max_softmax_partials

    logits = torch.randn(5, 37).to(dtype)
    want = max_softmax_partials(logits, backend="reference")
    outs = meta_ops.npu_max_softmax_partials(_meta(logits), 1.0)
    for name, out, ref in zip(("row_max", "row_sumexp"), outs, want):
        _assert_like(out, ref, name)


@pytest.mark.parametrize("max_budget", [3, 100])
def test_allocate_verify_budget_meta(meta_ops, max_budget) -> None:
    from ascend_spec.ops import allocate_verify_budget, survival_probs

    survival = survival_probs(torch.rand(4, 6))
    want = allocate_verify_budget(survival, 3, max_budget=max_budget, backend="reference")
    outs = meta_ops.npu_allocate_verify_budget(_meta(survival), None, None, 3, max_budget)
    for name, out in zip(("num_drafts", "query_lens", "query_start_loc", "draft_index"), outs):
        _assert_like(out, getattr(want, name), name)


def test_gdn_ops_meta(meta_ops) -> None:
    from ascend_spec.gdn import allocate_records, verify_gated_delta_rule

    t, h, hv, dk, dv, slots = 5, 2, 4, 8, 8, 3
    q, k = torch.randn(t, h, dk).bfloat16(), torch.randn(t, h, dk).bfloat16()
    v = torch.randn(t, hv, dv).bfloat16()
    g, beta = -torch.rand(t, hv), torch.rand(t, hv)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    pending = torch.zeros(2, dtype=torch.int32)
    pool = torch.zeros(slots, hv, dk, dv)
    rec = allocate_records(slots, 4, hv, dk, dv, num_k_heads=h)
    want = verify_gated_delta_rule(
        q, k, v, g, beta, cu_seqlens=cu, state_pool=pool.clone(), state_indices=idx, records=rec,
        pending=pending, backend="reference",
    )  # fmt: skip
    rec_t = [_meta(x) for x in (rec.k, rec.g, rec.u, rec.bank, rec.num_recorded)]
    out = meta_ops.npu_verify_gated_delta_rule(
        *(_meta(x) for x in (q, k, v, g, beta, cu, idx, pending, pool)), *rec_t, 0.5, True
    )
    _assert_like(out, want, "o")
    assert meta_ops.npu_flush_gated_delta_rule(_meta(idx), _meta(pending), _meta(pool), *rec_t) is None


def test_conv1d_ops_meta(meta_ops) -> None:
    from ascend_spec.gdn import allocate_conv_records, verify_causal_conv1d

    t, c, w, slots = 5, 16, 4, 3
    x, weight = torch.randn(t, c).bfloat16(), torch.randn(c, w)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    idx = torch.tensor([1, 2], dtype=torch.int32)
    pending = torch.zeros(2, dtype=torch.int32)
    pool = torch.zeros(slots, c, w - 1, dtype=torch.bfloat16)
    rec = allocate_conv_records(slots, 4, c, w)
    want = verify_causal_conv1d(
        x, weight, None, cu_seqlens=cu, conv_state_pool=pool.clone(), state_indices=idx, records=rec,
        pending=pending, backend="reference",
    )  # fmt: skip
    out = meta_ops.npu_verify_causal_conv1d(
        _meta(x), _meta(weight.t().contiguous()), None, _meta(cu), _meta(pool), _meta(idx), _meta(rec.x),
        _meta(rec.num_recorded), _meta(pending), True,
    )  # fmt: skip
    _assert_like(out, want, "y")
    flushed = meta_ops.npu_flush_conv_pending(
        _meta(pool), _meta(idx), _meta(rec.x), _meta(rec.num_recorded), _meta(pending), True
    )
    assert flushed is None
