"""vllm-ascend 0.30.0rc2's real runner on the emulated NPU (emulated_npu/). The op tests run anywhere torch does;
the engine tests need ``.venv-vllm-ascend`` (scripts/setup_vllm_ascend_env.sh), where vllm-ascend is installed and a
``.pth`` file loads the emulation into every process started with ``ASCEND_SPEC_EMULATED_NPU=1``
(ascend_engine_env.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_spec.e2e import fork_server


@pytest.fixture(scope="session")
def ascend_engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ascend_engines")


@pytest.fixture(scope="session", autouse=True)
def forked_engines():  # noqa: ANN201
    """Engines forked from fork servers that imported torch and vLLM once (ascend_spec.e2e.fork_server), as in
    tests/vllm: measured on the emulated NPU's V2 mode, one MTP engine took 94 s forked against 136 s started."""
    fork_server.enable()
    yield
    fork_server.enable(False)
