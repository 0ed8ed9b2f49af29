"""The gdn_conv1d bench case runs in quick mode on every backend, checks itself against its loop baseline and
reports memory/traffic figures consistent with the design."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ascend_spec.bench.cases import CASE_MODULES
from ascend_spec.bench.cases import verify_causal_conv1d as case
from ascend_spec.bench.core import BenchContext
from ascend_spec.cli import main


def test_registered() -> None:
    assert "verify_causal_conv1d" in CASE_MODULES


def test_quick_case(backend: str) -> None:
    ctx = BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True, backend=backend)
    rows = case.run(ctx)
    assert [r.case for r in rows] == ["B=2 C=256 W=4 K=15 bf16", "B=4 C=256 W=4 K=15 bf16"]
    for r in rows:
        m = r.metrics
        assert r.impl == backend and r.time_ms > 0 and r.baseline_ms > 0
        # one state (W-1 inputs) + records of K+1 inputs + the count, per request, in bf16
        assert m["state_bytes_per_request"] == 256 * 3 * 2 + 16 * 256 * 2 + 4
        assert m["per_draft_slot_state_bytes_per_request"] == 16 * 256 * 3 * 2
        assert m["bytes_moved"] < m["per_draft_slot_bytes_moved"]


def test_traffic_model_counts_one_state_read_and_at_most_one_write_per_row() -> None:
    inp = case._setup(4, 64, torch.device("cpu"), seed=1)
    tokens = int(inp["x"].shape[0])
    ours, per_slot = case._traffic(inp, 64)
    e, state = 2, 64 * 3 * 2
    io = 2 * tokens * 64 * e + 64 * 5 * e  # x read, y written, weights + bias
    assert ours == io + 4 * state + 4 * state + tokens * 64 * e  # every row has pending > 0 here
    assert per_slot == io + 4 * state + tokens * state


def test_cli_quick(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--case", "verify_causal_conv1d", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["op"] for r in rows] == ["verify_causal_conv1d"] * 2
