"""PEP 517 backend: setuptools, plus what the AscendC extension build needs, only where it will be built.

``pip install -e .`` builds in an isolated environment that holds only ``[build-system] requires``. Where CANN is
present (``ASCEND_HOME_PATH``) and ``COMPILE_CUSTOM_KERNELS`` is not 0, setup.py imports torch and torch_npu and
CMake needs pybind11 and cmake, so they are requested for that build (as vllm-ascend lists them in its
build-system). Elsewhere (CPU / GPU machines, CI) the install stays pure Python: requesting torch there would pull
a multi-GB wheel into every build. The torch / torch-npu pins must match the runtime pair; they default to the
pair vllm-ascend builds with and can be set with ``ASCEND_SPEC_BUILD_TORCH`` / ``ASCEND_SPEC_BUILD_TORCH_NPU``
(or build with ``--no-build-isolation`` against the installed ones).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the other PEP 517 / 660 hooks, unchanged)

DEFAULT_TORCH = "torch==2.10.0"
DEFAULT_TORCH_NPU = "torch-npu==2.10.0.post4"
NATIVE_TOOLS = ["pybind11", "cmake>=3.16"]


def native_build_requires(environ: dict[str, str] | None = None) -> list[str]:
    """Extra build requirements: the extension's when CANN is here and the build is on, else none."""
    env = os.environ if environ is None else environ
    flag = env.get("COMPILE_CUSTOM_KERNELS", "1").strip().lower()
    home = env.get("ASCEND_HOME_PATH", "")
    if flag in ("0", "false", "off") or not home or not Path(home).is_dir():
        return []
    return [
        env.get("ASCEND_SPEC_BUILD_TORCH", DEFAULT_TORCH),
        env.get("ASCEND_SPEC_BUILD_TORCH_NPU", DEFAULT_TORCH_NPU),
        *NATIVE_TOOLS,
    ]


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + native_build_requires()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + native_build_requires()
