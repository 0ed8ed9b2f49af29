"""Hard-link the files one environment shares with another, so the engine matrix's environments cost one copy.

Each engine environment (.venv-vllm-RELEASE, .venv-vllm-ascend) holds the same torch and Triton builds and most of
the same packages as .venv: about 3.5 GB apiece. A file is linked only where the same path under the environment's
root holds the same bytes in both (size, then content); everything else stays its own copy. pip never writes an
installed file in place (it removes and writes anew), so a later install or uninstall in either environment
unlinks rather than changes the other's file.

A module's compiled file records its source's modification time, so two installs of the same source never compile
to equal bytes: once a ``.py`` is linked, the environment's own ``__pycache__`` entry for it is stale (Python
recompiles that module in every process, and writes nothing back under PYTHONDONTWRITEBYTECODE). Where both
environments now hold the ``.py`` as one file, the compiled file is linked to the source environment's, which was
compiled from that very file.

    python scripts/link_venv_files.py SOURCE_VENV TARGET_VENV

Prints what it linked; exit status 0 (a file it cannot link is left as it was).
"""

from __future__ import annotations

import argparse
import filecmp
import os
from pathlib import Path


def link_shared_files(source: Path, target: Path) -> tuple[int, int]:
    """Replace each regular file of ``target`` whose twin under ``source`` has equal bytes by a hard link to it,
    then each compiled module whose source file the two now share (module docstring). Returns (files linked,
    bytes freed)."""
    if not source.is_dir():
        raise ValueError(f"source: {source} is not a directory")
    if not target.is_dir():
        raise ValueError(f"target: {target} is not a directory")
    linked = freed = 0
    for link_compiled in (False, True):
        for dirpath, _dirnames, filenames in os.walk(target):
            for name in filenames:
                path = Path(dirpath) / name
                if (path.suffix == ".pyc") != link_compiled:
                    continue
                twin = source / path.relative_to(target)
                if path.is_symlink() or twin.is_symlink() or not twin.is_file():
                    continue
                mine, theirs = path.stat(), twin.stat()
                if mine.st_ino == theirs.st_ino or mine.st_dev != theirs.st_dev:
                    continue
                same = _equal_bytes(path, twin) or (link_compiled and _shares_module_source(path, twin))
                if same and _link(twin, path):
                    linked += 1
                    freed += mine.st_size
    return linked, freed


def _equal_bytes(path: Path, twin: Path) -> bool:
    return path.stat().st_size == twin.stat().st_size and filecmp.cmp(path, twin, shallow=False)


def _shares_module_source(compiled: Path, twin: Path) -> bool:
    """``compiled`` is ``pkg/__pycache__/mod.TAG.pyc`` and ``pkg/mod.py`` is one file in both environments."""
    if compiled.parent.name != "__pycache__":
        return False
    module = compiled.name.split(".", 1)[0] + ".py"
    mine, theirs = compiled.parent.parent / module, twin.parent.parent / module
    return mine.is_file() and theirs.is_file() and mine.stat().st_ino == theirs.stat().st_ino


def _link(twin: Path, path: Path) -> bool:
    """Replace ``path`` by a hard link to ``twin`` in one rename (a reader never finds it missing)."""
    staged = path.with_name(f".{path.name}.link")
    try:
        os.link(twin, staged)
        os.replace(staged, path)
    except OSError:
        staged.unlink(missing_ok=True)
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args()
    linked, freed = link_shared_files(args.source, args.target)
    print(
        f"link_venv_files: {args.target} shares {linked} files ({freed / 2**30:.2f} GiB) with {args.source}"
    )


if __name__ == "__main__":
    main()
