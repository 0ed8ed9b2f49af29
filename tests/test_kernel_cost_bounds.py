"""Every AscendC kernel stays within its documented distance from its analytical minimum (docs/host_model.md,
"Cost model"): the host model's counts of a fixed launch against ``instruction_minimum`` of its arguments, as
vector instructions and as estimated A2 time. Counts, not timing: deterministic, so a kernel change that issues
more than its bound allows fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ascend_spec.ascendc import cost_model, host_model
from ascend_spec.bench.cases import prepare_block_slots as block_slots_case
from ascend_spec.bench.cases import verify_causal_conv1d as conv_case
from ascend_spec.bench.cases import verify_gated_delta_rule as gdn_case
from ascend_spec.gdn import verify_causal_conv1d, verify_gated_delta_rule
from ascend_spec.gdn.verify_causal_conv1d import ascendc as conv_ascendc
from ascend_spec.gdn.verify_gated_delta_rule import ascendc as gdn_ascendc
from ascend_spec.ops import (
    allocate_verify_budget,
    max_softmax_confidence,
    prepare_block_slots,
    survival_probs,
)
from ascend_spec.ops.allocate_verify_budget import ascendc as budget_ascendc
from ascend_spec.ops.max_softmax_confidence import ascendc as softmax_ascendc
from ascend_spec.ops.prepare_block_slots import ascendc as block_slots_ascendc


def _ratios(fn: Callable[[], Any], minimum: cost_model.Minimum) -> dict[str, float]:
    fn()  # steady state (the GDN and conv ops replay what the previous call recorded)
    with host_model.count_instructions() as counts:
        fn()
    assert counts["launches"] > 0
    return cost_model.report(counts, minimum, host_model.soc_spec().vector_cores)


def _check(ratios: dict[str, float], module: Any) -> None:
    assert ratios["hm_vector_instruction_ratio"] <= module.VECTOR_INSTRUCTION_RATIO_BOUND, ratios
    assert ratios["hm_time_ratio"] <= module.TIME_RATIO_BOUND, ratios


@pytest.mark.parametrize("dk,dv", [(32, 32), (128, 128)])
def test_verify_gated_delta_rule_within_its_bound(dk: int, dv: int) -> None:
    b, n_tok, h, hv = 2, 16, 1, 2  # the bench's K + 1 = 16 tokens per row
    inp = gdn_case._inputs(b, n_tok, h, hv, dk, dv, torch.device("cpu"), seed=0)
    pool, rec = gdn_case._state(b, n_tok, hv, dk, dv, h, torch.device("cpu"), seed=1)

    def op() -> torch.Tensor:
        return verify_gated_delta_rule(
            inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], cu_seqlens=inp["cu_seqlens"], state_pool=pool,
            state_indices=inp["state_indices"], records=rec, pending=inp["pending"], use_qk_l2norm=True,
            backend="ascendc",
        )  # fmt: skip

    replayed = [min(int(p), n_tok) for p in inp["pending"].tolist()]
    minimum = gdn_ascendc.instruction_minimum([n_tok] * b, replayed, h, hv, dk, dv, inp["v"].element_size())
    _check(_ratios(op, minimum), gdn_ascendc)


def test_verify_causal_conv1d_within_its_bound() -> None:
    b, channels = 2, 256
    inp = conv_case._setup(b, channels, torch.device("cpu"), seed=0)
    cu = inp["cu_seqlens"].tolist()
    recorded = inp["records"].num_recorded[inp["state_indices"].long()].tolist()
    lengths = [cu[i + 1] - cu[i] for i in range(b)]
    # the second (counted) call replays what the first recorded: min(pending, that call's length)
    replayed = [min(int(p), n) for p, n, r in zip(inp["pending"].tolist(), lengths, recorded)]
    minimum = conv_ascendc.instruction_minimum(
        lengths, replayed, channels, conv_case.W, 2, 2, 2, has_bias=True, silu=True
    )
    _check(_ratios(lambda: verify_causal_conv1d(**inp, backend="ascendc"), minimum), conv_ascendc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_softmax_confidence_within_its_bound(dtype: torch.dtype) -> None:
    n, v = 16, 4096
    x = (torch.randn(n, v, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    minimum = softmax_ascendc.instruction_minimum(n, v, x.element_size())
    _check(_ratios(lambda: max_softmax_confidence(x, backend="ascendc"), minimum), softmax_ascendc)


def test_allocate_verify_budget_within_its_bound() -> None:
    b, k = 64, 16
    conf = torch.rand(b, k, generator=torch.Generator().manual_seed(0)) ** 0.3
    surv = survival_probs(conf)
    minimum = budget_ascendc.instruction_minimum(b, k, b * k)
    _check(_ratios(lambda: allocate_verify_budget(surv, b * 4, backend="ascendc"), minimum), budget_ascendc)


def test_prepare_block_slots_within_its_bound() -> None:
    b = 4
    inp = block_slots_case._inputs(b, torch.device("cpu"), seed=b)
    r = b + block_slots_case.PADDING

    def op():
        return prepare_block_slots(
            **inp, block_size=block_slots_case.PAGE, num_query_tokens=block_slots_case.Q,
            mask_token_id=block_slots_case.MASK_ID, num_padded_reqs=r, backend="ascendc",
        )  # fmt: skip

    got = op()
    computed = [
        t.numel()
        for t in (
            got.input_ids,
            got.positions,
            got.slot_mapping,
            got.context_slot_mapping,
            got.context_positions,
        )
    ]
    written = sum(t.numel() * t.element_size() for t in vars(got).values())
    minimum = block_slots_ascendc.instruction_minimum(computed, 0, written, r)
    ratios = _ratios(op, minimum)
    # no vector instructions at all: its work is scalar address arithmetic (docs/host_model.md)
    assert ratios["hm_vector_instruction_ratio"] == 0
    assert ratios["hm_time_ratio"] <= block_slots_ascendc.TIME_RATIO_BOUND, ratios
