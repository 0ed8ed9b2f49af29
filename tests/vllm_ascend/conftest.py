"""vllm-ascend 0.30.0rc2's real runner on the emulated NPU (emulated_npu/). The op tests run anywhere torch does;
the engine tests need ``.venv-vllm-ascend`` (scripts/setup_vllm_ascend_env.sh), where vllm-ascend is installed and a
``.pth`` file loads the emulation into every process started with ``ASCEND_SPEC_EMULATED_NPU=1``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EMULATED = {"ASCEND_SPEC_EMULATED_NPU": "1", "OMP_NUM_THREADS": "1"}
# Plain vLLM CPU in the same venv: vllm-ascend's platform plugin left out, the emulation off.
PLAIN_CPU = {"ASCEND_SPEC_EMULATED_NPU": "0", "VLLM_PLUGINS": "ascend_spec", "OMP_NUM_THREADS": "1"}


def vllm_ascend_installed() -> bool:
    return importlib.util.find_spec("vllm_ascend") is not None


needs_vllm_ascend = pytest.mark.skipif(
    not vllm_ascend_installed(),
    reason="needs vllm-ascend 0.30.0rc2 on the emulated NPU (.venv-vllm-ascend, scripts/setup_vllm_ascend_env.sh)",
)


@pytest.fixture(scope="session")
def ascend_engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ascend_engines")
