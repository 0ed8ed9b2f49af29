"""The e2e sweep's table, JSON rows and plot from engine results (no engine needed)."""

from __future__ import annotations

import pytest

from ascend_spec.e2e.engine import EngineRun
from ascend_spec.e2e.sweep import SweepRow, format_sweep, plot_sweep


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
        "1", "dynamic", "250.0", "2.50", "125.0", "2.50", "3.00", "1.00", "0.125", "1.00", "0:3 2:7"
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
