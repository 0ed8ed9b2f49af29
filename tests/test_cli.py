"""The ascend-spec command: bench prints a table and writes JSON; both entry points work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascend_spec.bench.core import BenchContext, measure_ms, peak_allocated_bytes
from ascend_spec.bench.runner import format_table, run_cases
from ascend_spec.cli import main


def test_bench_writes_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--case", "prepare_block_slots", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prepare_block_slots" in printed and "speedup" in printed
    payload = json.loads(out.read_text())
    assert payload["device"] == "cpu"
    rows = payload["rows"]
    assert rows and all(r["op"] == "prepare_block_slots" for r in rows)
    for r in rows:
        assert r["time_ms"] > 0 and r["baseline_ms"] > 0
        assert r["speedup"] == pytest.approx(r["baseline_ms"] / r["time_ms"])


def test_unknown_case_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown bench case"):
        run_cases(BenchContext(device=torch.device("cpu"), quick=True), ["no_such_case"])


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "ascend_spec", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "bench" in done.stdout and "plan" in done.stdout


def test_measure_ms_is_a_median_of_real_time() -> None:
    import time

    ms = measure_ms(lambda: time.sleep(0.002), torch.device("cpu"), warmup=1, repeats=5)
    assert 1.5 < ms < 50


def test_peak_allocated_bytes_sees_temporaries() -> None:
    x = torch.randn(256, 4096)
    softmax_peak = peak_allocated_bytes(lambda: torch.softmax(x, -1).max(-1).values, torch.device("cpu"))
    assert softmax_peak >= x.numel() * 4  # the [256, 4096] softmax temporary
    small_peak = peak_allocated_bytes(lambda: x.amax(-1), torch.device("cpu"))
    assert small_peak < x.numel() * 4 // 100


def test_format_table_aligns_columns() -> None:
    from ascend_spec.bench.core import BenchRow

    table = format_table([BenchRow("op", "case", "reference", "loop", 1.0, 4.0, {"bytes": 10})])
    lines = table.splitlines()
    assert len(lines) == 3 and "4.00x" in lines[2] and "bytes=10" in lines[2]


def test_measure_ms_stops_at_its_time_budget() -> None:
    import time

    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.05)

    measure_ms(slow, torch.device("cpu"), warmup=5, repeats=50, max_seconds=0.2)
    assert 2 <= len(calls) <= 8  # a couple of warm-ups and samples, not 55 calls
