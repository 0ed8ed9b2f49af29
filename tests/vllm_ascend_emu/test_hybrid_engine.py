"""The Qwen3.5 hybrid (Gated DeltaNet + full attention) in vllm-ascend 0.30.0rc2's own ``NPUModelRunner`` on the
emulated NPU: its GDN layers run vllm-ascend's ``AscendGatedDeltaNetAttention`` (fla_npu conv and recurrence, the
FLA chunked prefill, gated RMSNorm; CPU versions in emulated_npu/gdn_ops.py).

The oracle is plain decoding of the same checkpoint by vLLM's CPU engine in the same venv: vllm-ascend alone must
give its tokens, and so must the plugin's ragged GDN verification with ngram drafts (0..K drafts per request and
step, steps without drafts), switched on as docs/vllm.md tells an Ascend user, on one state slot per request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ascend_engine_env import EMULATED, PLAIN_CPU, needs_vllm_ascend, run_engine

from ascend_spec.e2e.engine import EngineRun, EngineSpec
from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

NPU_RUNNER = "vllm_ascend.worker.model_runner_v1.NPUModelRunner"
PROMPTS = [[1, 5, 9, 20, 33], [7, 8, 2, 4], [3, 14, 15, 92, 65, 35, 89, 79, 32]]  # ragged lengths
MAX_TOKENS = [12, 10, 11]
K = 3
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
# docs/vllm.md's serve line: --additional-config '{"ascend_spec": {}}' (gdn_verify on by default), V1 runner.
USER_ENV = {**EMULATED, "VLLM_USE_V2_MODEL_RUNNER": "0", "ASCEND_SPEC_CHECKS": "0"}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("ascend_hybrid"), hybrid=True, low_entropy=True)


def _run(work: Path, spec: EngineSpec, env: dict[str, str]) -> EngineRun:
    return run_engine(work, spec, PROMPTS, MAX_TOKENS, env)


@pytest.fixture(scope="module")
def plain_cpu(ascend_engine_dir: Path, hybrid: TinyModels) -> EngineRun:
    run = _run(ascend_engine_dir, EngineSpec(target=hybrid.target, hybrid=True), PLAIN_CPU)
    assert "vllm_ascend" not in run.runner_class, run.runner_class
    return run


def _gdn_bytes_per_request(models: TinyModels) -> int:
    """One state slot (conv W - 1 rows, fp32 recurrent state) plus the plugin's records, over the GDN layers."""
    from transformers import AutoConfig

    from ascend_spec.gdn import conv_record_bytes_per_slot, record_bytes_per_slot

    cfg = AutoConfig.from_pretrained(models.target)
    layers = sum(t == "linear_attention" for t in cfg.layer_types)
    h, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, w = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
    channels = 2 * h * dk + hv * dv
    slot = channels * (w - 1) * 2 + hv * dk * dv * 4  # bf16 conv rows, fp32 recurrent state
    records = record_bytes_per_slot(K + 1, h, hv, dk, dv) + conv_record_bytes_per_slot(K + 1, channels)
    return layers * (slot + records)


def test_vllm_ascend_alone_decodes_the_hybrid_as_plain_cpu(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_cpu: EngineRun
) -> None:
    run = _run(ascend_engine_dir, EngineSpec(target=hybrid.target, hybrid=True), USER_ENV)
    assert run.runner_class == NPU_RUNNER
    assert run.tokens == plain_cpu.tokens
    assert run.gdn_slots_per_request == 1 and run.num_drafts == 0


def test_plugin_gdn_verify_ngram_is_lossless_on_one_state_slot(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_cpu: EngineRun
) -> None:
    spec = EngineSpec(target=hybrid.target, hybrid=True, speculative=NGRAM, plugin={})
    run = _run(ascend_engine_dir, spec, USER_ENV)
    assert run.runner_class == NPU_RUNNER
    assert run.tokens == plain_cpu.tokens
    assert run.num_accepted > 0
    assert run.mean_verify_length < 1 + K  # ragged: rows drafting fewer than K, steps without drafts
    assert run.gdn_slots_per_request == 1
    assert run.gdn_state_bytes_per_request == _gdn_bytes_per_request(hybrid)
