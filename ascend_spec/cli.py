"""The ``ascend-spec`` command: ``bench`` (operator microbenchmarks), ``plan`` (budget planning report) and ``e2e``
(plain vs speculative decoding in a vLLM engine).

Every subcommand reports user errors the same way (:class:`ascend_spec.cli_args.CommandError`): one line
``ascend-spec <command>: error: <message>`` on stderr and exit status 2. Adding a subcommand takes an
``_add_<name>`` function that builds its parser and sets ``func``, and one entry in :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from ascend_spec.cli_args import CommandError

Subparsers = argparse._SubParsersAction


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are CommandErrors, so :func:`main` reports parse and run errors in one place."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(message, prog=self.prog)


def _add_bench(sub: Subparsers) -> None:
    from ascend_spec.bench import command

    about = "operator microbenchmarks, each against a baseline in the same run"
    p = sub.add_parser("bench", help=about, description=about)
    command.add_arguments(p)
    p.set_defaults(func=command.run)


def _add_plan(sub: Subparsers) -> None:
    from ascend_spec.graph import plan_report

    about = "expected tokens/s: plain decoding, fixed K, and the dynamic controller"
    p = sub.add_parser("plan", help=about, description=about)
    plan_report.add_arguments(p)
    p.set_defaults(func=plan_report.run)


def _add_e2e(sub: Subparsers) -> None:
    from ascend_spec.e2e import cli as e2e_cli

    p = sub.add_parser("e2e", help="plain vs upstream vs plugin speculative decoding in a vLLM engine")
    e2e_cli.add_arguments(p)


SUBCOMMANDS: tuple[Callable[[Subparsers], None], ...] = (_add_bench, _add_plan, _add_e2e)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ascend-spec", description="block-drafter speculative decoding: benchmarks and plans"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a user error prints one line and returns 2 (``--help`` exits 0 as usual)."""
    parser = build_parser()
    command: str | None = None
    try:
        args = parser.parse_args(argv)
        command = args.command
        return int(args.func(args) or 0)
    except CommandError as e:
        prog = e.prog or f"{parser.prog} {command}"
        message = " ".join(str(e).split())  # one line, whatever the message held
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
