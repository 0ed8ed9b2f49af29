"""Prefix caching (mamba_cache_mode 'align') with ragged GDN verification on Model Runner V1 and V2 (the CPU
harness), against plain decoding (V1) with prefix caching on: its tokens and the GDN states it cached
(prefix_cache_check.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import speculative
from hypothesis import given, settings
from hypothesis import strategies as st
from prefix_cache_check import (
    BLOCK,
    TWO_REQUESTS,
    assert_matches_plain_with_prefix_caching,
    plain_rounds,
    prefix_spec,
    requests_of,
    run_probe,
)

pytestmark = pytest.mark.slow

PLUGIN = {"gdn_verify": True}


@pytest.fixture(scope="module")
def plain_prefix_cached(engine_dir: Path, hybrid_low_entropy) -> dict:  # noqa: ANN001
    """Plain decoding with prefix caching: a first round, then prompts extending its prompts and outputs."""
    spec = prefix_spec(hybrid_low_entropy)
    return run_probe(engine_dir / "prefix_plain", spec, plain_rounds(), logprobs=True)


@pytest.mark.parametrize(
    "method,async_scheduling,runner",
    [
        pytest.param("ngram", False, "v1", marks=pytest.mark.matrix, id="ngram-sync"),
        pytest.param("mtp", True, "v1", marks=pytest.mark.matrix, id="mtp-async"),
        pytest.param("ngram", False, "v2", id="v2-ngram-sync"),
        pytest.param("mtp", True, "v2", id="v2-mtp-async"),
    ],
)
def test_gdn_verification_with_prefix_caching_matches_plain(
    engine_dir: Path,
    hybrid_low_entropy,  # noqa: ANN001
    plain_prefix_cached: dict,
    method: str,
    async_scheduling: bool,
    runner: str,
) -> None:
    """Both rounds and the cached GDN states equal plain decoding with prefix caching; the second round reuses
    the blocks vLLM's scheduler kept, whose states the plugin wrote while the first round decoded."""
    # MTP's drafts carry no inside-draft check: two of the four requests (V2's decode under Triton's interpreter)
    plain = plain_prefix_cached if method == "ngram" else requests_of(plain_prefix_cached, TWO_REQUESTS)
    spec = prefix_spec(
        hybrid_low_entropy,
        speculative=speculative(method, hybrid_low_entropy),
        plugin=PLUGIN,
        async_scheduling=async_scheduling,
        runner=runner,
    )
    rounds = [{"prompts": r["prompts"]} for r in plain["rounds"]]
    ours = run_probe(engine_dir / f"prefix_{runner}-{method}", spec, rounds)
    # V1: vllm.v1.worker.cpu_model_runner; V2: vllm.v1.worker.cpu.model_runner (V2's CPU runner)
    assert (".cpu.model_runner" in ours["runner_module"]) == (runner == "v2"), ours["runner_module"]
    # MTP's drafts meet a boundary inside an accepted draft or not by the CPU's bf16 arithmetic (accepted on CI's
    # Intel Xeon; none on an AMD EPYC without AVX-512): ngram's do on both, and carry the inside-draft checks.
    assert_matches_plain_with_prefix_caching(plain, ours, inside_draft=method == "ngram")
    if method == "ngram":  # accepted drafts: boundaries inside them, tokens accepted past them
        assert BLOCK in ours["rounds"][1]["cached"]
        assert ours["align"]["inside_draft"] > 0 and ours["align"]["partial_commits"] > 0


@settings(max_examples=50, deadline=None)
@given(data=st.data(), count=st.integers(1, 6))
def test_requests_of_keeps_each_kept_requests_rounds_and_states(data: st.DataObject, count: int) -> None:
    """requests_of against a per-request reading of the same result: every round's entries and the GDN states of
    exactly the kept requests, in the order asked."""
    prompts = [[100 * r + t for t in range(10)] for r in range(count)]
    keys = [",".join(map(str, p[:8])) for p in prompts]
    result = {
        "block_size": BLOCK,
        "rounds": [
            {
                "prompts": prompts,
                "tokens": [[r] * 3 for r in range(count)],
                "cached": [0] * count,
                "top2": [],
            },
            {
                "prompts": [p + [1] for p in prompts],
                "tokens": [[r] for r in range(count)],
                "cached": [BLOCK] * count,
            },
        ],
        "hits": {key: [r] for r, key in enumerate(keys)},
        "boundaries": {key: {"states": [r]} for r, key in enumerate(keys)},
    }
    kept = data.draw(st.lists(st.integers(0, count - 1), min_size=1, unique=True))
    out = requests_of(result, kept)
    for round_in, round_out in zip(result["rounds"], out["rounds"], strict=True):
        for name, values in round_in.items():
            assert round_out[name] == ([values[r] for r in kept] if values else values)
    assert out["hits"] == {keys[r]: [r] for r in kept}
    assert out["boundaries"] == {keys[r]: {"states": [r]} for r in kept}
    assert out["block_size"] == BLOCK and result["rounds"][0]["prompts"] == prompts  # the input is left alone
    with pytest.raises(ValueError, match="indices"):
        requests_of(result, kept + kept[:1])
