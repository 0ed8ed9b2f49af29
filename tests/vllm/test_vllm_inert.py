"""Installed next to any vLLM the plugin is inert, and enabling it where it cannot run is one line.

Run on every vLLM release of CI's matrix (marker ``inert``: 0.27.1, 0.30.0, 0.32.0; scripts/test.sh). The oracle
is the same engine build with every plugin switched off (``VLLM_PLUGINS`` naming none): an engine without the key
must give the same tokens, KV-cache layout, acceptance counts and errors as one where the package is absent.
"""

from __future__ import annotations

import pytest
from engine_helpers import run, speculative

from ascend_spec.vllm.releases import installed_vllm_version, refusal, v1_release

pytestmark = [pytest.mark.slow, pytest.mark.inert]

PLUGINS_OFF = {"VLLM_PLUGINS": "none-of-them"}


def _error_line(error: str | None) -> str | None:
    """An engine error's last line (the exception): process ids and tracebacks differ between runs."""
    return None if error is None else error.strip().splitlines()[-1]


def _same_engine(installed, absent) -> None:  # noqa: ANN001
    assert _error_line(installed.error) == _error_line(absent.error)
    assert installed.tokens == absent.tokens
    assert installed.kv_cache_layout == absent.kv_cache_layout
    assert installed.num_drafts == absent.num_drafts
    assert installed.num_accepted == absent.num_accepted


@pytest.mark.matrix
@pytest.mark.parametrize(
    ("models", "method"),
    [
        ("hybrid", None),
        ("dense_low_entropy", "dflash"),
        ("hybrid_low_entropy", "ngram"),
        ("hybrid_low_entropy", "mtp"),
    ],
)
def test_installed_but_not_enabled_is_vllm_without_the_package(engine_dir, request, models, method) -> None:
    target = request.getfixturevalue(models)
    spec = speculative(method, target) if method else None
    installed = run(engine_dir, target, speculative=spec, allow_error=True)
    absent = run(engine_dir, target, speculative=spec, env=PLUGINS_OFF, allow_error=True)
    _same_engine(installed, absent)
    if method is None:  # plain decoding runs on every release
        assert installed.error is None, installed.error
        assert all(len(t) > 0 for t in installed.tokens)


def test_enabling_the_plugin_on_this_release(engine_dir, hybrid) -> None:
    """Supported: a plain engine with the key decodes as without it. Unsupported: the engine is refused at
    config time with the one line naming the supported releases."""
    version = installed_vllm_version()
    enabled = run(engine_dir, hybrid, plugin={}, allow_error=True)
    if v1_release(version) is None:
        assert enabled.error is not None and refusal(version) in enabled.error
        return
    assert enabled.error is None, enabled.error
    assert enabled.tokens == run(engine_dir, hybrid).tokens
