"""Where the repository's non-Python parts live (kernel sources, configs).

ascend-spec is installed editable (`pip install -e .`): the AscendC host model compiles `csrc/` at run time and
the controller reads `configs/`, so both are resolved relative to the source tree.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
CSRC_DIR = REPO_ROOT / "csrc"
CONFIGS_DIR = REPO_ROOT / "configs"
