"""``out=``: every op writes into caller-owned outputs on every backend, with no allocation that outlives a call.

An engine that captures graphs owns its buffers and reuses them step after step. Each op runs in a loop with the
same ``out`` (allocated once with the ``empty_*`` helpers); the profiler's allocation timeline shows that nothing
allocated during the loop is still alive after it (temporaries are freed; no output is allocated), while the same
loop without ``out=`` keeps one set of outputs per call alive (the measurement sees outputs). Every call's result
is the caller's tensors themselves and equals the result without ``out=``, bit for bit. (Triton's interpreter
leaves a launch's tensors in reference cycles: ``retained_bytes`` collects them before it counts.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from helpers import retained_bytes

from ascend_spec.backend import DISPATCH
from ascend_spec.gdn import (
    allocate_conv_records,
    allocate_records,
    verify_causal_conv1d,
    verify_gated_delta_rule,
)
from ascend_spec.ops import (
    allocate_verify_budget,
    empty_block_slots,
    empty_max_softmax_partials,
    empty_verify_allocation,
    head_confidence,
    max_softmax_confidence,
    max_softmax_partials,
    merge_max_softmax_partials,
    prepare_block_slots,
    survival_probs,
)

CALLS = 3
# The dispatched ops this module loops with out= (an op added to backend.DISPATCH must get a case here).
COVERED = {
    "prepare_block_slots",
    "max_softmax_partials",
    "allocate_verify_budget",
    "verify_gated_delta_rule",
    "verify_causal_conv1d",
}


def test_every_dispatched_op_is_covered() -> None:
    assert set(DISPATCH) == COVERED


def tensors(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if dataclasses.is_dataclass(result):
        return [getattr(result, f.name) for f in dataclasses.fields(result)]
    return list(result)  # type: ignore[arg-type]


def nbytes(result: object) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(result))


def check_persistent(
    step: Callable[[object | None], object],
    fresh_state: Callable[[], None],
    out: object,
    backend: str = "reference",
) -> None:
    """``step(out)`` runs the op once (state advanced by ``fresh_state`` from the same start for both loops)."""
    fresh_state()
    expected = [[t.clone() for t in tensors(step(None))] for _ in range(CALLS)]
    fresh_state()
    step(out)  # warm-up: kernel libraries load, Triton specialises
    fresh_state()
    ptrs = [t.data_ptr() for t in tensors(out)]

    def loop_with_out() -> None:
        for want in expected:
            got = tensors(step(out))
            assert [t.data_ptr() for t in got] == ptrs  # the caller's tensors, not copies
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))

    assert retained_bytes(loop_with_out) == 0
    fresh_state()
    kept: list[object] = []
    assert retained_bytes(lambda: kept.extend(step(None) for _ in range(CALLS))) >= CALLS * nbytes(out)


def test_prepare_block_slots(backend: str) -> None:
    gen = torch.Generator().manual_seed(0)
    b, r, q, bs, m = 3, 5, 4, 4, 6
    ids = torch.randint(0, 100, (b,), generator=gen)
    pos = torch.tensor([5, 9, 2])
    table = torch.randperm(b * m, generator=gen).to(torch.int32).view(b, m)
    ctx = torch.tensor([2, 0, 1])
    rope = torch.stack([pos, pos + 1, pos + 2])
    kw = dict(block_size=bs, num_query_tokens=q, mask_token_id=7, rope_positions=rope, context_lens=ctx)
    out = empty_block_slots(b, num_query_tokens=q, num_padded_reqs=r, mrope=True, total_context=3)
    check_persistent(
        lambda o: prepare_block_slots(ids, pos, table, num_padded_reqs=r, backend=backend, out=o, **kw),
        lambda: None,
        out,
        backend,
    )


def test_max_softmax_ops(backend: str) -> None:
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    check_persistent(
        lambda o: max_softmax_confidence(logits, temperature=0.7, backend=backend, out=o),
        lambda: None,
        torch.empty(6),
        backend,
    )
    check_persistent(
        lambda o: max_softmax_partials(logits, backend=backend, out=o),
        lambda: None,
        empty_max_softmax_partials(6),
        backend,
    )


def test_allocate_verify_budget(backend: str) -> None:
    conf = torch.rand(4, 5, generator=torch.Generator().manual_seed(2))
    survival = torch.cumprod(conf, 1)
    budget = torch.tensor(7)
    caps = torch.tensor([5, 3, 0, 4])
    out = empty_verify_allocation(4, 5, 12)
    check_persistent(
        lambda o: allocate_verify_budget(
            survival, budget, capacities=caps, max_budget=12, backend=backend, out=o
        ),
        lambda: None,
        out,
        backend,
    )


def test_elementwise_confidence_ops() -> None:
    h = torch.randn(4, 5, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    check_persistent(lambda o: head_confidence(h, out=o), lambda: None, torch.empty(4, 5))
    conf = torch.rand(4, 5, generator=torch.Generator().manual_seed(4))
    check_persistent(lambda o: survival_probs(conf, out=o), lambda: None, torch.empty(4, 5))
    m, s = torch.randn(2, 4), torch.rand(2, 4) + 1.0
    check_persistent(lambda o: merge_max_softmax_partials(m, s, out=o), lambda: None, torch.empty(4))


def test_verify_gated_delta_rule(backend: str) -> None:
    gen = torch.Generator().manual_seed(5)
    t, h, hv, dk, dv, slots = 6, 1, 2, 16, 16, 4
    q, k = torch.randn(t, h, dk, generator=gen), torch.randn(t, h, dk, generator=gen)
    v = torch.randn(t, hv, dv, generator=gen)
    g = -torch.rand(t, hv, generator=gen)
    beta = torch.rand(t, hv, generator=gen)
    cu = torch.tensor([0, 2, 2, 6])
    idx = torch.tensor([3, -1, 1])
    pending = torch.tensor([0, 0, 0], dtype=torch.int32)
    pool0 = torch.randn(slots, hv, dk, dv, generator=gen)
    state: dict[str, object] = {}

    def fresh() -> None:
        state["pool"] = pool0.clone()
        state["records"] = allocate_records(slots, 4, hv, dk, dv, num_k_heads=h)
        pending.zero_()

    def step(o: object | None) -> torch.Tensor:
        result = verify_gated_delta_rule(
            q, k, v, g, beta, cu_seqlens=cu, state_pool=state["pool"], state_indices=idx,
            records=state["records"], pending=pending, use_qk_l2norm=True, backend=backend, out=o,
        )  # fmt: skip
        pending.copy_(torch.tensor([1, 0, 3], dtype=torch.int32))  # the next call commits a prefix
        return result

    check_persistent(step, fresh, torch.empty(t, hv, dv), backend)


def test_verify_causal_conv1d(backend: str) -> None:
    gen = torch.Generator().manual_seed(6)
    t, c, w, slots = 7, 40, 4, 4
    x = torch.randn(t, c, generator=gen)
    weight = torch.randn(c, w, generator=gen)
    bias = torch.randn(c, generator=gen)
    cu = torch.tensor([0, 3, 3, 7])
    idx = torch.tensor([2, -1, 0])
    pending = torch.tensor([0, 0, 0], dtype=torch.int32)
    pool0 = torch.randn(slots, c, w - 1, generator=gen)
    state: dict[str, object] = {}

    def fresh() -> None:
        state["pool"] = pool0.clone()
        state["records"] = allocate_conv_records(slots, 4, c, w, dtype=torch.float32)
        pending.zero_()

    def step(o: object | None) -> torch.Tensor:
        result = verify_causal_conv1d(
            x, weight, bias, cu_seqlens=cu, conv_state_pool=state["pool"], state_indices=idx,
            records=state["records"], pending=pending, backend=backend, out=o,
        )  # fmt: skip
        pending.copy_(torch.tensor([2, 0, 1], dtype=torch.int32))
        return result

    check_persistent(step, fresh, torch.empty(t, c), backend)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: max_softmax_confidence(torch.randn(3, 8), out=torch.empty(4)), r"out must have shape \[3\]"),
        (
            lambda: max_softmax_confidence(torch.randn(3, 8), out=torch.empty(3, dtype=torch.float64)),
            "out must have dtype",
        ),
        (
            lambda: max_softmax_confidence(torch.randn(3, 8), out=torch.empty(6)[::2]),
            "out must be contiguous",
        ),
        (
            lambda: allocate_verify_budget(torch.full((2, 3), 0.5), 2, out=empty_verify_allocation(2, 3, 3)),
            r"out.draft_index must have shape \[2\]",
        ),
        (
            lambda: allocate_verify_budget(torch.full((2, 3), 0.5), 2, out=torch.empty(2)),
            "out must be a VerifyAllocation",
        ),
        (
            lambda: prepare_block_slots(
                torch.tensor([1]),
                torch.tensor([0]),
                torch.zeros(1, 2, dtype=torch.int32),
                block_size=4,
                num_query_tokens=2,
                mask_token_id=0,
                out=empty_block_slots(1, num_query_tokens=3),
            ),
            r"out.input_ids must have shape \[2\]",
        ),  # fmt: skip
    ],
)
def test_bad_out_is_a_value_error_naming_the_field(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()
