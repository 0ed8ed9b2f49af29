"""vLLM plugin: ascend-spec's ops inside a V1 engine, switched on by ``additional_config["ascend_spec"]``.

``register`` is the ``vllm.general_plugins`` entry point (pyproject). It runs in every vLLM process and only
wraps the model runner's constructor; everything else happens for an engine whose ``additional_config`` has the
``"ascend_spec"`` key (see :mod:`ascend_spec.vllm.patch_register` for the register of patch points and docs/vllm.md).
"""

from __future__ import annotations

from ascend_spec.vllm.config import AscendSpecConfig, parse_config

__all__ = ["AscendSpecConfig", "parse_config", "register"]


def register() -> None:
    """Entry point: install the runner hook (idempotent; inert for engines that do not enable the plugin)."""
    from ascend_spec.vllm.patches import install

    install()
