"""vllm-ascend 0.30.0rc2's real runner on the emulated NPU (emulated_npu/). The op tests run anywhere torch does;
the engine tests need ``.venv-vllm-ascend`` (scripts/setup_vllm_ascend_env.sh), where vllm-ascend is installed and a
``.pth`` file loads the emulation into every process started with ``ASCEND_SPEC_EMULATED_NPU=1``
(ascend_engine_env.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def ascend_engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ascend_engines")
