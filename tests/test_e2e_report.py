"""e2e's comparison with plain decoding: first divergence, bf16 tie rule, table and argument errors."""

from __future__ import annotations

import math

import pytest

from ascend_spec.e2e.engine import EngineRun
from ascend_spec.e2e.report import BF16_TIE_FLOOR, Divergence, Row, bf16_ulp, first_divergences, format_table


def test_bf16_ulp_is_the_spacing_of_bf16_numbers() -> None:
    import torch

    for x in (0.3, 1.0, 1.9, 3.0, 10.5, -12.25, 200.0):
        t = torch.tensor(abs(x), dtype=torch.bfloat16)
        ulp = bf16_ulp(x)
        # x + ulp is the next bf16 number above |x|'s binade start; x + ulp/4 rounds back to x
        assert float(t + torch.tensor(ulp, dtype=torch.bfloat16)) > float(t)
        assert float((t.float() + ulp / 4).to(torch.bfloat16)) == float(t)
        assert ulp == torch.finfo(torch.bfloat16).eps * 2.0 ** math.floor(math.log2(abs(x)))


def test_first_divergence_index_and_plain_margin() -> None:
    plain = EngineRun(
        tokens=[[1, 2, 3], [4, 5, 6]], top2=[[(9.0, 1.0)] * 3, [(9.0, 8.0), (2.0, 1.95), (1.0, 0.0)]]
    )
    other = EngineRun(tokens=[[1, 2, 3], [4, 7, 6]])
    divs = first_divergences(plain, other)
    assert divs[0] is None
    assert divs[1] == Divergence(1, pytest.approx(0.05), 2.0)
    assert divs[1].is_tie  # 0.05 is within the 0.125 floor
    assert not Divergence(1, 0.5, 2.0).is_tie
    assert Divergence(1, 0.25, 12.0).is_tie  # 4 ulps at 12 = 0.25
    assert not Divergence(1, 0.0, math.inf).is_tie  # no logits from plain decoding: never called a tie
    assert BF16_TIE_FLOOR == 0.125


def test_shorter_output_diverges_where_it_ends() -> None:
    plain = EngineRun(tokens=[[1, 2, 3]])
    assert first_divergences(plain, EngineRun(tokens=[[1, 2]])) == [Divergence(2, math.inf)]


def test_table_shows_failures_and_ratios() -> None:
    plain = EngineRun(tokens=[[1, 2]], seconds=1.0)
    ok = EngineRun(
        tokens=[[1, 2]],
        seconds=0.5,
        num_drafts=2,
        num_draft_tokens=4,
        num_accepted=2,
        accepted_per_position=[2, 0],
        gdn_state_bytes_per_request=10,
        gdn_slots_per_request=1,
    )
    bad = EngineRun(error="RuntimeError: boom")
    text = format_table(
        [Row("plain", "-", plain), Row("ascend-spec", "dflash", ok, [None]), Row("upstream", "ngram", bad)]
    )
    assert "2.00" in text and "10 (1)" in text and "failed" in text and "RuntimeError: boom" in text
    assert ok.mean_acceptance_length == 2.0 and ok.mean_verify_length == 3.0
    assert ok.acceptance_rate_per_position == [1.0, 0.0]


def test_bad_e2e_arguments_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from ascend_spec.cli import main

    assert main(["e2e", "--num-spec", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ascend-spec e2e: error: --num-spec must be >= 1; got 0"]


def test_plugin_row_shows_its_wall_and_cpu_ratio_to_upstream() -> None:
    up = EngineRun(tokens=[[1, 2, 3, 4]], seconds=2.0, cpu_seconds=1.0)  # 2 tok/s, 4 tok/CPU-s
    ours = EngineRun(tokens=[[1, 2, 3, 4]], seconds=1.0, cpu_seconds=2.0)  # 4 tok/s, 2 tok/CPU-s
    rows = [
        Row("upstream", "dflash", up),
        Row("ascend-spec", "dflash", ours),
        Row("ascend-spec", "mtp", ours),
    ]
    lines = format_table(rows).splitlines()
    assert "2.00/0.50" in lines[3]  # wall 4/2, CPU 2/4
    assert "2.00/0.50" not in lines[4] and " - " in lines[4]  # no upstream mtp row: no ratio
    assert ours.tokens_per_cpu_second == 2.0 and rows[1].as_dict(None)["cpu_seconds"] == 2.0


def test_mean_verify_length_on_v2_reads_the_device_split() -> None:
    """V2's counters hold the scheduler's K placeholders per request (here 3); with dynamic verification the
    verified drafts are the device split's histogram: two requests with none, two with 3 -> 1 + 6 / 4."""
    counters = {"num_drafts": 4, "num_draft_tokens": 12, "dynamic": {"lengths": {"0": 2, "3": 2}}}
    assert EngineRun(runner="v2", **counters).mean_verify_length == 2.5
    assert EngineRun(runner="v1", **counters).mean_verify_length == 4.0
    assert EngineRun(runner="v2", num_drafts=4, num_draft_tokens=12).mean_verify_length == 4.0
