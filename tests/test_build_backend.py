"""`pip install -e .` under build isolation: pure Python here, the extension's build tools where CANN is.

The isolated build environment holds only what the backend asks for. setup.py imports torch and torch_npu, and
CMake needs pybind11, only when it builds the AscendC extension; build_backend/ascend_spec_build.py asks for them
exactly then (tests/test_npu_build_rules.py checks what the extension links).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))

import ascend_spec_build  # noqa: E402


def test_pyproject_uses_the_in_tree_backend() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "ascend_spec_build"
    assert system["backend-path"] == ["build_backend"]
    assert not any(
        r.split("=")[0].split(">")[0] in ("torch", "torch-npu", "pybind11") for r in system["requires"]
    )


def test_no_cann_means_no_native_build_requirements(tmp_path: Path) -> None:
    assert ascend_spec_build.native_build_requires({}) == []
    assert ascend_spec_build.native_build_requires({"ASCEND_HOME_PATH": str(tmp_path / "absent")}) == []
    off = {"ASCEND_HOME_PATH": str(tmp_path), "COMPILE_CUSTOM_KERNELS": "0"}
    assert ascend_spec_build.native_build_requires(off) == []


def test_cann_brings_torch_torch_npu_pybind11_and_cmake(tmp_path: Path) -> None:
    reqs = ascend_spec_build.native_build_requires({"ASCEND_HOME_PATH": str(tmp_path)})
    assert reqs == ["torch==2.10.0", "torch-npu==2.10.0.post4", "pybind11", "cmake>=3.16"]
    pinned = {"ASCEND_HOME_PATH": str(tmp_path), "ASCEND_SPEC_BUILD_TORCH": "torch==2.13.0",
              "ASCEND_SPEC_BUILD_TORCH_NPU": "torch-npu==2.13.0"}  # fmt: skip
    assert ascend_spec_build.native_build_requires(pinned)[:2] == ["torch==2.13.0", "torch-npu==2.13.0"]


@pytest.mark.parametrize("hook", ["get_requires_for_build_wheel", "get_requires_for_build_editable"])
def test_hooks_add_the_native_requirements_only_with_cann(
    hook: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # setuptools' hooks run setup.py from the project root
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("COMPILE_CUSTOM_KERNELS", raising=False)
    plain = getattr(ascend_spec_build, hook)()
    assert not any(r.startswith(("torch", "pybind11")) for r in plain), plain
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    monkeypatch.setenv("SOC_VERSION", "ascend910b1")
    assert set(ascend_spec_build.native_build_requires()) <= set(getattr(ascend_spec_build, hook)())


def test_setup_py_imports_torch_only_when_building_the_extension() -> None:
    """A module-level torch / torch_npu import would break the pure-Python isolated build."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {a.name.split(".")[0] for n in top for a in n.names} | {
        n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module
    }
    assert not names & {"torch", "torch_npu", "pybind11"}, names
