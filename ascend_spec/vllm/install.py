"""What ``register()`` installs in a vLLM process: a config gate everywhere, the runner hooks where supported.

vLLM calls general plugins without a guard (``vllm/plugins/__init__.py``, ``load_general_plugins``): an exception
here stops every engine of the process, also those that never enable the plugin. So:

* the **config gate** (``VllmConfig.__post_init__``, present on every release from 0.23 on) is installed first,
  on any release: for a config without ``additional_config["ascend_spec"]`` it only calls vLLM's own code; with
  the key it checks the settings, then refuses in one line a release the plugin does not support, an engine
  whose runner (Model Runner V1 or V2) is not hooked on this release, or a process where installing the hooks
  failed;
* the **runner hooks** of each runner the installed release is listed for (:mod:`ascend_spec.vllm.releases`):
  V1's (:mod:`ascend_spec.vllm.v1`) and V2's (:mod:`ascend_spec.vllm.v2`), each only where its targets exist;
  a failure of V2's hooks refuses V2 engines only;
* the verify stats line (``dynamic.log_every``) in vLLM's engine-core scheduler, which every runner goes through
  (:mod:`ascend_spec.vllm.verify_log`), on every supported release;
* where vllm-ascend is installed, its ``AscendConfig`` (which forbids unknown ``additional_config`` keys) is made to
  leave the plugin's key alone (:mod:`ascend_spec.vllm.ascend.config_key`; without importing vllm-ascend);
* nothing escapes: a failure is logged through vLLM's logger (one warning line) and kept for the gate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ascend_spec.vllm.config import parse_config
from ascend_spec.vllm.log import plugin_logger
from ascend_spec.vllm.releases import (
    installed_vllm_version,
    refusal,
    runs_model_runner_v2,
    supported_line,
    v1_release,
    v2_release,
)

_installed = False
_install_error: str | None = None  # why the runner hooks could not be installed in this process
_v2_installed = False  # Model Runner V2's hooks are installed in this process
_v2_error: str | None = None  # why they could not be


def install() -> None:
    """Install once per process (vLLM loads plugins in every process, maybe twice); never raises."""
    global _installed, _install_error
    if _installed:
        return
    _installed = True
    version = "unknown"
    try:
        version = installed_vllm_version()
        _install_config_gate()
        _install_vllm_ascend_config_key()
        _install_verify_log(version)
        release = v1_release(version)
        if release is not None:
            from ascend_spec.vllm.v1 import install_v1

            install_v1(release)
        _install_v2(version)
    except Exception as exc:  # noqa: BLE001 - a plugin must not stop an engine that does not enable it
        _install_error = f"{type(exc).__name__}: {exc}"
        plugin_logger().warning(
            "ascend-spec could not install its hooks on vLLM %s (%s); engines without "
            "additional_config['ascend_spec'] are unaffected, engines with it are refused",
            version,
            _install_error,
        )


def _install_v2(version: str) -> None:
    """Model Runner V2's hooks on a release listed for V2; a failure refuses V2 engines only (logged once)."""
    global _v2_installed, _v2_error
    release = v2_release(version)
    if release is None:
        return
    try:
        from ascend_spec.vllm.v2 import install_v2

        install_v2(release)
        _v2_installed = True
    except Exception as exc:  # noqa: BLE001 - V1 engines (and engines without the key) must still start
        _v2_error = f"{type(exc).__name__}: {exc}"
        plugin_logger().warning(
            "ascend-spec could not install its Model Runner V2 hooks on vLLM %s (%s); V2 engines with "
            "additional_config['ascend_spec'] are refused",
            version,
            _v2_error,
        )


def _install_verify_log(version: str) -> None:
    """The verify stats line (:mod:`ascend_spec.vllm.verify_log`) on every supported release, in the engine-core
    scheduler every runner goes through; before V1's hooks, whose ``AsyncScheduler`` wrapper takes the method
    ``AsyncScheduler`` inherits from ``Scheduler``."""
    if v1_release(version) is None and v2_release(version) is None:
        return
    from ascend_spec.vllm.verify_log import install_verify_log

    install_verify_log()


def check_enabled_config(vllm_config) -> None:  # noqa: ANN001
    """For a config that enables the plugin: refuse, in one line, what the installed hooks cannot serve."""
    if _install_error is not None:
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set but ascend-spec could not install its hooks on this "
            f"vLLM ({_install_error}); remove the key"
        )
    version = installed_vllm_version()
    if v1_release(version) is None and v2_release(version) is None:
        raise RuntimeError(refusal(version))


def check_runner(vllm_config) -> None:  # noqa: ANN001
    """After vLLM's own checks (which pick the runner): the engine's runner must be one the plugin hooks here."""
    version = installed_vllm_version()
    if runs_model_runner_v2(vllm_config, version):
        why = None
        if not _v2_installed:
            why = (
                f"its hooks failed to install ({_v2_error})"
                if _v2_error is not None
                else f"ascend-spec does not hook it on vLLM {version}"
            )
        else:
            from ascend_spec.vllm.v2 import unhooked_v2_runner

            why = unhooked_v2_runner()
        if why is None:
            return
        fix = (
            "Remove the key"
            if v1_release(version) is None
            else "Set VLLM_USE_V2_MODEL_RUNNER=0 or remove the key"
        )
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set but this engine runs Model Runner V2 and {why}; "
            f"supported: {supported_line()}. {fix}"
        )
    if v1_release(version) is None:
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set but this engine runs Model Runner V1, which ascend-spec "
            f"does not hook on vLLM {version}; supported: {supported_line()}. Remove the key"
        )


def _install_vllm_ascend_config_key() -> None:
    from ascend_spec.vllm.ascend import vllm_ascend_importable

    if vllm_ascend_importable():
        from ascend_spec.vllm.ascend.config_key import install_config_key

        install_config_key()


def _install_config_gate() -> None:
    from vllm.config import VllmConfig

    VllmConfig.__post_init__ = _gated_post_init(VllmConfig.__post_init__)


def _gated_post_init(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def __post_init__(self, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        enabled = parse_config(getattr(self, "additional_config", None)) is not None
        if enabled:
            check_enabled_config(self)
        original(self, *args, **kwargs)
        if enabled:
            check_runner(self)

    __post_init__._ascend_spec_gate = True
    return __post_init__
