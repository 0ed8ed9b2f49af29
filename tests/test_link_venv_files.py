"""scripts/link_venv_files.py: the engine matrix's environments share equal files with .venv by hard links.

Two small trees stand in for environments; what is linked, and what is left its own copy, is read back from inode
numbers and contents.
"""

from __future__ import annotations

import importlib.util
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
