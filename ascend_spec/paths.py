"""Where the package's non-Python parts live: the kernel sources (``csrc/``) and the shipped configs.

The AscendC host model compiles ``csrc/`` at run time and the controller reads ``configs/``. A wheel carries both
inside the package (``ascend_spec/csrc``, ``ascend_spec/configs``: setup.py's build_py copies them there); a source
tree or an editable install (``pip install -e .``) reads them next to the package, at the repository root.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PACKAGE_DIR.parent / name


CSRC_DIR = _data_dir("csrc")
CONFIGS_DIR = _data_dir("configs")

#: Where compiled kernel libraries are cached (host model, native CPU kernels): ``$ASCEND_SPEC_CACHE_DIR`` or
#: ``~/.cache/ascend_spec``.
CACHE_ENV = "ASCEND_SPEC_CACHE_DIR"


def cache_dir(name: str) -> Path:
    """``<cache root>/<name>``, created if missing."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "ascend_spec")
    path = Path(root) / name
    path.mkdir(parents=True, exist_ok=True)
    return path
