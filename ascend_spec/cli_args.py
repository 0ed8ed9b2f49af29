"""What every ``ascend-spec`` subcommand shares: the user-error exception and checked argument types.

A user error (a bad flag value, contradictory flags, an unreadable config, an output path that cannot be written)
raises :class:`CommandError`; :func:`ascend_spec.cli.main` prints it as one line,
``ascend-spec <command>: error: <message>``, and exits with status 2, never with a traceback. Output paths are
checked while the arguments are parsed, so a typo in a folder name fails before minutes of work, not after.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path


class CommandError(Exception):
    """A user error: reported as ``<prog>: error: <message>`` with exit status 2."""

    def __init__(self, message: str, *, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (a smaller one is refused, never clamped or ignored)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}; got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # argparse names the type in some messages
    return parse


def output_file(text: str) -> Path:
    """An argparse type: a file path whose folder exists and is writable (checked before any work)."""
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError("must be a file path; got ''")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file path")
    folder = path.parent
    if not folder.exists():
        raise argparse.ArgumentTypeError(f"folder {folder} does not exist (for {text})")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{folder} is not a folder (for {text})")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"folder {folder} is not writable (for {text})")
    return path


def check_distinct_outputs(**paths: Path | None) -> None:
    """Refuse two output flags naming one file (the second write would replace the first)."""
    seen: dict[Path, str] = {}
    for flag, path in paths.items():
        if path is None:
            continue
        key = path.resolve()
        if key in seen:
            raise CommandError(f"--{seen[key]} and --{flag} name the same file {path}; give two paths")
        seen[key] = flag


def check_plot_path(path: Path) -> None:
    """``--plot`` needs matplotlib and a file suffix it can write (else the chart would fail after the work)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise CommandError(
            "--plot needs matplotlib, which is not installed (pip install matplotlib, or pip install "
            "'ascend-spec[plot]')"
        )
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise CommandError(
            f"--plot {path}: the file name must end in an image format matplotlib writes "
            f"({', '.join('.' + f for f in sorted(formats))}); got {path.suffix or 'no suffix'!r}"
        )


@contextlib.contextmanager
def writing(flag: str, path: Path) -> Iterator[None]:
    """Report a failed write (disk full, folder removed meanwhile) as a user error naming the flag and file."""
    try:
        yield
    except OSError as e:
        raise CommandError(f"{flag} {path}: cannot be written ({e.strerror or e})") from None
