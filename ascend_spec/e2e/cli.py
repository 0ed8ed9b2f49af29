"""``ascend-spec e2e``: plain decoding, upstream speculative decoding and speculative decoding with the plugin.

Every run is a fresh in-process vLLM engine on the same prompts (token ids) and target; the table compares each
speculative run with plain decoding of the same engine build: tokens/s (ratio to plain in the same invocation),
tokens per CPU-second of the engine process (on a shared host other jobs stretch wall time, not CPU time), the
plugin's ratio to upstream's run of the same method (``wall/CPU``), acceptance per draft position, mean acceptance and verify lengths, GDN state bytes per request, and the first
divergence from plain decoding per prompt with plain decoding's top-2 logprob margin there.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from ascend_spec.cli_args import CommandError
from ascend_spec.e2e.cpu_v2 import RUNNERS
from ascend_spec.e2e.engine import EngineSpec, run_isolated
from ascend_spec.e2e.report import Row, first_divergences, format_table
from ascend_spec.e2e.tiny_models import VOCAB_SIZE, make_tiny_models

METHODS = ("ngram", "dflash", "mtp", "dspark")
WORKLOADS = ("default", "mixed")


def builtin_prompts(num: int, seed: int = 0) -> list[list[int]]:
    """Prompts of different lengths; half repeat a short pattern, so ngram finds matches of varying length."""
    rng = random.Random(seed)
    prompts = []
    for i in range(num):
        n = 6 + 5 * i
        if i % 2 == 0:
            pattern = [rng.randrange(1, VOCAB_SIZE - 1) for _ in range(2 + i % 3)]
            prompts.append((pattern * n)[:n])
        else:
            prompts.append([rng.randrange(1, VOCAB_SIZE - 1) for _ in range(n)])
    return prompts


def speculative_config(method: str, k: int, drafter: Path | None, target: Path) -> dict:
    """vLLM's speculative config of ``method`` at K = ``k`` (``drafter``: the DFlash or DSpark checkpoint)."""
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        }
    if method in ("dflash", "dspark"):
        if drafter is None:
            raise CommandError(f"--drafter is required for method {method} with --target")
        return {"method": method, "model": str(drafter), "num_speculative_tokens": k}
    if method == "mtp":
        return {"method": "mtp", "num_speculative_tokens": k}
    raise ValueError(f"--method must be one of {', '.join(METHODS)}; got {method!r}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target", type=Path, default=None, help="target model path (default: built-in tiny model)"
    )
    p.add_argument("--drafter", type=Path, default=None, help="DFlash drafter path (with --target)")
    p.add_argument(
        "--hybrid",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="target is a GDN hybrid (Qwen3.5/Qwen3-Next); built-in: Qwen3.5 hybrid (default) or Qwen3",
    )
    p.add_argument(
        "--method",
        action="append",
        default=None,
        choices=METHODS,
        help="speculative methods to run (repeatable; default ngram and dflash, plus mtp on the "
        "built-in hybrid); with --sweep one method, default dflash",
    )
    p.add_argument(
        "--workload",
        default="default",
        help="with --sweep: 'default' (the built-in prompts on the --hybrid/--low-entropy/--constant target) or "
        "'mixed' (half the requests repetitive, half not, on a dense target with a fixed per-step cost: "
        "ascend_spec/e2e/mixed.py)",
    )
    p.add_argument(
        "--requests-per-slot",
        type=int,
        default=1,
        help="with --sweep: submit N x B requests to each engine of batch size B (max_num_seqs = B), so finished "
        "requests are replaced as in serving (continuous batching) instead of the batch draining (default 1)",
    )
    p.add_argument(
        "--print-profile",
        action="store_true",
        help="measure the target's cost profile (ms per forward by tokens) the way dynamic verification does at "
        "engine start, at max(--batch-sizes) x (--num-spec + 1) tokens, print it and exit",
    )
    p.add_argument(
        "--runner",
        default="v1",
        choices=RUNNERS,
        help="vLLM's model runner of every engine: v1 (default) or v2 (Model Runner V2, on the CPU engine through "
        "the interpreted-Triton harness of ascend_spec/e2e/cpu_v2.py: for tokens and counters, not speed)",
    )
    p.add_argument("--num-spec", type=int, default=3, help="drafts per step K (default 3)")
    p.add_argument("--prompts", type=int, default=6, help="number of built-in prompts (default 6)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per prompt (default 32)")
    p.add_argument(
        "--low-entropy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="built-in target with a few non-zero lm_head rows, so random-weight drafters get drafts accepted "
        "(default; --no-low-entropy: every row random, near-zero acceptance)",
    )
    p.add_argument(
        "--constant",
        action="store_true",
        help="built-in dense target that always emits one token, with a DFlash drafter that is always right",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs per engine, best kept (default 3)")
    p.add_argument(
        "--backend", default="auto", help="plugin op backend: auto, reference, triton, ascendc, cpu"
    )
    p.add_argument("--models-dir", type=Path, default=None, help="where built-in models are written")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the rows as JSON")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="DFlash with the plugin: plain decoding, every fixed K <= --num-spec and dynamic verification at "
        "each of --batch-sizes (ascend_spec/e2e/sweep.py)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=3,
        help="with --sweep: engines started per row, the fastest reported, their spread the noise (default 3)",
    )
    p.add_argument("--batch-sizes", default="1,4,8", help="with --sweep: concurrent requests (default 1,4,8)")
    p.add_argument(
        "--profile", default="measure", help="with --sweep: dynamic cost profile, 'measure' or a file path"
    )
    p.add_argument(
        "--threads", type=int, default=1, help="with --sweep: OMP_NUM_THREADS of each engine (0: inherit)"
    )
    p.add_argument(
        "--pin-cpu",
        default="none",
        help="with --sweep: pin every engine process to this logical CPU ('auto': the last one this process may "
        "use when it may use two or more; default 'none': not pinned)",
    )
    p.add_argument(
        "--plot", type=Path, default=None, metavar="PNG", help="with --sweep: tokens/s vs batch size"
    )
    p.set_defaults(func=run)


def _check_workload(args: argparse.Namespace) -> None:
    """Refuse what the workload cannot run, naming the flag and its value, before any model is written."""
    if args.workload not in WORKLOADS:
        raise CommandError(f"--workload must be one of {', '.join(WORKLOADS)}; got {args.workload!r}")
    if args.workload == "mixed":
        if not (args.sweep or args.print_profile):
            raise CommandError("--workload mixed is a --sweep (or --print-profile) workload; add --sweep")
        if args.target is not None:
            raise CommandError(f"--workload mixed runs its own built-in target; drop --target {args.target}")
        if args.hybrid:
            raise CommandError("--workload mixed runs a dense target; drop --hybrid")
        if getattr(args, "constant", False):
            raise CommandError("--workload mixed runs its own target; drop --constant")
        from ascend_spec.e2e.mixed import MAX_REQUEST_TOKENS

        if args.max_tokens + args.num_spec > MAX_REQUEST_TOKENS:
            raise CommandError(
                f"--workload mixed takes --max-tokens + --num-spec <= {MAX_REQUEST_TOKENS} (its long cycle's "
                f"length); got --max-tokens {args.max_tokens} --num-spec {args.num_spec}"
            )
    if args.sweep and args.method is not None and len(args.method) != 1:
        raise CommandError(f"--sweep runs one --method; got {', '.join(args.method)}")
    # The built-in hybrid (and a --target passed as --hybrid) has an MTP head; the dense and mixed targets do not.
    if args.sweep and args.method == ["mtp"] and (args.workload == "mixed" or args.hybrid is False):
        raise CommandError(
            "--method mtp needs a target with an MTP head (the built-in Qwen3.5 hybrid: --workload default "
            f"--hybrid); got --workload {args.workload}{' --no-hybrid' if args.hybrid is False else ''}"
        )


def _models(args: argparse.Namespace) -> tuple[Path, dict[str, Path | None], bool]:
    """(target, {method: drafter checkpoint}, whether the target has an MTP head)."""
    if args.target is not None:
        return args.target, {"dflash": args.drafter, "dspark": args.drafter}, bool(args.hybrid)
    root = args.models_dir or Path(tempfile.gettempdir()) / "ascend_spec_e2e_models"
    if args.workload == "mixed":
        from ascend_spec.e2e.mixed import make_mixed_models

        models = make_mixed_models(root)
    else:
        constant = getattr(args, "constant", False)
        models = (
            make_tiny_models(  # the constant target is its own kind: --low-entropy (a default) does not apply
                root, hybrid=args.hybrid, low_entropy=args.low_entropy and not constant, constant=constant
            )
        )
    return models.target, {"dflash": models.dflash, "dspark": models.dspark}, models.mtp


def run(args: argparse.Namespace) -> int:
    if args.num_spec < 1:
        raise CommandError(f"--num-spec must be >= 1; got {args.num_spec}")
    if args.prompts < 1 or args.max_tokens < 1:
        raise CommandError(f"--prompts and --max-tokens must be >= 1; got {args.prompts}, {args.max_tokens}")
    _check_workload(args)
    if args.requests_per_slot < 1:
        raise CommandError(f"--requests-per-slot must be >= 1; got {args.requests_per_slot}")
    if args.hybrid is None:
        args.hybrid = args.workload == "default"
    if args.sweep:
        from ascend_spec.e2e.sweep import pinned_cpus

        pinned_cpus(args.pin_cpu)  # a bad --pin-cpu fails before any model is written
    target, drafters, has_mtp = _models(args)
    if args.sweep and args.method == ["mtp"] and not has_mtp:
        raise CommandError(f"--method mtp needs a target with an MTP head; {target} has none")
    if args.print_profile:
        from ascend_spec.e2e.target_profile import print_target_profile

        return print_target_profile(args, target, drafters["dflash"], args.hybrid)
    if args.sweep:
        from ascend_spec.e2e.sweep import SweepSetup, run_sweep

        method = args.method[0] if args.method else "dflash"
        drafter = drafters.get(method)
        if method in ("dflash", "dspark") and drafter is None:
            raise CommandError(f"--sweep --method {method}: --drafter is required with --target")
        return run_sweep(args, SweepSetup(target, args.hybrid, method, drafter, args.workload))
    methods = args.method or (["ngram", "dflash"] + (["mtp"] if has_mtp else []))
    prompts = builtin_prompts(args.prompts)
    # Requests of different lengths finish at different times.
    lengths = [max(1, args.max_tokens - 3 * (i % 3)) for i in range(len(prompts))]

    def spec(speculative: dict | None, plugin: dict | None) -> EngineSpec:
        return EngineSpec(
            target=target, speculative=speculative, plugin=plugin, hybrid=args.hybrid, runner=args.runner
        )

    work = Path(tempfile.mkdtemp(prefix="ascend_spec_e2e_"))
    plain = run_isolated(
        spec(None, None), prompts, work_dir=work, max_tokens=lengths, logprobs=True, repeats=args.repeats
    )
    rows = [Row("plain", "-", plain)]
    for method in methods:
        cfg = speculative_config(method, args.num_spec, drafters.get(method), target)
        for mode, plugin in (("upstream", None), ("ascend-spec", {"backend": args.backend})):
            result = run_isolated(
                spec(cfg, plugin), prompts, work_dir=work, max_tokens=lengths, repeats=args.repeats
            )
            divs = None if result.error or plain.error else first_divergences(plain, result)
            rows.append(Row(mode, method, result, divs))
    print(
        f"ascend-spec e2e: target {target} ({'hybrid' if args.hybrid else 'dense'}), runner {args.runner}, "
        f"K={args.num_spec}, "
        f"{len(prompts)} prompts, {sum(lengths)} tokens"
    )
    print(format_table(rows))
    if args.json:
        plain_tps = None if plain.error else plain.tokens_per_second
        args.json.write_text(json.dumps([r.as_dict(plain_tps) for r in rows], indent=2))
        print(f"wrote {args.json}")
    return 0
