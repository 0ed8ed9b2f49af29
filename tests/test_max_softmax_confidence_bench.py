"""The confidence and verify-budget bench cases run in quick mode, check themselves and report their metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ascend_spec.bench.cases import CASE_MODULES
from ascend_spec.bench.core import BenchContext
from ascend_spec.cli import main


def _ctx(backend: str) -> BenchContext:
    return BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True, backend=backend)


def test_registered() -> None:
    assert "max_softmax_confidence" in CASE_MODULES and "allocate_verify_budget" in CASE_MODULES


def test_confidence_case_quick(backend: str) -> None:
    from ascend_spec.bench.cases import max_softmax_confidence as case

    rows = case.run(_ctx(backend))
    assert [r.case for r in rows] == ["N=16 V=2048 float32", "N=16 V=2048 bfloat16"]
    for r in rows:
        assert r.impl == backend and r.time_ms > 0 and r.baseline_ms > 0
        m = r.metrics
        assert m["bytes_read"] == 16 * 2048 * (4 if "float32" in r.case else 2)
        assert m["baseline_peak_temp_bytes"] >= 16 * 2048 * 4  # the softmax itself
        assert (
            m["peak_temp_bytes"] > 0
            and m["temp_ratio"] == m["peak_temp_bytes"] / m["baseline_peak_temp_bytes"]
        )


def test_cli_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--quick",
                "--case",
                "max_softmax_confidence",
                "--case",
                "allocate_verify_budget",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    ops = [r["op"] for r in json.loads(out.read_text())["rows"]]
    assert ops == ["max_softmax_confidence", "max_softmax_confidence", "allocate_verify_budget"]
    assert "peak_temp_bytes" in capsys.readouterr().out
