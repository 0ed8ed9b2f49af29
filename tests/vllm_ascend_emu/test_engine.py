"""vllm-ascend 0.30.0rc2's own ``NPUModelRunner`` decoding on the emulated NPU, against plain vLLM CPU decoding of
the same checkpoint (the oracle): greedy plain decoding, then vllm-ascend's DFlash proposer with K=3, whose
greedy tokens must equal plain decoding's (speculative decoding is lossless). ascend-spec is installed and its
plugin loaded, but not enabled (no ``additional_config``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ascend_engine_env import EMULATED, PLAIN_CPU, needs_vllm_ascend, run_engine

from ascend_spec.e2e.engine import EngineRun, EngineSpec
from ascend_spec.e2e.tiny_models import CONSTANT_TOKEN, TinyModels, make_tiny_models

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

NPU_RUNNER = "vllm_ascend.worker.model_runner_v1.NPUModelRunner"
PROMPTS = [[1, 5, 9, 20, 33], [7, 8, 2, 4], [3, 14, 15, 92, 65, 35, 89, 79, 32]]  # ragged lengths
MAX_TOKENS = [24, 17, 20]


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("ascend_models"), hybrid=False, low_entropy=True)


def _run(work: Path, spec: EngineSpec, env: dict[str, str]) -> EngineRun:
    return run_engine(work, spec, PROMPTS, MAX_TOKENS, env)


@pytest.fixture(scope="module")
def plain_cpu(ascend_engine_dir: Path, dense: TinyModels) -> EngineRun:
    run = _run(ascend_engine_dir, EngineSpec(target=dense.target), PLAIN_CPU)
    assert run.runner_class != NPU_RUNNER and "vllm_ascend" not in run.runner_class, run.runner_class
    return run


def test_npu_model_runner_greedy_equals_plain_cpu(
    ascend_engine_dir: Path, dense: TinyModels, plain_cpu: EngineRun
) -> None:
    run = _run(ascend_engine_dir, EngineSpec(target=dense.target), EMULATED)
    assert run.runner_class == NPU_RUNNER
    assert run.tokens == plain_cpu.tokens
    assert run.num_drafts == 0


def test_npu_model_runner_dflash_k3_equals_plain_cpu(
    ascend_engine_dir: Path, dense: TinyModels, plain_cpu: EngineRun
) -> None:
    speculative = {"method": "dflash", "model": str(dense.dflash), "num_speculative_tokens": 3}
    run = _run(ascend_engine_dir, EngineSpec(target=dense.target, speculative=speculative), EMULATED)
    assert run.runner_class == NPU_RUNNER
    assert run.tokens == plain_cpu.tokens
    assert run.num_drafts > 0 and run.num_draft_tokens == 3 * run.num_drafts
    # The random drafter agrees with this target on no draft here (vLLM 0.32's CPU DFlash neither: 0 of 174):
    # the drafts are checked by the constant model's test below.


def test_npu_model_runner_dflash_k3_accepts_a_perfect_drafter(
    ascend_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A target that always emits one token and a DFlash drafter that drafts it: every draft is accepted, so
    vllm-ascend's proposer, its input expansion and the verification run end to end on the emulated NPU."""
    models = make_tiny_models(tmp_path_factory.mktemp("ascend_constant"), hybrid=False, constant=True)
    speculative = {"method": "dflash", "model": str(models.dflash), "num_speculative_tokens": 3}
    run = _run(ascend_engine_dir, EngineSpec(target=models.target, speculative=speculative), EMULATED)
    assert run.runner_class == NPU_RUNNER
    assert run.tokens == [[CONSTANT_TOKEN] * n for n in MAX_TOKENS]
    assert run.num_draft_tokens > 0
    assert run.num_accepted == run.num_draft_tokens
