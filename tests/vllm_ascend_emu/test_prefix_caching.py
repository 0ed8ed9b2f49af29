"""Prefix caching (mamba_cache_mode 'align') with the plugin's GDN verification in vllm-ascend 0.30.0rc2's
``NPUModelRunner``, V1 (the emulated NPU) and V2 (its default runner, the emulated NPU's mode "v2"), against plain decoding with prefix caching by vLLM's CPU engine in the same
venv: tokens, and the GDN states the NPU runner's cache blocks hold (read through the plugin layer's views:
vllm-ascend keeps the recurrent state value-major and the conv state token-major). The check is the engine tests'
(tests/vllm/prefix_cache_check.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ascend_engine_env import EMULATED, EMULATED_V2, PLAIN_CPU, needs_vllm_ascend

from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models

sys.path.insert(0, str(Path(__file__).parents[1] / "vllm"))  # the engine tests' prefix-caching check
from prefix_cache_check import (  # noqa: E402
    BLOCK,
    TWO_REQUESTS,
    assert_matches_plain_with_prefix_caching,
    plain_rounds,
    prefix_spec,
    requests_of,
    run_probe,
)

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
# docs/vllm.md's serve line for vllm-ascend: V1 runner, '{"ascend_spec": {}}' (gdn_verify on by default)
USER_ENV = {**EMULATED, "VLLM_USE_V2_MODEL_RUNNER": "0", "ASCEND_SPEC_CHECKS": "0"}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("ascend_prefix"), hybrid=True, low_entropy=True)


@pytest.fixture(scope="module")
def plain(ascend_engine_dir: Path, hybrid: TinyModels) -> dict:
    """Plain decoding with prefix caching by vLLM's CPU engine in the same venv: the oracle."""
    return run_probe(
        ascend_engine_dir / "prefix_plain", prefix_spec(hybrid), plain_rounds(), logprobs=True, env=PLAIN_CPU
    )


def test_npu_runner_writes_cached_gdn_states_from_the_records(
    ascend_engine_dir: Path, hybrid: TinyModels, plain: dict
) -> None:
    spec = prefix_spec(hybrid, speculative=NGRAM, plugin={})
    rounds = [{"prompts": r["prompts"]} for r in plain["rounds"]]
    ours = run_probe(ascend_engine_dir / "prefix_npu_ngram", spec, rounds, env=USER_ENV)
    assert ours["runner_module"] == "vllm_ascend.worker.model_runner_v1", ours["runner_module"]
    assert "vllm_ascend" not in plain["runner_module"]
    assert_matches_plain_with_prefix_caching(plain, ours)
    assert BLOCK in ours["rounds"][1]["cached"]
    assert ours["align"]["inside_draft"] > 0 and ours["align"]["partial_commits"] > 0


def test_npu_v2_runner_writes_cached_gdn_states_from_the_records(
    ascend_engine_dir: Path, hybrid: TinyModels, plain: dict
) -> None:
    """vllm-ascend's default runner (vLLM 0.30.0's V2 hybrid state under AscendMambaHybridModelState) with MTP:
    the plugin's V2 moves replace its preprocess_state / postprocess_state; tokens of both rounds, the boundary
    states written while decoding and the cached states the second round starts from equal plain decoding's.
    MTP's drafts are not accepted across these requests' boundaries on the tiny hybrid (measured: 0 of 5
    boundary writes inside a draft, sync and async): that case's arithmetic (v2/gdn_align.py, shared with vLLM
    0.32.0's V2) is checked by tests/vllm/test_vllm_prefix_caching.py."""
    spec = prefix_spec(hybrid, speculative={"method": "mtp", "num_speculative_tokens": 3}, plugin={})
    # vLLM's start-up profile run batches max_num_batched_tokens (8192 by default here) through the interpreted
    # rope; a round of these two requests is under 600 tokens, so none is split at 1024
    spec.extra["max_num_batched_tokens"] = 1024
    oracle = requests_of(plain, TWO_REQUESTS)
    rounds = [{"prompts": r["prompts"]} for r in oracle["rounds"]]
    ours = run_probe(ascend_engine_dir / "prefix_npu_v2_mtp", spec, rounds, env=EMULATED_V2)
    assert ours["runner_module"] == "vllm_ascend.worker.v2.model_runner", ours["runner_module"]
    assert_matches_plain_with_prefix_caching(oracle, ours, inside_draft=False)
    assert BLOCK in ours["rounds"][1]["cached"]
    assert ours["align"]["boundary_writes"] >= len(TWO_REQUESTS)
