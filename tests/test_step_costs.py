"""Measured step costs: residuals against the profiles per batch size, medians pushed to the controller."""

from __future__ import annotations

import pytest
import torch

from ascend_spec.graph import BudgetController, CostProfile
from ascend_spec.vllm.step_costs import MeasuredStepCosts


def _controller() -> BudgetController:
    return BudgetController(
        CostProfile({4: 0.2, 32: 0.3}),
        CostProfile({1: 1.0, 8: 1.0, 16: 1.2, 32: 1.5}),
        max_drafts=3,
        draft_tokens_per_request=4,
    )


def test_corrections_are_the_median_residuals_and_reach_the_controller() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, window=5, refresh=1)
    assert costs.corrections(4) == (0.0, 0.0)  # nothing measured: the profiles decide alone
    for ms in (1.5, 1.4, 9.0):  # target part of plain steps at B = 4 (V(4) = 1 ms); 9 ms: a burst
        costs.add("plain", 4, 0, ms * 1e-3)
    assert costs.residual("plain", 4) == pytest.approx(0.5)
    # only plain steps measured: both modes share the residual, nothing speculative-only is known yet
    assert costs.corrections(4) == pytest.approx((0.5, 0.5))
    costs.add("verify", 4, 12, 2.2e-3)  # V(16) = 1.2 ms: residual 1.0, 0.5 more than a plain step's
    costs.add("draft", 4, 0, 0.9e-3)  # D(16) = 0.3 ms: residual 0.6
    assert costs.corrections(4) == pytest.approx((0.5 + 0.5 + 0.6, 0.5))
    assert ctl.step_corrections(4) == pytest.approx((1.6, 0.5))
    assert ctl.step_cost(4, 12) == pytest.approx(0.3 + 1.2 + 1.6)
    assert ctl.step_corrections(1) == (0.0, 0.0)  # per batch size
    assert costs.as_dict()["samples"] == {"plain": 3, "verify": 1, "draft": 1}


def test_a_measured_speculative_step_cost_turns_a_marginal_drafter_off() -> None:
    """On the profiles alone survivals of 0.3 are worth a full block at B = 4; once the engine measured that a
    speculative step costs 2 ms more than the profiles say (and a plain one 0.2 ms more), plain decoding wins."""
    ctl = _controller()
    surv = torch.full((4, 3), 0.3)
    assert ctl.plan(surv).total_budget == 12
    costs = MeasuredStepCosts(ctl, window=3, refresh=3)
    for _ in range(3):
        costs.add("plain", 4, 0, 1.2e-3)
        costs.add("verify", 4, 12, 3.2e-3)
        costs.add("draft", 4, 0, 0.3e-3)
    assert ctl.step_corrections(4) == pytest.approx((2.0, 0.2))
    assert ctl.plan(surv).total_budget == 0


def test_corrections_never_make_a_cost_non_positive_and_bad_parts_are_refused() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, refresh=1)
    costs.add("plain", 1, 0, 0.0)  # measured 0 s against V(1) = 1 ms: clamped to half the profile's cost
    assert ctl.step_corrections(1)[1] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match=r"part must be one of draft, plain, verify; got 'prefill'"):
        costs.add("prefill", 1, 0, 1.0)
    with pytest.raises(ValueError, match=r"window must be >= 1; got 0"):
        MeasuredStepCosts(ctl, window=0)
