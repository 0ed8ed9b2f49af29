"""The e2e sweep's table, JSON rows and plot from engine results (no engine needed)."""

from __future__ import annotations

import itertools
import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_spec.e2e.engine import EngineRun
from ascend_spec.e2e.sweep import (
    SweepRow,
    chance_below_if_equal,
    format_profile,
    format_summary,
    format_sweep,
    pinned_cpus,
    plot_points,
    plot_sweep,
    replica_order,
    summarize_sweep,
    sweep_prompts,
)


def _run(tokens: int, seconds: float, dynamic: dict | None = None, drafts: int = 0, draft_tokens: int = 0):
    return EngineRun(
        tokens=[[1] * tokens],
        seconds=seconds,
        cpu_seconds=2 * seconds,
        dynamic=dynamic,
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
    )


ROWS = [
    SweepRow(1, "plain", _run(100, 1.0)),
    SweepRow(1, "K=2", _run(100, 0.5, drafts=10, draft_tokens=20)),
    SweepRow(
        1,
        "dynamic",
        _run(
            100,
            0.4,
            {"totals": {"0": 3, "2": 7}, "overhead_ms_per_step": 0.125, "host_copies_per_step": 1.0},
            drafts=7,
            draft_tokens=14,
        ),
    ),
    SweepRow(4, "plain", _run(400, 2.0)),
    SweepRow(4, "dynamic", EngineRun(error="RuntimeError: boom")),
]


def test_table_has_ratios_to_plain_at_the_same_batch_size_and_the_budget_histogram() -> None:
    lines = format_sweep(ROWS).splitlines()
    cells = [[c.strip() for c in line.split("|")] for line in lines[2:]]
    assert cells[0][:6] == ["1", "plain", "100.0", "1.00", "50.0", "1.00"]
    assert cells[1][:7] == ["1", "K=2", "200.0", "2.00", "100.0", "2.00", "3.00"]
    assert cells[2] == [
        "1", "dynamic", "250.0", "2.50", "125.0", "2.50", "3.00", "1.00", "0.125", "1.00", "-", "-", "0:3 2:7"
    ]  # fmt: skip
    assert cells[3][:6] == ["4", "plain", "200.0", "1.00", "100.0", "1.00"]
    assert cells[4][:3] == ["4", "dynamic", "failed"] and "boom" in cells[4][-1]
    assert len(cells[4]) == len(cells[0])
    d = ROWS[2].as_dict(100.0, 50.0)
    assert d["vs_plain"] == 2.5 and d["cpu_vs_plain"] == 2.5 and d["budget_histogram"] == {"0": 3, "2": 7}


def test_plot_is_written(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.png"
    plot_sweep(ROWS, out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _row(b: int, mode: str, replicas: list[float]) -> SweepRow:
    return SweepRow(b, mode, _run(int(max(replicas)), 1.0), replicas)


def test_the_plot_draws_each_modes_fastest_replica_over_its_slowest_sorted_by_batch() -> None:
    rows = [
        _row(8, "plain", [790.0, 800.0]),
        _row(1, "plain", [100.0, 90.0]),
        _row(1, "dynamic", [120.0]),
        SweepRow(8, "dynamic", EngineRun(error="RuntimeError: boom")),
        SweepRow(4, "plain", _run(400, 1.0)),  # no replica list: the run alone is both ends
    ]
    assert plot_points(rows) == {
        "plain": [(1, 100.0, 90.0), (4, 400.0, 400.0), (8, 800.0, 790.0)],
        "dynamic": [(1, 120.0, 120.0)],
    }


def test_replicas_give_each_row_its_spread_and_each_comparison_its_noise_and_verdict() -> None:
    rows = [
        _row(1, "plain", [100.0, 98.0]),  # spread 2 %
        _row(1, "K=1", [80.0, 40.0]),  # a noisy row that is not compared: no effect
        _row(1, "K=2", [150.0, 144.0]),  # spread 4 %
        _row(1, "dynamic", [147.0, 146.0]),  # 0.98 of K = 2: within 4 %
        _row(4, "plain", [400.0, 396.0]),
        _row(4, "K=2", [300.0, 299.0]),
        _row(4, "dynamic", [380.0, 379.0]),  # 0.95 of plain against 1 % noise: below
        _row(8, "plain", [800.0]),  # one replica: no spread, no noise
        _row(8, "K=2", [900.0]),
        _row(8, "dynamic", [900.0]),
        _row(16, "plain", [1.0]),  # no dynamic row: no verdict
    ]
    assert rows[2].spread == pytest.approx(0.04) and rows[7].spread is None
    cells = [[c.strip() for c in line.split("|")] for line in format_sweep(rows).splitlines()[2:]]
    assert cells[2][-3] == "4.0%" and cells[7][-3] == "-"
    one, four, eight = summarize_sweep(rows)
    assert (one.batch, one.best_k) == (1, "K=2")
    assert one.noise_vs_best_k == pytest.approx(0.04) and one.noise_vs_plain == pytest.approx(0.02)
    assert one.vs_best_k == pytest.approx(0.98) and one.vs_plain == pytest.approx(1.47) and one.meets
    assert four.best_k == "K=2" and four.noise_vs_plain == pytest.approx(0.01)
    assert four.vs_plain == pytest.approx(0.95) and not four.meets
    assert eight.noise_vs_plain is None and eight.meets  # exactly the best K, above plain
    text = format_summary([one, four, eight]).splitlines()
    assert text[0] == (
        "B=1: dynamic 147.0 tok/s = 1.470 x plain (noise 2.0%), 0.980 x best fixed K=2 (150.0; noise 4.0%): "
        "meets (>= best K and plain within noise)"
    )
    assert text[1].endswith("below") and "unmeasured (one replica)" in text[2]
    assert one.chance_below_if_equal == pytest.approx(1 / 6)  # two replicas each
    assert eight.chance_below_if_equal == pytest.approx(1 / 2)  # one each: a coin
    assert text[3] == (
        "(below = every dynamic replica slower than every replica compared; for engines exactly as fast, "
        "at most 50.0% per batch size with these replicas)"
    )
    d = one.as_dict()
    assert d["meets"] is True and d["noise_vs_best_fixed_k"] == 0.04 and d["dynamic_vs_best_fixed_k"] == 0.98
    assert (
        d["replicas"] == {"dynamic": 2, "plain": 2, "best_fixed_k": 2}
        and d["chance_below_if_equal"] == 0.16667
    )
    assert rows[0].as_dict(100.0)["replicas_tokens_per_s"] == [100.0, 98.0]


@given(st.integers(1, 8), st.integers(1, 6))
def test_replicas_are_started_so_no_config_sits_later_on_average(n: int, replicas: int) -> None:
    order = replica_order(n, replicas)
    assert sorted(order) == sorted(list(range(n)) * replicas)
    assert order[:n] == list(range(n))
    mean = [sum(p for p, i in enumerate(order) if i == c) / replicas for c in range(n)]
    if replicas % 2 == 0:
        assert len(set(mean)) == 1  # every config at the same mean position


def test_pin_cpu_auto_takes_the_last_allowed_cpu_when_there_are_two_or_more(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert pinned_cpus("auto") == [5]
    assert pinned_cpus("AUTO ") == [5]
    assert pinned_cpus("none") is None
    assert pinned_cpus("3") == [3]
    assert pinned_cpus(0) == [0]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2})
    assert pinned_cpus("auto") is None  # one CPU: the engines would share it with the orchestrator


@pytest.mark.parametrize("value", ["4", "-1", "first", ""])
def test_pin_cpu_outside_the_allowed_set_is_refused_with_the_value(monkeypatch, value: str) -> None:  # noqa: ANN001
    from ascend_spec.cli_args import CommandError

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(
        CommandError, match=rf"--pin-cpu must be 'auto', 'none' or one of .*\[0, 1\]; got {value!r}"
    ):
        pinned_cpus(value)


def _verdict(dynamic: list[float], fixed: list[float]) -> bool:
    """Whether dynamic meets against one fixed-K row (plain decoding far below, so only that comparison counts)."""
    rows = [_row(1, "plain", [1.0]), _row(1, "K=3", fixed), _row(1, "dynamic", dynamic)]
    (summary,) = summarize_sweep(rows)
    return summary.meets


@given(
    st.lists(st.integers(100, 10_000), min_size=1, max_size=6),
    st.lists(st.integers(100, 10_000), min_size=1, max_size=6),
)
def test_below_means_every_dynamic_replica_is_slower_than_every_replica_compared(
    dynamic: list[int], fixed: list[int]
) -> None:
    if not _verdict([float(t) for t in dynamic], [float(t) for t in fixed]):
        assert max(dynamic) <= min(fixed)  # < exactly; an exact tie may round either way


@pytest.mark.parametrize("n_dynamic,n_fixed", [(1, 1), (2, 1), (2, 2), (3, 3), (2, 4), (5, 5)])
@pytest.mark.parametrize("step", [1, 40, 900])  # replicas 0.1 %, 4 %, 90 % apart
def test_equal_engines_read_below_at_most_once_per_ordering_of_their_replicas(
    n_dynamic: int, n_fixed: int, step: int
) -> None:
    # Equal engines: the n_dynamic + n_fixed replica speeds are exchangeable, so every choice of which of them
    # belong to the dynamic row is equally likely. Counting the choices that read "below" gives the chance.
    speeds = [1000.0 + step * i for i in range(n_dynamic + n_fixed)]
    choices = list(itertools.combinations(range(len(speeds)), n_dynamic))
    below = sum(
        not _verdict([speeds[i] for i in c], [speeds[i] for i in range(len(speeds)) if i not in c])
        for c in choices
    )
    assert len(choices) == math.comb(n_dynamic + n_fixed, n_dynamic)
    assert below <= 1  # only the choice of the slowest n_dynamic can read below
    assert below / len(choices) <= chance_below_if_equal(n_dynamic, n_fixed)
    if n_dynamic == n_fixed == 1:  # no noise measured: the slower engine reads below, a coin
        assert below == 1 and chance_below_if_equal(1, 1) == 0.5


def test_mixed_rows_give_verify_lengths_per_request_class_in_the_table_the_json_and_the_summary() -> None:
    classes = ["repetitive", "other"]
    tokens = [[1] * 17, [1] * 17]  # 16 tokens after the prefill's

    def run(drafts: list[list[int]], seconds: float, dynamic: dict | None = None) -> EngineRun:
        return EngineRun(
            tokens=tokens, seconds=seconds, cpu_seconds=seconds, request_drafts=drafts, dynamic=dynamic
        )

    costs = {"1": 10.0, "8": 15.0}
    rows = [
        SweepRow(2, "plain", run([], 1.0), [32.0], classes),
        # K = 3: the repetitive request verifies 3 drafts in 4 steps, all accepted; the other one 16 x 3, none
        SweepRow(2, "K=3", run([[4, 12, 12], [16, 48, 0]], 0.8), [40.0], classes),
        # dynamic: the same for the repetitive request, the other one verifies 1 draft in 2 of its 16 steps
        SweepRow(2, "dynamic", run([[4, 12, 12], [2, 2, 0]], 0.5, {"target_costs": costs}), [64.0], classes),
    ]
    cells = [[c.strip() for c in line.split("|")] for line in format_sweep(rows).splitlines()[2:]]
    assert [c[-2] for c in cells] == [
        "-",
        "repetitive 4.00, other 4.00",
        "repetitive 4.00, other 1.12",
    ]
    d = rows[2].as_dict(32.0)
    assert d["class_verify_length"] == {"repetitive": 4.0, "other": 1.125}
    assert d["class_acceptance_length"] == {"repetitive": 4.0, "other": 1.0}
    assert d["target_costs"] == costs and rows[0].as_dict(32.0)["class_verify_length"] is None
    (summary,) = summarize_sweep(rows)
    s = summary.as_dict()
    assert {"batch", "dynamic_vs_best_fixed_k", "noise_vs_best_fixed_k", "meets"} <= s.keys()
    assert s["batch"] == 2 and s["dynamic_vs_best_fixed_k"] == 1.6 and s["meets"] is True
    assert s["dynamic_class_verify_length"] == {"repetitive": 4.0, "other": 1.125}
    assert s["best_fixed_k_class_verify_length"] == {"repetitive": 4.0, "other": 4.0}
    assert (
        format_summary([summary])
        .splitlines()[0]
        .endswith(
            "; verify length by class: dynamic repetitive 4.00, other 1.12, K=3 repetitive 4.00, other 4.00"
        )
    )
    assert format_profile(rows) == "target cost profile at B=2 (tokens:ms per forward): 1:10.00 8:15.00"
    assert format_profile(rows[:2]).endswith("not measured (no dynamic engine ran)")


def test_sweep_prompts_of_the_default_workload_have_no_classes() -> None:
    from ascend_spec.e2e.cli import builtin_prompts

    assert sweep_prompts("default", 4, max_tokens=8, num_spec=3) == (builtin_prompts(4), [])
    prompts, classes = sweep_prompts("mixed", 4, max_tokens=8, num_spec=3)
    assert len(prompts) == 4 and classes == ["repetitive", "other", "repetitive", "other"]
