"""Measured step costs: residuals against the profiles per batch size, the window's statistic pushed to the
controller, the first run of each token count left out."""

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


def test_corrections_are_the_windows_statistic_and_reach_the_controller() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, window=5, refresh=1, statistic="median")
    assert costs.corrections(4) == (0.0, 0.0)  # nothing measured: the profiles decide alone
    costs.add("plain", 4, 0, 50e-3)  # the first run of 4 tokens: one-time work, dropped
    assert costs.residual("plain", 4) is None
    for ms in (1.5, 1.4, 9.0):  # target part of plain steps at B = 4 (V(4) = 1 ms); 9 ms: a burst
        costs.add("plain", 4, 0, ms * 1e-3)
    assert costs.residual("plain", 4) == pytest.approx(0.5)
    # only plain steps measured: both modes share the residual, nothing speculative-only is known yet
    assert costs.corrections(4) == pytest.approx((0.5, 0.5))
    for part, t, ms in (("verify", 12, 2.2), ("draft", 0, 0.9)):
        costs.add(part, 4, t, 1.0)  # first runs, dropped
        costs.add(part, 4, t, ms * 1e-3)
    # verify: V(16) = 1.2 ms, residual 1.0 (0.5 more than a plain step's); draft: D(16) = 0.3 ms, residual 0.6
    assert costs.corrections(4) == pytest.approx((0.5 + 0.5 + 0.6, 0.5))
    assert ctl.step_corrections(4) == pytest.approx((1.6, 0.5))
    assert ctl.step_cost(4, 12) == pytest.approx(0.3 + 1.2 + 1.6)
    assert ctl.step_corrections(1) == (0.0, 0.0)  # per batch size
    assert costs.as_dict()["samples"] == {"plain": 3, "verify": 1, "draft": 1}
    assert costs.as_dict()["corrections_ms"] == {"4": [1.6, 0.5]}


def test_the_minimum_ignores_bursts_and_the_window_follows_the_machine() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, window=3, refresh=1)  # statistic "min", the profiles' default
    for ms in (0.0, 1.3, 8.0, 1.2, 6.0):  # first run dropped; bursts of 8 and 6 ms
        costs.add("plain", 1, 0, ms * 1e-3)
    assert costs.residual("plain", 1) == pytest.approx(0.2)
    for ms in (1.6, 1.7, 1.6):  # the machine got slower: the window forgets the old samples
        costs.add("plain", 1, 0, ms * 1e-3)
    assert costs.residual("plain", 1) == pytest.approx(0.6)


def test_a_measured_speculative_step_cost_turns_a_marginal_drafter_off() -> None:
    """On the profiles alone survivals of 0.3 are worth a full block at B = 4; once the engine measured that a
    speculative step costs 2 ms more than the profiles say (and a plain one 0.2 ms more), plain decoding wins."""
    ctl = _controller()
    surv = torch.full((4, 3), 0.3)
    assert ctl.plan(surv).total_budget == 12
    costs = MeasuredStepCosts(ctl, window=3, refresh=3)
    for _ in range(4):
        costs.add("plain", 4, 0, 1.2e-3)
        costs.add("verify", 4, 12, 3.2e-3)
        costs.add("draft", 4, 0, 0.3e-3)
    assert ctl.step_corrections(4) == pytest.approx((2.0, 0.2))
    assert ctl.plan(surv).total_budget == 0


def test_corrections_never_make_a_cost_non_positive_and_bad_settings_are_refused() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, refresh=1)
    costs.add("plain", 1, 0, 0.0)
    costs.add("plain", 1, 0, 0.0)  # measured 0 s against V(1) = 1 ms: clamped to half the profile's cost
    assert ctl.step_corrections(1)[1] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match=r"part must be one of draft, plain, verify; got 'prefill'"):
        costs.add("prefill", 1, 0, 1.0)
    with pytest.raises(ValueError, match=r"window must be >= 1; got 0"):
        MeasuredStepCosts(ctl, window=0)
    with pytest.raises(ValueError, match=r"statistic must be one of median, min; got 'mean'"):
        MeasuredStepCosts(ctl, statistic="mean")


def test_each_batch_size_is_sampled_every_step_until_its_window_is_full_then_one_in_every() -> None:
    ctl = _controller()
    costs = MeasuredStepCosts(ctl, window=3, every=4)
    assert [costs.sample_step(2) for _ in range(3)] == [True] * 3  # B = 2 learns at full speed
    assert [costs.sample_step(2) for _ in range(8)] == [False, False, False, True] * 2
    assert [costs.sample_step(5) for _ in range(3)] == [True] * 3  # a new B: its own window first
    every_step = MeasuredStepCosts(ctl, window=2, every=1)
    assert all(every_step.sample_step(1) for _ in range(10))
    with pytest.raises(ValueError, match="every must be >= 1; got 0"):
        MeasuredStepCosts(ctl, every=0)
