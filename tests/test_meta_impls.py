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
