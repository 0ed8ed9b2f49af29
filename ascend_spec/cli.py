"""The ``ascend-spec`` command: ``bench`` (operator microbenchmarks), ``plan`` (budget planning report) and ``e2e``
(plain vs speculative decoding in a vLLM engine)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="operator microbenchmarks, each against a baseline in the same run")
    p.add_argument("--device", default=None, help="cpu, cuda or npu (default: best available)")
    p.add_argument("--case", action="append", default=None, help="run only this case module (repeatable)")
    p.add_argument("--backend", default="auto", help="backend for the ops under test (default: auto)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="small shapes and few repeats (smoke test)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from ascend_spec.bench.core import BenchContext
    from ascend_spec.bench.runner import best_device, format_table, run_cases, write_json

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else best_device()
    repeats = 3 if args.quick else args.repeats
    warmup = 1 if args.quick else args.warmup
    ctx = BenchContext(device=device, warmup=warmup, repeats=repeats, quick=args.quick, backend=args.backend)
    rows = run_cases(ctx, args.case)
    print(f"ascend-spec bench on {device} (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(format_table(rows))
    if args.json:
        write_json(rows, ctx, args.json)
        print(f"wrote {args.json}")
    return 0


def _add_plan(sub: argparse._SubParsersAction) -> None:
    from ascend_spec.graph import plan_report

    p = sub.add_parser("plan", help="expected tokens/s: plain decoding, fixed K, and the dynamic controller")
    plan_report.add_arguments(p)
    p.set_defaults(func=plan_report.run)


def _add_e2e(sub: argparse._SubParsersAction) -> None:
    from ascend_spec.e2e import cli as e2e_cli

    p = sub.add_parser("e2e", help="plain vs upstream vs plugin speculative decoding in a vLLM engine")
    e2e_cli.add_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascend-spec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_bench(sub)
    _add_plan(sub)
    _add_e2e(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
