"""``ascend-spec e2e --sweep``: plain decoding, every fixed K and the dynamic controller, at several batch sizes.

Per batch size B (B concurrent requests, ``max_num_seqs = B``) every row is a fresh engine on the same prompts,
all of them resident at once and timed in interleaved rounds (:mod:`ascend_spec.e2e.interleaved`: round r times
one ``generate`` per engine in turn, each row keeps its best of ``--repeats`` rounds), so a busy stretch of a
shared machine slows every row alike instead of whichever engine ran in it:
plain decoding, the drafter (``--method``) with the plugin at each fixed K = 1..K_max, and with dynamic
verification (K_max drafted, the controller choosing per request). Columns: tokens/s (best of ``--repeats``) and its ratio to
plain decoding at that B, tokens per CPU-second of the engine process (best round) and its ratio, mean verify and acceptance lengths, the chosen totals per step (histogram
``T:steps``), the plugin's overhead per step (confidence + survival + controller + allocation, measured in the
engine) and host copies per step. ``--plot`` writes tokens/s against B per mode (matplotlib).

``--method`` (ngram, dflash, mtp, dspark; default dflash) picks the drafter of every speculative row; the
dynamic row's plugin config is the same for every method (``{"dynamic": {"mode": "sync", "profile": ...}}``),
so a method the engine cannot plan yet fails in that row with the engine's reason and the other rows still
run. ``--workload mixed`` (:mod:`ascend_spec.e2e.mixed`) runs requests of two classes on a target with a fixed
per-step cost; every row then also reports, per class, the mean verify length over every decode step of that
class's requests (vLLM's per-request spec-decode metrics), and the summary gives the dynamic and the best
fixed-K row's. Under the table: the target's cost profile the largest batch's dynamic engine measured.

``--requests-per-slot N`` submits N x B requests to every engine of batch size B (``max_num_seqs = B``): the
engine refills a slot as soon as a request finishes, as a server does, instead of the batch draining to its
slowest request (with requests that differ, a drained batch ends with only the slow class left, and no drafter
can shorten that tail).

``--replicas`` (default 3) starts every row's engine that many times, all resident in the same interleaved
rounds (replica 2 in reversed order: :func:`replica_order`): a row reports its fastest replica, and the spread
between a row's replicas (``1 - slowest / fastest``) is the run's own measure of noise. Identical engines differ
by more than their rounds do: on a shared 2-core VM four K = 3 engines in one run came out 0.88-1.03 of each other,
each steady over its rounds (a process's memory placement and core, not load that interleaving spreads). The
summary after the table gives, per B, dynamic against plain decoding and against the best fixed K, each with its
noise (the larger spread of the two rows compared), and whether dynamic is at least the best K and plain decoding
within it. "Below" then means every dynamic replica ran slower than every replica of the row compared; for
engines exactly as fast that happens at most ``1 / C(2n, n)`` of the time with n replicas each
(:func:`chance_below_if_equal`: 1/6 at two, 1/20 at three, 1/252 at five), which the summary prints.

``--threads`` (default 1) sets ``OMP_NUM_THREADS`` of every engine: vLLM 0.32's CPU worker keeps torch's
thread count of a speculative engine after binding its threads, and two OpenMP threads on a busy 2-core machine
made every kernel wait ~6 ms at a barrier (a 32-token DFlash run took 7.3 s with 2 threads, 0.15 s with 1), which
swamps every comparison; 0 leaves the environment alone. It sets ``NUMBA_NUM_THREADS`` as well: an ngram engine
(numba proposer) started with ``OMP_NUM_THREADS=1`` alone ran torch with 2 threads and numba with 2, and used
2.5x the CPU time of the same engine with both at 1 (9.0 against 3.5 CPU-seconds for one timed run).

``--pin-cpu N`` (or ``auto``: the last CPU this process may use, when it may use two or more; default ``none``)
pins every engine process to one logical CPU: the engines run one at a time, so none waits for another, and
every row runs on the same core. Measured on the 2-vCPU VM (perfect drafter, 2 replicas): replica spreads at
B = 1 and 4 fell from 5-6 % to about 3 %, but every row ran 15-25 % slower and used less CPU time than wall time
(vLLM's own threads of one engine then share its one CPU), so it is not the default.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ascend_spec.cli_args import CommandError
from ascend_spec.e2e.engine import EngineRun, EngineSpec
from ascend_spec.e2e.interleaved import run_interleaved
from ascend_spec.e2e.mixed import class_lengths


@dataclass
class SweepRow:
    batch: int
    mode: str  # "plain", "K=<k>", "dynamic"
    run: EngineRun  # the fastest replica (wall time)
    replica_tps: list[float] = field(default_factory=list)  # tokens/s of every replica that ran
    classes: list[str] = field(default_factory=list)  # the request class of every prompt (mixed workload)

    @property
    def class_lengths(self) -> dict[str, dict[str, float]]:
        """Mean verify length and tokens per decode step per request class (:func:`mixed.class_lengths`)."""
        return class_lengths(self.run.tokens, self.run.request_drafts, self.classes)

    @property
    def spread(self) -> float | None:
        """1 - slowest / fastest replica (None with fewer than two)."""
        if len(self.replica_tps) < 2 or max(self.replica_tps) <= 0:
            return None
        return 1.0 - min(self.replica_tps) / max(self.replica_tps)

    def as_dict(self, plain_tps: float | None, plain_cpu_tps: float | None = None) -> dict:
        r = self.run
        dyn = r.dynamic or {}
        by_class = self.class_lengths
        return {
            "batch": self.batch,
            "mode": self.mode,
            "error": r.error,
            "tokens_per_s": round(r.tokens_per_second, 2),
            "vs_plain": round(r.tokens_per_second / plain_tps, 3) if plain_tps and not r.error else None,
            "tokens_per_cpu_s": round(r.tokens_per_cpu_second, 2),
            "cpu_vs_plain": (
                round(r.tokens_per_cpu_second / plain_cpu_tps, 3) if plain_cpu_tps and not r.error else None
            ),
            "mean_verify_length": r.mean_verify_length,
            "mean_acceptance_length": r.mean_acceptance_length,
            "budget_histogram": dyn.get("totals"),
            "draft_length_histogram": dyn.get("lengths"),
            "overhead_ms_per_step": dyn.get("overhead_ms_per_step"),
            "host_copies_per_step": dyn.get("host_copies_per_step"),
            "profile_startup_s": dyn.get("profile_startup_s"),
            "replicas_tokens_per_s": [round(t, 2) for t in self.replica_tps],
            "replica_spread": None if self.spread is None else round(self.spread, 4),
            "class_verify_length": {c: round(v["verify"], 3) for c, v in by_class.items()} or None,
            "class_acceptance_length": {c: round(v["accept"], 3) for c, v in by_class.items()} or None,
            "target_costs": dyn.get("target_costs"),
            "draft_costs": dyn.get("draft_costs"),
        }


@dataclass
class BatchSummary:
    """One batch size's verdict: dynamic against plain decoding and the best fixed K, with the run's noise."""

    batch: int
    plain_tps: float
    best_k: str
    best_k_tps: float
    dynamic_tps: float
    noise_vs_plain: float | None  # the larger replica spread of the dynamic and the plain row
    noise_vs_best_k: float | None  # the larger replica spread of the dynamic and the best fixed-K row
    replicas: tuple[int, int, int] = (1, 1, 1)  # replicas that ran: dynamic, plain, best fixed K
    # mean verify length per request class of the dynamic and the best fixed-K row (mixed workload)
    dynamic_class_verify: dict[str, float] = field(default_factory=dict)
    best_k_class_verify: dict[str, float] = field(default_factory=dict)

    @property
    def vs_plain(self) -> float:
        return self.dynamic_tps / self.plain_tps

    @property
    def vs_best_k(self) -> float:
        return self.dynamic_tps / self.best_k_tps

    @property
    def meets(self) -> bool:
        """At least as fast as the best fixed K and as plain decoding, each within the spread its two rows'
        replicas showed in this run."""
        return self.vs_best_k >= 1.0 - (self.noise_vs_best_k or 0.0) and self.vs_plain >= 1.0 - (
            self.noise_vs_plain or 0.0
        )

    @property
    def chance_below_if_equal(self) -> float:
        """The most often this verdict reads "below" when dynamic runs exactly as fast as the rows it is compared
        with (:func:`chance_below_if_equal`, the worse of its two comparisons)."""
        dynamic, plain, best = self.replicas
        return max(chance_below_if_equal(dynamic, plain), chance_below_if_equal(dynamic, best))

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "replicas": {
                "dynamic": self.replicas[0],
                "plain": self.replicas[1],
                "best_fixed_k": self.replicas[2],
            },
            "chance_below_if_equal": round(self.chance_below_if_equal, 5),
            "plain_tokens_per_s": round(self.plain_tps, 2),
            "best_fixed_k": self.best_k,
            "best_fixed_k_tokens_per_s": round(self.best_k_tps, 2),
            "dynamic_tokens_per_s": round(self.dynamic_tps, 2),
            "dynamic_vs_plain": round(self.vs_plain, 4),
            "dynamic_vs_best_fixed_k": round(self.vs_best_k, 4),
            "noise_vs_plain": None if self.noise_vs_plain is None else round(self.noise_vs_plain, 4),
            "noise_vs_best_fixed_k": None if self.noise_vs_best_k is None else round(self.noise_vs_best_k, 4),
            "meets": self.meets,
            "dynamic_class_verify_length": {c: round(v, 3) for c, v in self.dynamic_class_verify.items()}
            or None,
            "best_fixed_k_class_verify_length": {c: round(v, 3) for c, v in self.best_k_class_verify.items()}
            or None,
        }


def summarize_sweep(rows: list[SweepRow]) -> list[BatchSummary]:
    """Per batch size with a plain, a fixed-K and a dynamic row that ran: the verdict (:class:`BatchSummary`)."""
    out = []
    for b in sorted({r.batch for r in rows}):
        ok = [r for r in rows if r.batch == b and not r.run.error]
        plain = [r for r in ok if r.mode == "plain"]
        fixed = [r for r in ok if r.mode.startswith("K=")]
        dynamic = [r for r in ok if r.mode == "dynamic"]
        if not (plain and fixed and dynamic):
            continue
        best = max(fixed, key=lambda r: r.run.tokens_per_second)
        out.append(
            BatchSummary(
                b,
                plain[0].run.tokens_per_second,
                best.mode,
                best.run.tokens_per_second,
                dynamic[0].run.tokens_per_second,
                _noise(dynamic[0], plain[0]),
                _noise(dynamic[0], best),
                (len(dynamic[0].replica_tps), len(plain[0].replica_tps), len(best.replica_tps)),
                {c: v["verify"] for c, v in dynamic[0].class_lengths.items()},
                {c: v["verify"] for c, v in best.class_lengths.items()},
            )
        )
    return out


def chance_below_if_equal(n_a: int, n_b: int) -> float:
    """At most how often a row of ``n_a`` replicas reads below a row of ``n_b`` when their engines are equal.

    "Below" needs ``fastest_a / fastest_b < 1 - noise`` with ``noise >= 1 - slowest_b / fastest_b``, hence
    ``fastest_a < slowest_b``: every replica of a slower than every replica of b. For exchangeable replicas
    (equal engines, same machine) that ordering has probability ``1 / C(n_a + n_b, n_a)``: 1/6 with two
    replicas each, 1/20 with three, 1/252 with five.
    """
    return 1.0 / math.comb(max(n_a, 1) + max(n_b, 1), max(n_a, 1))


def _noise(a: SweepRow, b: SweepRow) -> float | None:
    spreads = [s for s in (a.spread, b.spread) if s is not None]
    return max(spreads) if spreads else None


def _pct(x: float | None) -> str:
    return "unmeasured (one replica)" if x is None else f"{x:.1%}"


def _by_class(lengths: dict[str, float]) -> str:
    return ", ".join(f"{c} {v:.2f}" for c, v in lengths.items()) or "-"


def format_summary(summaries: list[BatchSummary]) -> str:
    lines = []
    for s in summaries:
        by_class = ""
        if s.dynamic_class_verify:
            by_class = (
                f"; verify length by class: dynamic {_by_class(s.dynamic_class_verify)}, "
                f"{s.best_k} {_by_class(s.best_k_class_verify)}"
            )
        lines.append(
            f"B={s.batch}: dynamic {s.dynamic_tps:.1f} tok/s = {s.vs_plain:.3f} x plain (noise "
            f"{_pct(s.noise_vs_plain)}), {s.vs_best_k:.3f} x best fixed {s.best_k} ({s.best_k_tps:.1f}; noise "
            f"{_pct(s.noise_vs_best_k)}): "
            + ("meets (>= best K and plain within noise)" if s.meets else "below")
            + by_class
        )
    if summaries:
        worst = max(summaries, key=lambda s: s.chance_below_if_equal)
        lines.append(
            f"(below = every dynamic replica slower than every replica compared; for engines exactly as fast, "
            f"at most {worst.chance_below_if_equal:.1%} per batch size with these replicas)"
        )
    return "\n".join(lines)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_sweep(rows: list[SweepRow]) -> str:
    header = [
        "B",
        "mode",
        "tok/s",
        "vs plain",
        "tok/CPU-s",
        "CPU vs plain",
        "verify len",
        "accept len",
        "overhead ms/step",
        "host copies/step",
        "replica spread",
        "verify len by class",
        "chosen T per step (T:steps)",
    ]
    lines = [header]
    plain = {r.batch: r.run.tokens_per_second for r in rows if r.mode == "plain" and not r.run.error}
    plain_cpu = {r.batch: r.run.tokens_per_cpu_second for r in rows if r.mode == "plain" and not r.run.error}
    for row in rows:
        r = row.run
        if r.error:
            lines.append([str(row.batch), row.mode, "failed"] + ["-"] * (len(header) - 4) + [r.error[:160]])
            continue
        dyn = r.dynamic or {}
        base = plain.get(row.batch)
        base_cpu = plain_cpu.get(row.batch)
        hist = " ".join(f"{t}:{n}" for t, n in (dyn.get("totals") or {}).items()) or "-"
        lines.append(
            [
                str(row.batch),
                row.mode,
                f"{r.tokens_per_second:.1f}",
                _fmt(r.tokens_per_second / base if base else None),
                f"{r.tokens_per_cpu_second:.1f}",
                _fmt(r.tokens_per_cpu_second / base_cpu if base_cpu else None),
                _fmt(r.mean_verify_length),
                _fmt(r.mean_acceptance_length),
                _fmt(dyn.get("overhead_ms_per_step"), 3),
                _fmt(dyn.get("host_copies_per_step")),
                "-" if row.spread is None else f"{row.spread:.1%}",
                _by_class({c: v["verify"] for c, v in row.class_lengths.items()}),
                hist,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = [" | ".join([c.ljust(w) for c, w in zip(line[:-1], widths)] + [line[-1]]) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 20)
    return "\n".join(out)


def plot_points(rows: list[SweepRow]) -> dict[str, list[tuple[int, float, float]]]:
    """Per mode, ``(batch, fastest, slowest replica's tokens/s)`` by batch size; rows that failed are left out."""
    modes: dict[str, list[tuple[int, float, float]]] = {}
    for row in rows:
        if not row.run.error:
            fastest = row.run.tokens_per_second
            slowest = min(row.replica_tps, default=fastest)
            modes.setdefault(row.mode, []).append((row.batch, fastest, slowest))
    for points in modes.values():
        points.sort()
    return modes


def plot_sweep(rows: list[SweepRow], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = plot_points(rows)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    batches = sorted({b for points in modes.values() for b, _, _ in points})
    gap = min((hi - lo for lo, hi in zip(batches, batches[1:])), default=1)
    for i, (mode, points) in enumerate(modes.items()):
        style = "-o" if mode in ("plain", "dynamic") else "--."
        (line,) = ax.plot([b for b, _, _ in points], [t for _, t, _ in points], style, label=mode)
        # The replicas' range under each point (the fastest is plotted), side by side: the run's noise.
        dodge = gap * 0.04 * (i - (len(modes) - 1) / 2)
        ax.vlines(
            [b + dodge for b, _, _ in points], [lo for _, _, lo in points], [t for _, t, _ in points],
            colors=line.get_color(), alpha=0.6, linewidth=2,
        )  # fmt: skip
    ax.set_xlabel("batch size (concurrent requests); bars: slowest to fastest replica")
    ax.set_ylabel("tokens/s (fastest replica)")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def replica_order(num_configs: int, replicas: int) -> list[int]:
    """The start (and per-round) order of the engines: config indices, replica r forward for even r and
    reversed for odd r, so with an even number of replicas every config sits at the same mean position
    (identical engines started later have run faster on the shared VM, which would favour the last config)."""
    forward = list(range(num_configs))
    return [i for r in range(replicas) for i in (forward if r % 2 == 0 else forward[::-1])]


def pinned_cpus(value: str | int) -> list[int] | None:
    """``--pin-cpu``: ``auto`` -> the last CPU this process may use when it may use two or more (else None),
    ``none`` -> None, an int -> that CPU (it must be one this process may use)."""
    allowed = sorted(os.sched_getaffinity(0))
    text = str(value).strip().lower()
    if text == "none":
        return None
    if text == "auto":
        return allowed[-1:] if len(allowed) >= 2 else None
    try:
        cpu = int(text)
    except ValueError:
        cpu = None
    if cpu is None or cpu not in allowed:
        raise CommandError(
            f"--pin-cpu must be 'auto', 'none' or one of this process's CPUs {allowed}; got {value!r}"
        )
    return [cpu]


@dataclass(frozen=True)
class SweepSetup:
    """What one sweep runs: the target, the method and its drafter, the workload."""

    target: Path
    hybrid: bool
    method: str = "dflash"  # ngram, dflash, mtp, dspark
    drafter: Path | None = None  # the DFlash/DSpark checkpoint (None for ngram and mtp)
    workload: str = "default"  # "default" (the built-in prompts) or "mixed" (ascend_spec.e2e.mixed)


def sweep_prompts(
    workload: str, num: int, *, max_tokens: int, num_spec: int
) -> tuple[list[list[int]], list[str]]:
    """The prompts of one batch size and their request classes (every prompt "all" on the default workload)."""
    if workload == "mixed":
        from ascend_spec.e2e.mixed import mixed_prompts

        return mixed_prompts(num, max_tokens=max_tokens, num_spec=num_spec)
    from ascend_spec.e2e.cli import builtin_prompts

    return builtin_prompts(num), []


def format_profile(rows: list[SweepRow]) -> str:
    """The target's cost profile (ms per forward by tokens) the largest batch's dynamic engine measured."""
    measured = [r for r in rows if r.mode == "dynamic" and (r.run.dynamic or {}).get("target_costs")]
    if not measured:
        return "target cost profile: not measured (no dynamic engine ran)"
    row = max(measured, key=lambda r: r.batch)
    costs = row.run.dynamic["target_costs"]
    return f"target cost profile at B={row.batch} (tokens:ms per forward): " + " ".join(
        f"{n}:{ms:.2f}" for n, ms in costs.items()
    )


def run_sweep(args: argparse.Namespace, setup: SweepSetup) -> int:
    from ascend_spec.e2e.cli import speculative_config

    batches = sorted({int(b) for b in str(args.batch_sizes).split(",")})
    if not batches or batches[0] < 1:
        raise CommandError(
            f"--batch-sizes must be positive ints separated by commas; got {args.batch_sizes!r}"
        )
    k_max = args.num_spec
    replicas = getattr(args, "replicas", 3)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise CommandError(f"--replicas must be an int >= 1; got {replicas!r}")
    cpus = pinned_cpus(getattr(args, "pin_cpu", "none"))
    work = Path(tempfile.mkdtemp(prefix="ascend_spec_e2e_sweep_"))
    base_plugin = {"backend": args.backend}
    # The same dynamic config for every method: the engine decides what it can plan (docs/vllm.md).
    dynamic = dict(base_plugin, dynamic={"mode": "sync", "profile": args.profile})
    rows: list[SweepRow] = []
    for b in batches:
        n = b * getattr(args, "requests_per_slot", 1)  # more than B: the engine refills its B slots
        prompts, classes = sweep_prompts(setup.workload, n, max_tokens=args.max_tokens, num_spec=k_max)
        lengths = [max(1, args.max_tokens - 3 * (i % 3)) for i in range(n)]

        def spec(k: int | None, plugin: dict | None, b: int = b) -> EngineSpec:
            cfg = None if k is None else speculative_config(setup.method, k, setup.drafter, setup.target)
            return EngineSpec(
                target=setup.target,
                speculative=cfg,
                plugin=plugin,
                hybrid=setup.hybrid,
                max_num_seqs=b,
                runner=getattr(args, "runner", "v1"),
            )

        configs = [("plain", spec(None, None))]
        configs += [(f"K={k}", spec(k, base_plugin)) for k in range(1, k_max + 1)]
        configs.append(("dynamic", spec(k_max, dynamic)))
        # Timing runs: the ops' value checks (host reads; the test suite's ASCEND_SPEC_CHECKS=1) stay off.
        env = {"ASCEND_SPEC_CHECKS": "0"}
        if args.threads:  # numba's pool too: ngram's proposer (docs/vllm.md, the mixed workload)
            env["OMP_NUM_THREADS"] = env["NUMBA_NUM_THREADS"] = str(args.threads)
        order = replica_order(len(configs), replicas)
        started = run_interleaved(
            [configs[i][1] for i in order],
            prompts,
            max_tokens=lengths,
            rounds=args.repeats,
            work_dir=work,
            env=env,
            cpus=cpus,
        )
        by_config: list[list[EngineRun]] = [[] for _ in configs]
        for i, result in zip(order, started):
            by_config[i].append(result)
        for (mode, _), group in zip(configs, by_config):
            ran = [r for r in group if not r.error]
            result = max(ran, key=lambda r: r.tokens_per_second) if ran else group[0]
            rows.append(SweepRow(b, mode, result, [r.tokens_per_second for r in ran], classes))
            print(f"  B={b} {mode}: {'failed' if result.error else f'{result.tokens_per_second:.1f} tok/s'}")
    kind = "constant " if getattr(args, "constant", False) else "low-entropy " if args.low_entropy else ""
    if setup.workload == "mixed":
        kind = "mixed workload, step-cost "
    title = (
        f"ascend-spec e2e --sweep: {kind}{'hybrid' if setup.hybrid else 'dense'} target, {setup.method}, "
        f"K<={k_max}, runner {getattr(args, 'runner', 'v1')}, {args.max_tokens} tokens/request"
        + (f", {args.requests_per_slot} x B requests" if getattr(args, "requests_per_slot", 1) > 1 else "")
    )
    print(title + (f" (engines pinned to CPU {cpus[0]})" if cpus else ""))
    print(format_sweep(rows))
    summaries = summarize_sweep(rows)
    print(format_summary(summaries))
    print(format_profile(rows))
    if args.plot:
        plot_sweep(rows, args.plot, title)
        print(f"wrote {args.plot}")
    if args.json:
        plain = {r.batch: r.run.tokens_per_second for r in rows if r.mode == "plain" and not r.run.error}
        plain_cpu = {
            r.batch: r.run.tokens_per_cpu_second for r in rows if r.mode == "plain" and not r.run.error
        }
        args.json.write_text(
            json.dumps(
                {
                    "workload": setup.workload,
                    "method": setup.method,
                    "num_spec": k_max,
                    "requests_per_slot": getattr(args, "requests_per_slot", 1),
                    "pinned_cpus": cpus,
                    "rows": [r.as_dict(plain.get(r.batch), plain_cpu.get(r.batch)) for r in rows],
                    "summary": [s.as_dict() for s in summaries],
                },
                indent=2,
            )
        )
        print(f"wrote {args.json}")
    return 0
