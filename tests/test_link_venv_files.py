"""scripts/link_venv_files.py: the engine matrix's environments share equal files with .venv by hard links.

Two small trees stand in for environments; what is linked, and what is left its own copy, is read back from inode
numbers and contents.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "link_venv_files.py"


@pytest.fixture(scope="module")
def link_shared_files():  # noqa: ANN201 - the script's function
    spec = importlib.util.spec_from_file_location("link_venv_files", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.link_shared_files


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_links_equal_files_and_leaves_the_rest(tmp_path: Path, link_shared_files) -> None:  # noqa: ANN001
    source, target = tmp_path / "src", tmp_path / "dst"
    _write(
        source,
        {
            "lib/torch/a.so": b"x" * 4096,
            "lib/torch/b.py": b"same size 1",
            "lib/vllm/c.py": b"0.32",
            "bin/python": b"#!/src\n",
        },
    )
    _write(
        target,
        {
            "lib/torch/a.so": b"x" * 4096,  # equal: linked
            "lib/torch/b.py": b"same size 2",  # same size, other bytes: kept
            "lib/vllm/c.py": b"0.30.0",  # other size: kept
            "bin/python": b"#!/dst\n",  # other bytes: kept
            "lib/only_here.py": b"mine",  # no twin: kept
        },
    )
    linked, freed = link_shared_files(source, target)
    assert (linked, freed) == (1, 4096)
    assert (target / "lib/torch/a.so").stat().st_ino == (source / "lib/torch/a.so").stat().st_ino
    for rel, data in {
        "lib/torch/b.py": b"same size 2",
        "lib/vllm/c.py": b"0.30.0",
        "bin/python": b"#!/dst\n",
        "lib/only_here.py": b"mine",
    }.items():
        assert (target / rel).read_bytes() == data
        twin = source / rel
        assert not twin.exists() or twin.stat().st_ino != (target / rel).stat().st_ino
    assert not list(target.rglob(".*.link"))
    # A second pass finds nothing left to link.
    assert link_shared_files(source, target) == (0, 0)


def test_refuses_a_missing_directory(tmp_path: Path, link_shared_files) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="target: .* is not a directory"):
        link_shared_files(tmp_path, tmp_path / "absent")


def _import_log(site: Path, module: str) -> str:
    """Python's own verbose account of importing ``module`` from ``site`` (which compiled file it used, if any)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-v", "-c", f"import {module}"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_links_the_compiled_file_of_a_linked_module(tmp_path: Path, link_shared_files) -> None:  # noqa: ANN001
    """The same module installed twice compiles to different bytes (each records its own source's modification
    time); once its source is linked, the environment's compiled file is the source environment's, which Python
    accepts, where the environment's own would be stale. A module whose source differs keeps its compiled file."""
    source, target = tmp_path / "src", tmp_path / "dst"
    _write(source, {"lib/pkg/__init__.py": b"", "lib/pkg/mod.py": b"X = 1\n", "lib/pkg/other.py": b"Y = 2\n"})
    _write(target, {"lib/pkg/__init__.py": b"", "lib/pkg/mod.py": b"X = 1\n", "lib/pkg/other.py": b"Y = 3\n"})
    for root, mtime in ((source, 1_000_000_000), (target, 1_500_000_000)):
        for py in sorted((root / "lib/pkg").glob("*.py")):
            os.utime(py, (mtime, mtime))
            py_compile.compile(
                str(py), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
            )
    compiled = {
        root: {p.name: p for p in (root / "lib/pkg/__pycache__").iterdir()} for root in (source, target)
    }
    tag = importlib.util.cache_from_source("mod.py")
    mod_pyc = Path(tag).name
    other_pyc = mod_pyc.replace("mod.", "other.", 1)
    other_before = compiled[target][other_pyc].read_bytes()
    assert compiled[source][mod_pyc].read_bytes() != compiled[target][mod_pyc].read_bytes()

    linked, _freed = link_shared_files(source, target)

    assert linked == 4  # __init__.py and mod.py, then their compiled files
    for rel in ("lib/pkg/mod.py", f"lib/pkg/__pycache__/{mod_pyc}"):
        assert (target / rel).stat().st_ino == (source / rel).stat().st_ino, rel
    kept = target / f"lib/pkg/__pycache__/{other_pyc}"
    assert kept.stat().st_ino != (source / f"lib/pkg/__pycache__/{other_pyc}").stat().st_ino
    assert kept.read_bytes() == other_before
    log = _import_log(target / "lib", "pkg.mod")
    assert "bytecode is stale" not in log, log
    assert f"code object from '{target / 'lib/pkg/__pycache__' / mod_pyc}'" in log, log
    assert link_shared_files(source, target) == (0, 0)


def test_a_module_linked_without_its_compiled_file_is_stale(tmp_path: Path) -> None:
    """Why the compiled files are linked: the same source linked alone leaves the environment's own compiled file,
    which Python rejects (and recompiles the module in every process)."""
    source, target = tmp_path / "src", tmp_path / "dst"
    _write(source, {"lib/mod.py": b"X = 1\n"})
    _write(target, {"lib/mod.py": b"X = 1\n"})
    os.utime(source / "lib/mod.py", (1_000_000_000, 1_000_000_000))
    py_compile.compile(str(target / "lib/mod.py"), doraise=True)
    os.replace(source / "lib/mod.py", target / "lib/mod.py")  # the source's file (its mtime) in the target
    log = _import_log(target / "lib", "mod")
    assert "# bytecode is stale for 'mod'" in log, log
