"""Environments of the engine tests in tests/vllm_ascend_emu: the emulated NPU, and plain vLLM CPU in the same venv."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from ascend_spec.e2e.engine import EngineRun, EngineSpec, run_isolated

# vllm-ascend's platform on the emulated NPU (the venv's .pth loads emulated_npu in every process).
EMULATED = {"ASCEND_SPEC_EMULATED_NPU": "1", "OMP_NUM_THREADS": "1"}
# The emulated NPU's second mode: Triton's interpreter on CPU tensors, for vllm-ascend's Model Runner V2.
EMULATED_V2 = {"ASCEND_SPEC_EMULATED_NPU": "v2", "OMP_NUM_THREADS": "1", "VLLM_USE_V2_MODEL_RUNNER": "1"}
# Plain vLLM CPU in the same venv: vllm-ascend's platform plugin left out, the emulation off.
PLAIN_CPU = {"ASCEND_SPEC_EMULATED_NPU": "0", "VLLM_PLUGINS": "ascend_spec", "OMP_NUM_THREADS": "1"}


def vllm_ascend_installed() -> bool:
    """By its distribution: ``find_spec("vllm_ascend")`` is fooled by any folder of that name on sys.path."""
    try:
        version("vllm-ascend")
    except PackageNotFoundError:
        return False
    return True


needs_vllm_ascend = pytest.mark.skipif(
    not vllm_ascend_installed(),
    reason="needs vllm-ascend 0.30.0rc2 on the emulated NPU (.venv-vllm-ascend, scripts/setup_vllm_ascend_env.sh)",
)


def run_engine(
    work: Path, spec: EngineSpec, prompts: list[list[int]], max_tokens: list[int], env: dict[str, str]
) -> EngineRun:
    """One engine in a fresh child process, which must finish and emit every requested token."""
    run = run_isolated(spec, prompts, work_dir=work, env=env, max_tokens=max_tokens, timeout=1200)
    assert run.error is None, run.error
    assert [len(t) for t in run.tokens] == max_tokens
    return run
