"""The ascend-spec command: bench table, JSON and chart; every user error is one line and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascend_spec.backend import BACKENDS
from ascend_spec.bench.core import BenchContext, measure_ms, peak_allocated_bytes
from ascend_spec.bench.runner import case_names, format_table, run_cases
from ascend_spec.cli import main

CASE_NAMES = case_names()


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


# -- user errors: one line `ascend-spec <command>: error: ...`, exit status 2, no traceback, no work done -------
def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err  # no usage block, no traceback, no bench progress line
    command = argv[0] if argv and argv[0] in ("bench", "plan", "e2e") else None
    prefix = f"ascend-spec {command}: error: " if command else "ascend-spec: error: "
    assert lines[0].startswith(prefix), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert captured.out == ""  # nothing ran
    return lines[0]


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["bench", "--case", "bogus"], ["--case", "'bogus'", *CASE_NAMES]),
        (["bench", "--device", "foo"], ["--device", "'foo'"]),
        (["bench", "--device", "cpu:1"], ["--device", "'cpu:1'"]),
        (["bench", "--device", "cuda:x"], ["--device", "'cuda:x'"]),
        (["bench", "--backend", "bogus"], ["--backend", "'bogus'", *BACKENDS]),
        (["bench", "--repeats", "0"], ["--repeats", ">= 1; got 0"]),
        (["bench", "--repeats", "many"], ["--repeats", "got 'many'"]),
        (["bench", "--threads", "-1"], ["--threads", ">= 1; got -1"]),
        (["bench", "--threads", "0"], ["--threads", ">= 1; got 0"]),
        (["bench", "--warmup", "-5"], ["--warmup", ">= 0; got -5"]),
        (["bench", "--quick", "--repeats", "5"], ["--quick sets", "drop --quick or --repeats"]),
        (["bench", "--quick", "--warmup", "0"], ["--quick sets", "drop --quick or --warmup"]),
        (["plan", "--explain", "0"], ["--explain", ">= 1; got 0"]),
        (["plan", "--batch-sizes", "8", "0"], ["--batch-sizes", ">= 1; got 0"]),
        (["plan", "--max-drafts", "0"], ["--max-drafts", ">= 1; got 0"]),
        (["plan", "--max-drafts", "12"], ["max_drafts must be in [1, 9]"]),
        (["plan", "--profile", "no_such_profile"], ["neither a file nor a shipped config"]),
        (["e2e", "--sweep", "--pin-cpu", "9999"], ["--pin-cpu", "got '9999'"]),
        (["e2e", "--runner", "v3"], ["--runner", "invalid choice: 'v3'"]),
        (["e2e", "--sweep", "--requests-per-slot", "0"], ["--requests-per-slot", ">= 1; got 0"]),
        (["e2e", "--sweep", "--workload", "bogus"], ["--workload", "default, mixed", "got 'bogus'"]),
        (["e2e", "--workload", "mixed"], ["--workload mixed", "add --sweep"]),
        (["e2e", "--sweep", "--workload", "mixed", "--hybrid"], ["--workload mixed", "drop --hybrid"]),
        (
            ["e2e", "--sweep", "--workload", "mixed", "--target", "/m"],
            ["--workload mixed", "drop --target /m"],
        ),
        (["e2e", "--sweep", "--workload", "mixed", "--constant"], ["--workload mixed", "drop --constant"]),
        (["e2e", "--sweep", "--workload", "mixed", "--max-tokens", "250"], ["--max-tokens 250 --num-spec 3"]),
        (
            ["e2e", "--sweep", "--method", "ngram", "--method", "dflash"],
            ["one --method", "got ngram, dflash"],
        ),
        (["e2e", "--sweep", "--method", "eagle"], ["--method", "invalid choice: 'eagle'"]),
        (["e2e", "--sweep", "--workload", "mixed", "--method", "mtp"], ["--method mtp", "--workload mixed"]),
        (["e2e", "--sweep", "--no-hybrid", "--method", "mtp"], ["--method mtp", "--no-hybrid"]),
        ([], ["required: command"]),
        (["bogus"], ["invalid choice: 'bogus'"]),
    ],
)
def test_bad_flags(argv: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _fails(argv, capsys, *fragments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_bench_device_cuda_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["bench", "--device", "cuda"], capsys, "--device", "CUDA is not available")


def test_bench_device_npu_without_torch_npu(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed")
    _fails(["bench", "--device", "npu"], capsys, "--device", "needs torch_npu")


def test_bench_backend_that_cannot_run_here(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    _fails(["bench", "--device", "cpu", "--backend", "triton"], capsys, "'triton'", "TRITON_INTERPRET=1")


@pytest.mark.parametrize("command", ["bench", "plan"])
@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_output_into_a_missing_folder_is_refused_before_work(
    command: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / ("out.png" if flag == "--plot" else "out.json")
    _fails([command, flag, str(target)], capsys, flag, f"folder {tmp_path / 'missing'} does not exist")
    _fails([command, flag, str(tmp_path)], capsys, flag, f"{tmp_path} is a folder")


@pytest.mark.parametrize("command", ["bench", "plan"])
def test_json_and_plot_into_one_file_and_unknown_image_suffix(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = str(tmp_path / "out.png")
    _fails([command, "--json", same, "--plot", same], capsys, "--json and --plot name the same file")
    _fails([command, "--plot", str(tmp_path / "out.txt")], capsys, "--plot", "got '.txt'")


def test_plan_profile_that_is_a_folder_or_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails(["plan", "--profile", str(tmp_path)], capsys, f"{tmp_path}: is a folder, not a JSON file")
    latin1 = tmp_path / "profile.json"
    latin1.write_bytes('{"label": "café"}'.encode("latin-1"))
    _fails(["plan", "--profile", str(latin1)], capsys, f"{latin1}: not UTF-8 text")
    _fails(["plan", "--acceptance", str(latin1)], capsys, f"{latin1}: not UTF-8 text")


def test_plan_profile_with_a_string_bool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ascend_spec.paths import CONFIGS_DIR

    data = json.loads((CONFIGS_DIR / "profiles" / "talk_ascend910b.json").read_text())
    data["drafters"]["eagle3"]["sequential"] = "false"
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    _fails(
        ["plan", "--profile", str(path)], capsys, str(path), "drafters.eagle3.sequential must be a JSON bool"
    )


def test_bench_help_lists_cases_and_backends(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in (*CASE_NAMES, *BACKENDS, "auto"):
        assert name in text


def test_user_error_from_the_installed_entry_point_has_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ascend_spec", "bench", "--case", "bogus"], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ascend-spec bench: error: argument --case: invalid choice: 'bogus' (choose from "
        f"{', '.join(repr(c) for c in CASE_NAMES)})"
    ]


# -- bench --plot ---------------------------------------------------------------------------------------------
def test_bench_plot_writes_a_png_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    png, out = tmp_path / "bench.png", tmp_path / "bench.json"
    assert main(["bench", "--quick", "--plot", str(png), "--json", str(out)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert 30_000 < len(data) < 2_000_000  # a real chart with text, not an empty canvas
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        width, height = image.size
        colours = len(image.convert("RGB").resize((200, 100)).getcolors(maxcolors=20_000) or ())
    payload = json.loads(out.read_text())
    assert width >= 1200 and height >= 300 + 30 * len(payload["rows"])  # one bar row per bench row
    assert colours > 50  # bars of several colours, text, lines
    bandwidth = payload["bandwidth"]
    assert bandwidth["device"] == "cpu" and bandwidth["nominal_gbs"] is None and bandwidth["copy_gbs"] > 0


def test_achieved_bandwidth_of_a_row() -> None:
    from ascend_spec.bench.core import BenchRow
    from ascend_spec.bench.plot import achieved_gbs

    moved = BenchRow("op", "c", "reference", "b", 2.0, 4.0, {"bytes_moved": 4_000_000, "bytes_read": 1})
    assert achieved_gbs(moved) == pytest.approx(2.0)  # 4e6 bytes in 2 ms
    split = BenchRow("op", "c", "reference", "b", 0.5, 1.0, {"bytes_read": 300_000, "bytes_written": 200_000})
    assert achieved_gbs(split) == pytest.approx(1.0)
    assert achieved_gbs(BenchRow("op", "c", "reference", "b", 1.0, 1.0, {"tokens": 5})) is None


def test_device_bandwidth_figures() -> None:
    from ascend_spec.bench.bandwidth import device_bandwidth, nominal_peak_gbs

    # H100 SXM: HBM3 at 2619 MHz on a 5120-bit bus, 3.35 TB/s in its datasheet
    assert nominal_peak_gbs(2_619_000, 5120) == pytest.approx(3352.32)
    cpu = device_bandwidth(torch.device("cpu"))
    assert cpu.nominal_gbs is None and 0.1 < cpu.copy_gbs < 10_000


def test_bad_checks_environment_is_reported_before_work(
    capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "yes")
    _fails(["bench", "--device", "cpu"], capsys, "ASCEND_SPEC_CHECKS must be 0 or 1; got 'yes'")


def test_a_failed_write_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    import ascend_spec.bench.runner as runner

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "write_json", disk_full)
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--case", CASE_NAMES[0], "--json", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[bench]")]
    assert err == [f"ascend-spec bench: error: --json {out}: cannot be written (No space left on device)"]


def test_nominal_peak_from_cuda_device_properties(monkeypatch) -> None:
    from types import SimpleNamespace

    from ascend_spec.bench import bandwidth

    props = SimpleNamespace(name="NVIDIA H200", memory_clock_rate=3_201_000, memory_bus_width=6144)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    gbs, source = bandwidth._nominal(torch.device("cuda", 0))
    assert gbs == pytest.approx(2 * 3.201e9 * 768 / 1e9)  # 4917 GB/s; the H200 datasheet says 4.8 TB/s
    assert "NVIDIA H200" in source and "6144-bit" in source
    assert bandwidth._nominal(torch.device("cpu")) == (None, None)
    no_report = SimpleNamespace(name="x", memory_clock_rate=0, memory_bus_width=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: no_report)
    assert bandwidth._nominal(torch.device("cuda", 0)) == (None, None)


def test_plot_rows_with_a_nominal_peak(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from ascend_spec.bench.bandwidth import DeviceBandwidth
    from ascend_spec.bench.core import BenchRow
    from ascend_spec.bench.plot import plot_rows

    rows = [
        BenchRow("op_a", f"B={b}", "triton", "loop", 0.01 * b, 0.5 * b, {"bytes_moved": 4e7 * b})
        for b in (1, 4)
    ] + [BenchRow("op_b", "B=8", "triton", "host", 0.02, 0.01, {"host_syncs": 0})]
    peak = DeviceBandwidth(
        "cuda:0", 3900.0, 4917.0, "NVIDIA H200: 3201000 kHz memory clock x 6144-bit bus, DDR"
    )
    path = tmp_path / "chart.png"
    plot_rows(rows, path, device=torch.device("cuda", 0), bandwidth=peak)
    with Image.open(path) as image:
        image.verify()
    assert path.stat().st_size > 20_000
