"""Hard-link the files one environment shares with another, so the engine matrix's environments cost one copy.

Each engine environment (.venv-vllm-RELEASE, .venv-vllm-ascend) holds the same torch and Triton builds and most of
the same packages as .venv: about 3.5 GB apiece. A file is linked only where the same path under the environment's
root holds the same bytes in both (size, then content); everything else stays its own copy. pip never writes an
installed file in place (it removes and writes anew), so a later install or uninstall in either environment
unlinks rather than changes the other's file.

    python scripts/link_venv_files.py SOURCE_VENV TARGET_VENV

Prints what it linked; exit status 0 (a file it cannot link is left as it was).
"""

from __future__ import annotations

import argparse
import filecmp
import os
from pathlib import Path


def link_shared_files(source: Path, target: Path) -> tuple[int, int]:
    """Replace each regular file of ``target`` whose twin under ``source`` has equal bytes by a hard link to it.
    Returns (files linked, bytes freed)."""
    if not source.is_dir():
        raise ValueError(f"source: {source} is not a directory")
    if not target.is_dir():
        raise ValueError(f"target: {target} is not a directory")
    linked = freed = 0
    for dirpath, _dirnames, filenames in os.walk(target):
        for name in filenames:
            path = Path(dirpath) / name
            twin = source / path.relative_to(target)
            if path.is_symlink() or twin.is_symlink() or not twin.is_file():
                continue
            mine, theirs = path.stat(), twin.stat()
            if mine.st_ino == theirs.st_ino or mine.st_size != theirs.st_size or mine.st_dev != theirs.st_dev:
                continue
            if not filecmp.cmp(path, twin, shallow=False):
                continue
            staged = path.with_name(f".{name}.link")
            try:
                os.link(twin, staged)
                os.replace(staged, path)
            except OSError:
                staged.unlink(missing_ok=True)
                continue
            linked += 1
            freed += mine.st_size
    return linked, freed


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
