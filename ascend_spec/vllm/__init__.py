"""vLLM plugin: ascend-spec's ops inside a vLLM engine, switched on by ``additional_config["ascend_spec"]``.

``register`` is the ``vllm.general_plugins`` entry point (pyproject). It runs in every vLLM process, never raises,
and installs a config gate plus, on a supported release, the runner hooks (:mod:`ascend_spec.vllm.install`);
everything else happens for an engine whose ``additional_config`` has the ``"ascend_spec"`` key.

Layout: what does not depend on an engine (settings :mod:`~ascend_spec.vllm.config`, the dynamic planner
:mod:`~ascend_spec.vllm.dynamic`, step costs, cost profiles, graph dispatch, the GDN layer and the GDN wiring the
runners share, :mod:`~ascend_spec.vllm.gdn_setup`) sits here; each runner's hooks in their own package
(:mod:`~ascend_spec.vllm.v1`: vLLM's Model Runner V1; :mod:`~ascend_spec.vllm.v2`: vLLM's Model Runner V2;
:mod:`~ascend_spec.vllm.ascend`: vllm-ascend's NPUModelRunner); the releases and their differences in
:mod:`~ascend_spec.vllm.releases`; the register of patch points in :mod:`~ascend_spec.vllm.patch_register`.
"""

from __future__ import annotations

from ascend_spec.vllm.config import AscendSpecConfig, parse_config

__all__ = ["AscendSpecConfig", "parse_config", "register"]


def register() -> None:
    """Entry point: install the plugin's gate and hooks (idempotent; never raises; inert without the key)."""
    try:
        from ascend_spec.vllm.install import install
    except Exception as exc:  # noqa: BLE001 - vLLM calls plugins unguarded: never stop its engines
        from ascend_spec.vllm.log import plugin_logger

        plugin_logger().warning(
            "ascend-spec could not be imported (%s: %s); it is not installed", type(exc).__name__, exc
        )
        return
    install()
