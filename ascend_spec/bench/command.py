"""``ascend-spec bench``: flags, their checks (all before the first case runs) and the run itself.

Cases and backends are listed from their registries (:func:`ascend_spec.bench.runner.case_names`,
:data:`ascend_spec.backend.BACKENDS`), so ``--help`` and the checks follow any case that is added or renamed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os

import torch

from ascend_spec.backend import (
    BACKENDS,
    CHECKS_ENV,
    BackendUnavailableError,
    resolve_backend,
    value_checks_enabled,
)
from ascend_spec.cli_args import (
    CommandError,
    check_distinct_outputs,
    check_plot_path,
    int_at_least,
    output_file,
    writing,
)

QUICK_WARMUP, QUICK_REPEATS = 1, 3
DEFAULT_WARMUP, DEFAULT_REPEATS = 3, 10


def parse_device(text: str) -> torch.device:
    """An argparse type: ``cpu``, ``cuda[:i]`` or ``npu[:i]``, and only one that exists on this machine."""
    kind, colon, index = text.partition(":")
    if kind not in ("cpu", "cuda", "npu") or (colon and not index.isdigit()):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N, npu or npu:N; got {text!r}")
    if kind == "cpu":
        if index not in ("", "0"):
            raise argparse.ArgumentTypeError(f"the CPU is one device; got {text!r}")
        return torch.device("cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(
                f"{text}: CUDA is not available here (torch {torch.__version__})"
            )
        count = torch.cuda.device_count()
    else:
        if importlib.util.find_spec("torch_npu") is None:
            raise argparse.ArgumentTypeError(f"{text}: needs torch_npu, which is not installed")
        import torch_npu  # noqa: F401  (registers the npu device)

        if not torch.npu.is_available():  # type: ignore[attr-defined]
            raise argparse.ArgumentTypeError(f"{text}: torch_npu sees no NPU here")
        count = torch.npu.device_count()  # type: ignore[attr-defined]
    if index and int(index) >= count:
        raise argparse.ArgumentTypeError(f"{text}: this machine has {count} {kind} device(s)")
    return torch.device(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ascend_spec.bench.runner import case_names

    cases = case_names()
    p.add_argument(
        "--device",
        type=parse_device,
        default=None,
        help="cpu, cuda[:N] or npu[:N] (default: the best available)",
    )
    p.add_argument(
        "--case",
        action="append",
        default=None,
        choices=cases,
        metavar="CASE",
        help=f"run only this case (repeatable); cases: {', '.join(cases)}",
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=("auto", *BACKENDS),
        metavar="BACKEND",
        help=f"backend for the ops under test: auto (default; by device), {', '.join(BACKENDS)}",
    )
    p.add_argument(
        "--warmup",
        type=int_at_least(0),
        default=None,
        help=f"untimed calls before timing (default {DEFAULT_WARMUP}; {QUICK_WARMUP} with --quick)",
    )
    p.add_argument(
        "--repeats",
        type=int_at_least(1),
        default=None,
        help=f"timed calls; the median is reported (default {DEFAULT_REPEATS}; {QUICK_REPEATS} with --quick)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"small shapes, --warmup {QUICK_WARMUP} --repeats {QUICK_REPEATS} (smoke test)",
    )
    p.add_argument(
        "--json", type=output_file, default=None, metavar="PATH", help="also write the rows as JSON"
    )
    p.add_argument(
        "--plot",
        type=output_file,
        default=None,
        metavar="PNG",
        help="also draw speedup per op and case, and achieved bandwidth against the device's peak (needs matplotlib)",
    )
    p.add_argument(
        "--threads", type=int_at_least(1), default=None, help="torch CPU threads (default: torch's)"
    )


def _repeat_policy(args: argparse.Namespace) -> tuple[int, int]:
    if args.quick:
        given = [f"--{n}" for n in ("warmup", "repeats") if getattr(args, n) is not None]
        if given:
            raise CommandError(
                f"--quick sets --warmup {QUICK_WARMUP} --repeats {QUICK_REPEATS}; drop --quick or {' and '.join(given)}"
            )
        return QUICK_WARMUP, QUICK_REPEATS
    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    return warmup, repeats


def run(args: argparse.Namespace) -> int:
    from ascend_spec.bench.core import BenchContext
    from ascend_spec.bench.runner import best_device, format_table, run_cases, write_json

    warmup, repeats = _repeat_policy(args)
    check_distinct_outputs(json=args.json, plot=args.plot)
    if args.plot is not None:
        check_plot_path(args.plot)
    device = args.device if args.device is not None else best_device()
    try:
        resolve_backend(args.backend, device, op=f"--backend {args.backend}")
        value_checks_enabled(device)  # a bad ASCEND_SPEC_CHECKS is reported here, not inside a case
    except (BackendUnavailableError, ValueError) as e:
        raise CommandError(str(e)) from None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    # Time the ops as an engine runs them: the plugin turns the value checks (host reads) off in engine processes
    # unless ASCEND_SPEC_CHECKS is set, and so does the bench.
    os.environ.setdefault(CHECKS_ENV, "0")
    checks = "on" if value_checks_enabled(torch.device(device)) else "off"
    ctx = BenchContext(device=device, warmup=warmup, repeats=repeats, quick=args.quick, backend=args.backend)
    bandwidth = None
    if args.plot is not None:
        from ascend_spec.bench.bandwidth import device_bandwidth

        bandwidth = device_bandwidth(device)
    rows = run_cases(ctx, args.case)
    print(
        f"ascend-spec bench on {device} (torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"value checks {checks})"
    )
    print(format_table(rows))
    if args.json is not None:
        with writing("--json", args.json):
            write_json(rows, ctx, args.json, bandwidth=bandwidth)
        print(f"wrote {args.json}")
    if args.plot is not None:
        from ascend_spec.bench.plot import plot_rows

        with writing("--plot", args.plot):
            plot_rows(rows, args.plot, device=device, bandwidth=bandwidth)
        print(f"wrote {args.plot}")
    return 0
