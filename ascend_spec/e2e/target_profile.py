"""``ascend-spec e2e --print-profile``: the target's step cost by tokens, measured as dynamic verification does.

One engine (DFlash at K = ``--num-spec``, ``max_num_seqs`` = the largest of ``--batch-sizes``, dynamic
verification with ``"profile": "measure"``) starts, which times the target's dummy forward at every bucket up
to B x (K + 1) tokens (:mod:`ascend_spec.vllm.cost_profiles`), decodes a few tokens and stops; the profile is
read from its dynamic counters. The table says how much of a step is fixed: V(n) against V(1), and at each
batch size B what verifying B x (K + 1) tokens costs against B (the regime docs/vllm.md describes).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ascend_spec.cli_args import CommandError
from ascend_spec.e2e.engine import EngineSpec, run_isolated


def profile_lines(costs: dict[str, float], batches: list[int], k: int) -> list[str]:
    """The profile (tokens:ms) and, per batch size, V(B x (K + 1)) / V(B) (read at the buckets they pad to)."""
    points = sorted((int(n), ms) for n, ms in costs.items())

    def at(n: int) -> float:
        return next((ms for size, ms in points if size >= n), points[-1][1])

    lines = ["tokens | ms per target forward | vs 1 token"]
    lines += [f"{n:>6} | {ms:>21.2f} | {ms / points[0][1]:.2f}" for n, ms in points]
    for b in batches:
        lines.append(
            f"B={b}: V({b})={at(b):.2f} ms, V({b * (k + 1)})={at(b * (k + 1)):.2f} ms: verifying K={k} drafts "
            f"per request costs {at(b * (k + 1)) / at(b):.2f}x a plain step"
        )
    return lines


def print_target_profile(args: argparse.Namespace, target: Path, drafter: Path | None, hybrid: bool) -> int:
    if drafter is None:
        raise CommandError(
            "--print-profile measures through a DFlash engine: --drafter is required with --target"
        )
    batches = sorted({int(b) for b in str(args.batch_sizes).split(",")})
    if not batches or batches[0] < 1:
        raise CommandError(
            f"--batch-sizes must be positive ints separated by commas; got {args.batch_sizes!r}"
        )
    k = args.num_spec
    spec = EngineSpec(
        target=target,
        speculative={"method": "dflash", "model": str(drafter), "num_speculative_tokens": k},
        plugin={"backend": args.backend, "dynamic": {"mode": "sync", "profile": "measure"}},
        hybrid=hybrid,
        max_num_seqs=batches[-1],
    )
    env = {"ASCEND_SPEC_CHECKS": "0"}
    if args.threads:
        env["OMP_NUM_THREADS"] = env["NUMBA_NUM_THREADS"] = str(args.threads)
    work = Path(tempfile.mkdtemp(prefix="ascend_spec_e2e_profile_"))
    run = run_isolated(spec, [[1, 2, 3, 4]], work_dir=work, max_tokens=4, env=env)
    costs = (run.dynamic or {}).get("target_costs")
    if run.error or not costs:
        raise CommandError(
            f"the profiling engine did not measure a profile: {run.error or 'no target_costs'}"
        )
    print(f"target {target}: cost profile measured at engine start (K={k}, max_num_seqs={batches[-1]})")
    print("\n".join(profile_lines(costs, batches, k)))
    return 0
