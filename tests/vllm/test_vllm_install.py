"""register() on any vLLM: never raises, installs the runner hooks only on a supported release, and a config that
enables the plugin where it cannot run is refused in one line (no engine needed; the engines' own proof of
inertness is in test_vllm_engine.py, run on every release of CI's matrix)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm", reason="register() patches vLLM's classes")

from vllm.config import VllmConfig  # noqa: E402
from vllm.v1.worker import gpu_model_runner  # noqa: E402

from ascend_spec.vllm import install as install_mod  # noqa: E402
from ascend_spec.vllm import releases  # noqa: E402
from ascend_spec.vllm.log import LOGGER_NAME  # noqa: E402


@pytest.fixture
def fresh_install(monkeypatch: pytest.MonkeyPatch):
    """install() as in a new process: its once-flags cleared, vLLM's classes restored afterwards."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from ascend_spec.vllm.v1 import dynamic_async

    saved = {
        (VllmConfig, "__post_init__"): VllmConfig.__post_init__,
        (VllmConfig, "_get_v1_model_runner_unsupported_features"): (
            VllmConfig._get_v1_model_runner_unsupported_features
        ),
        (gpu_model_runner.GPUModelRunner, "__init__"): gpu_model_runner.GPUModelRunner.__init__,
        (AsyncScheduler, "schedule"): AsyncScheduler.schedule,
        (AsyncScheduler, "update_from_output"): AsyncScheduler.update_from_output,
    }
    monkeypatch.setattr(install_mod, "_installed", False)
    monkeypatch.setattr(install_mod, "_install_error", None)
    monkeypatch.setattr(dynamic_async, "_scheduler_installed", False)
    yield
    for (owner, name), value in saved.items():
        setattr(owner, name, value)


def _unwrapped(fn):  # noqa: ANN001, ANN202
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def test_installed_release_is_supported_and_every_v1_target_exists() -> None:
    from ascend_spec.vllm.v1 import missing_v1_targets

    assert releases.v1_release() is not None, releases.installed_vllm_version()
    assert missing_v1_targets() == []


def test_supported_release_gets_the_gate_and_the_runner_hooks(fresh_install) -> None:
    runner_init = _unwrapped(gpu_model_runner.GPUModelRunner.__init__)
    install_mod.install()
    assert getattr(VllmConfig.__post_init__, "_ascend_spec_gate", False)
    assert gpu_model_runner.GPUModelRunner.__init__ is not runner_init
    assert _unwrapped(gpu_model_runner.GPUModelRunner.__init__) is runner_init
    wrapped = gpu_model_runner.GPUModelRunner.__init__
    install_mod.install()  # idempotent: one wrapper, not two
    assert gpu_model_runner.GPUModelRunner.__init__ is wrapped


def test_unsupported_release_gets_only_the_gate_and_refuses_in_one_line(
    fresh_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install_mod, "installed_vllm_version", lambda: "0.27.1")
    monkeypatch.setattr(releases, "installed_vllm_version", lambda: "0.27.1")
    runner_init = gpu_model_runner.GPUModelRunner.__init__
    v1_check = VllmConfig._get_v1_model_runner_unsupported_features
    install_mod.install()
    assert gpu_model_runner.GPUModelRunner.__init__ is runner_init
    assert VllmConfig._get_v1_model_runner_unsupported_features is v1_check
    VllmConfig(additional_config={})  # without the key: vLLM's own config, no error
    with pytest.raises(RuntimeError) as refused:
        VllmConfig(additional_config={"ascend_spec": {}})
    line = str(refused.value)
    assert "\n" not in line
    assert "does not support vLLM 0.27.1" in line
    for version in releases.V1_RELEASES:
        assert version in line
    assert releases.REFUSED_RELEASES["0.27.1"] in line  # the reason this release is refused


def test_unknown_release_is_refused_naming_the_supported_ones() -> None:
    line = releases.refusal("0.99.0")
    assert line.startswith(
        "additional_config['ascend_spec'] is set but ascend-spec does not support vLLM 0.99.0;"
    )
    assert "supported: vLLM " + ", ".join(releases.V1_RELEASES) in line
    with pytest.raises(RuntimeError, match="does not support vLLM 0.99.0"):
        releases.check_supported("0.99.0")
    assert releases.check_supported("0.32.0").version == "0.32.0"


def test_a_failing_install_is_logged_through_vllms_logger_and_never_raises(
    fresh_install, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ascend_spec.vllm import v1

    def broken(release) -> None:  # noqa: ANN001
        raise AttributeError("type object 'VllmConfig' has no attribute 'x'")

    monkeypatch.setattr(v1, "install_v1", broken)
    logging.getLogger("vllm").propagate = True  # vLLM's own handler does not reach caplog
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
            install_mod.install()  # must not raise
    finally:
        logging.getLogger("vllm").propagate = False
    assert [r.name for r in caplog.records] == [LOGGER_NAME]
    assert "could not install its hooks" in caplog.records[0].getMessage()
    VllmConfig(additional_config={})
    with pytest.raises(RuntimeError, match=r"could not install its hooks on this vLLM \(AttributeError"):
        VllmConfig(additional_config={"ascend_spec": {}})


def test_gate_names_a_bad_setting_before_vllm_builds_anything(fresh_install) -> None:
    install_mod.install()
    with pytest.raises(ValueError, match=r"unknown key additional_config\['ascend_spec'\]\['gdn_verfy'\]"):
        VllmConfig(additional_config={"ascend_spec": {"gdn_verfy": True}})


def test_gate_refuses_model_runner_v2() -> None:
    from types import SimpleNamespace

    with pytest.raises(RuntimeError, match="runs Model Runner V2.*VLLM_USE_V2_MODEL_RUNNER=0"):
        install_mod.check_runner(SimpleNamespace(use_v2_model_runner=True))
    install_mod.check_runner(SimpleNamespace(use_v2_model_runner=False))
