"""``ascend-spec plan``: expected tokens/s of plain decoding, every fixed K, and the dynamic controller.

Inputs: a plan profile (the target's cost profile and one cost profile per drafter, with how many tokens per
request each drafter runs) and an acceptance curve for one drafter. For each batch size B:

- plain: B / V(B);
- fixed K: every request verifies K drafts: B (1 + p_1 + ... + p_K) / (D_K(B) + V(B + B K));
- dynamic: the :class:`BudgetController` plan on the batch's survival matrix, for the drafter depth (1..K) whose
  plan is fastest (the drafter's depth is a configuration choice per batch size; the budget is chosen per step).

Costs are read after padding to the graph buckets; cells that needed the eager extrapolation above the largest
bucket are marked ``*``. By construction the dynamic row is never below the best fixed K (fixed K is one of the
budgets it considers) nor below plain decoding (it may choose not to speculate); the report checks both.

``--class CURVE:SHARE`` (repeatable) plans a batch of request classes instead of one curve: the survival matrix's
rows come from each class by its share (rules: :mod:`ascend_spec.graph.plan_classes`), and the report adds each
class's rows and the dynamic plan's mean drafts per request of that class.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ascend_spec.cli_args import (
    CommandError,
    check_distinct_outputs,
    check_plot_path,
    int_at_least,
    output_file,
    writing,
)
from ascend_spec.graph.acceptance import AcceptanceCurve, load_curve
from ascend_spec.graph.config_io import (
    check_keys,
    get_bool,
    get_str,
    get_str_list,
    read_json,
    require_object,
)
from ascend_spec.graph.controller import BudgetController
from ascend_spec.graph.cost_profile import CostProfile
from ascend_spec.graph.plan_classes import (
    ClassBatch,
    ClassMix,
    build_mix,
    class_arg,
    class_batches,
    class_rows,
)

PLAN_PROFILE_FORMAT = "ascend-spec/plan-profile/v1"
#: What an engine measures at start (``dynamic.profile``): one target and the engine's drafter, keyed by the
#: engine's settings. ``ascend-spec plan`` reads it too, so a profile measured on a user's model is planned on.
ENGINE_PROFILE_FORMAT = "ascend-spec/engine-cost-profiles/v1"
#: An engine profile's drafter query rule by speculative method (its draft profile already covers all K passes
#: of a sequential drafter: the engine times its whole dummy run).
ENGINE_QUERY_RULES = {"dflash": "K+1", "dspark": "K"}
DEFAULT_PROFILE = "talk_ascend910b"
DEFAULT_CURVE = "dspark_talk"
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_PLAN_PROFILE_KEYS = ("format", "label", "soc", "notes", "target", "drafters")
_DRAFTER_KEYS = ("query", "sequential", "profile")
QUERY_RULES = (
    "K",
    "K+1",
    "1",
)  # drafter tokens per request: DSpark K, DFlash K+1, sequential (EAGLE-3/MTP) 1


@dataclass(frozen=True)
class Drafter:
    name: str
    query: str  # one of QUERY_RULES
    sequential: bool  # K passes of one token per request (EAGLE-3, MTP) instead of one block pass
    profile: CostProfile

    def tokens_per_request(self, k: int) -> int:
        return {"K": k, "K+1": k + 1, "1": 1}[self.query]

    def cost_profile(self, k: int) -> CostProfile:
        """The profile the controller reads as D(B * Q): K passes are K times one pass for sequential drafters."""
        return self.profile.scaled(k) if self.sequential else self.profile

    def cost(self, num_reqs: int, k: int) -> float:
        return self.cost_profile(k).cost(num_reqs * self.tokens_per_request(k))


@dataclass(frozen=True)
class PlanProfile:
    label: str
    target: CostProfile
    drafters: dict[str, Drafter]
    notes: list[str] = field(default_factory=list)


def _configs_path(value: str, sub: str) -> Path:
    """A path, or the name of a shipped config in configs/<sub>/ (with or without .json)."""
    from ascend_spec.paths import CONFIGS_DIR

    p = Path(value)
    if p.exists():
        return p
    shipped = CONFIGS_DIR / sub / (value if value.endswith(".json") else value + ".json")
    if shipped.exists():
        return shipped
    names = sorted(q.stem for q in (CONFIGS_DIR / sub).glob("*.json"))
    raise ValueError(
        f"{value!r} is neither a file nor a shipped config in configs/{sub}/ ({', '.join(names)})"
    )


def load_plan_profile(path: str | Path) -> PlanProfile:
    """Read a plan profile strictly: JSON types as documented, unknown keys refused, errors name file and field.

    An engine profile (``ENGINE_PROFILE_FORMAT``, what ``dynamic.profile`` measures) is read as a plan profile
    with one drafter, named by the engine's speculative method.
    """
    path = Path(path)
    data = require_object(str(path), read_json(path))
    if data.get("format") == ENGINE_PROFILE_FORMAT:
        return plan_profile_of_engine(str(path), data)
    if data.get("format") != PLAN_PROFILE_FORMAT:
        raise ValueError(
            f"{path}: format must be {PLAN_PROFILE_FORMAT!r} or {ENGINE_PROFILE_FORMAT!r}; got {data.get('format')!r}"
        )
    check_keys(str(path), data, _PLAN_PROFILE_KEYS)
    where = str(path)
    label = get_str(where, data, "label", path.stem)
    get_str(where, data, "soc")  # informational; typed like every other field
    notes = get_str_list(where, data, "notes")
    target = CostProfile.from_dict(data.get("target"), where=f"{path}: target")
    cheapest = target.costs[target.buckets.smallest]
    if not cheapest > 0:
        raise ValueError(
            f"{path}: target.points: the cost at {target.buckets.smallest} tokens must be > 0 ms (tokens/s "
            f"divides by the target's step time); got {cheapest}"
        )
    raw = data.get("drafters")
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{path}: drafters must map drafter names to {{query, profile}}; got {raw!r}")
    drafters = {}
    for name, d in raw.items():
        where = f"{path}: drafters.{name}"
        d = require_object(where, d)
        check_keys(where, d, _DRAFTER_KEYS)
        query = d.get("query")
        if query not in QUERY_RULES:
            raise ValueError(f"{where}.query must be one of {QUERY_RULES}; got {query!r}")
        sequential = get_bool(where, d, "sequential", query == "1")
        profile = CostProfile.from_dict(d.get("profile"), where=f"{where}.profile")
        drafters[name] = Drafter(name, query, sequential, profile)
    return PlanProfile(label or path.stem, target, drafters, notes)


def plan_profile_of_engine(where: str, data: Mapping[str, Any]) -> PlanProfile:
    """An engine profile as a plan profile: its target, and its drafter under the method it was measured for."""
    for part in ("target", "draft"):
        if part not in data:
            raise ValueError(f"{where}: an engine profile needs a {part!r} profile")
    key = data.get("key") if isinstance(data.get("key"), Mapping) else {}
    method = str(key.get("method") or "engine")
    target = CostProfile.from_dict(data["target"], where=f"{where}: target")
    draft = CostProfile.from_dict(data["draft"], where=f"{where}: draft")
    query = ENGINE_QUERY_RULES.get(method, "1")
    label = f"engine profile {Path(where).stem}" + (f" ({key['model']})" if key.get("model") else "")
    return PlanProfile(label, target, {method: Drafter(method, query, False, draft)})


@dataclass
class Cell:
    tokens_per_s: float
    eager: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class BatchPlan:
    batch_size: int
    plain: Cell
    fixed: dict[int, Cell]
    dynamic: Cell

    @property
    def best_fixed(self) -> tuple[int, Cell]:
        return max(self.fixed.items(), key=lambda kv: (kv[1].tokens_per_s, -kv[0]))


def evaluate(
    profile: PlanProfile, curve: AcceptanceCurve, batch_sizes: list[int], max_drafts: int | None = None
) -> list[BatchPlan]:
    drafter = plan_drafter(profile, curve.drafter)
    k_max = check_max_drafts(curve.max_drafts, max_drafts)
    return [evaluate_batch(profile, drafter, curve.survival_matrix(b, k_max))[0] for b in batch_sizes]


def plan_drafter(profile: PlanProfile, name: str) -> Drafter:
    """The profile's drafter ``name`` (the one whose acceptance is planned), else a ValueError naming both."""
    if name not in profile.drafters:
        raise ValueError(
            f"the acceptance curve is for drafter {name!r}, but the profile has costs only for "
            f"{sorted(profile.drafters)}"
        )
    return profile.drafters[name]


def check_max_drafts(curve_max: int, max_drafts: int | None) -> int:
    """The largest K planned: ``max_drafts``, or the curve's length when None (refused above it)."""
    k_max = curve_max if max_drafts is None else max_drafts
    if not 1 <= k_max <= curve_max:
        raise ValueError(f"max_drafts must be in [1, {curve_max}] for this curve; got {k_max}")
    return k_max


def evaluate_batch(profile: PlanProfile, drafter: Drafter, surv: torch.Tensor) -> tuple[BatchPlan, list[int]]:
    """Plain, every fixed K and the dynamic plan on one batch's survival matrix ``surv [B, K]`` (float64), and
    the dynamic plan's drafts verified per request (row order of ``surv``; all 0 when it plans plain decoding)."""
    b, k_max = surv.shape
    v = profile.target
    plain_lookup = v.lookup(b)
    plain = Cell(b / plain_lookup.cost * 1e3, plain_lookup.eager, {"cost_ms": plain_lookup.cost})
    fixed = {}
    for k in range(1, k_max + 1):
        tokens = b + float(surv[:, :k].sum())
        vl = v.lookup(b + b * k)
        dcost = drafter.cost(b, k)
        fixed[k] = Cell(tokens / (dcost + vl.cost) * 1e3, vl.eager, {"cost_ms": dcost + vl.cost})
    best: Cell | None = None
    best_lengths: list[int] = []
    for kd in range(1, k_max + 1):
        ctl = BudgetController(
            drafter.cost_profile(kd),
            v,
            max_drafts=kd,
            draft_tokens_per_request=drafter.tokens_per_request(kd),
        )
        plan = ctl.plan(surv[:, :kd])
        eager = plan.target_bucket is None
        cell = Cell(
            plan.tokens_per_second,
            eager,
            {
                "depth": kd if plan.speculate else 0,
                "total_budget": plan.total_budget,
                "target_tokens": plan.target_tokens,
                "target_bucket": plan.target_bucket,
                "cost_ms": plan.expected_cost,
                "expected_tokens": float(plan.expected_tokens),
            },
        )
        if best is None or cell.tokens_per_s > best.tokens_per_s:
            best, best_lengths = cell, [int(n) for n in plan.num_drafts.tolist()]
    assert best is not None
    return BatchPlan(b, plain, fixed, best), best_lengths


def check_dominance(plans: list[BatchPlan], *, rel_tol: float = 1e-9) -> list[str]:
    """Batch sizes where the dynamic row falls below the best fixed K or plain decoding (should be none)."""
    bad = []
    for p in plans:
        k, cell = p.best_fixed
        floor = max(cell.tokens_per_s, p.plain.tokens_per_s) * (1 - rel_tol)
        if p.dynamic.tokens_per_s < floor:
            bad.append(
                f"B={p.batch_size}: dynamic {p.dynamic.tokens_per_s:.1f} < max(best fixed K={k} "
                f"{cell.tokens_per_s:.1f}, plain {p.plain.tokens_per_s:.1f})"
            )
    return bad


def _ratio(num: float, den: float, digits: int) -> str:
    """``num / den`` as ``1.23x``; n/a when the denominator is 0 (costs so large that tokens/s underflows)."""
    return f"{num / den:.{digits}f}x" if den > 0 and math.isfinite(den) else "n/a"


def format_table(plans: list[BatchPlan], extra_rows: list[list[str]] | None = None) -> str:
    """The plan table; ``extra_rows`` (label, then one cell per batch size) are appended (the per-class rows)."""

    def cell(c: Cell) -> str:
        return f"{c.tokens_per_s:.0f}{'*' if c.eager else ''}"

    head = ["batch size"] + [str(p.batch_size) for p in plans]
    rows = [["plain"] + [cell(p.plain) for p in plans]]
    for k in plans[0].fixed:
        rows.append([f"fixed K={k}"] + [cell(p.fixed[k]) for p in plans])
    rows.append(["dynamic"] + [cell(p.dynamic) for p in plans])
    rows.append(
        ["  depth/T"] + [f"{p.dynamic.detail['depth']}/{p.dynamic.detail['total_budget']}" for p in plans]
    )
    rows.append(["  best fixed K"] + [str(p.best_fixed[0]) for p in plans])
    rows.append(["  dyn/plain"] + [_ratio(p.dynamic.tokens_per_s, p.plain.tokens_per_s, 2) for p in plans])
    rows.append(
        ["  dyn/best K"] + [_ratio(p.dynamic.tokens_per_s, p.best_fixed[1].tokens_per_s, 3) for p in plans]
    )
    rows.extend(extra_rows or [])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(r, widths)))
        for r in [head, *rows]
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def plot(plans: list[BatchPlan], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bs = [p.batch_size for p in plans]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(bs, [p.plain.tokens_per_s for p in plans], "k--", label="plain")
    for k in plans[0].fixed:
        ax.plot(bs, [p.fixed[k].tokens_per_s for p in plans], alpha=0.5, label=f"K={k}")
    ax.plot(bs, [p.dynamic.tokens_per_s for p in plans], "r-", linewidth=2.5, label="dynamic")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("expected tokens/s")
    ax.set_title(textwrap.fill(title, 90), fontsize=9)  # profile/curve labels are long
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        metavar="PROFILE.json",
        help=f"plan profile file or shipped name in configs/profiles/ (default {DEFAULT_PROFILE})",
    )
    curves = parser.add_mutually_exclusive_group()
    curves.add_argument(
        "--acceptance",
        default=None,
        metavar="CURVE.json",
        help=f"acceptance curve file or shipped name in configs/acceptance/ (default {DEFAULT_CURVE})",
    )
    curves.add_argument(
        "--class",
        dest="classes",
        type=class_arg,
        action="append",
        default=None,
        metavar="CURVE:SHARE",
        help="one request class: its acceptance curve (file or shipped name) and its share of the batch; "
        "repeat per class (shares > 0, summing to 1); the batch's rows come from each class",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int_at_least(1),
        nargs="+",
        default=list(DEFAULT_BATCH_SIZES),
        metavar="B",
    )
    parser.add_argument(
        "--max-drafts", type=int_at_least(1), default=None, help="largest K (default: the curve's length)"
    )
    parser.add_argument(
        "--json", type=output_file, default=None, metavar="PATH", help="also write the results as JSON"
    )
    parser.add_argument(
        "--plot", type=output_file, default=None, metavar="PNG", help="also plot tokens/s (needs matplotlib)"
    )
    parser.add_argument(
        "--explain", type=int_at_least(1), default=None, metavar="B", help="print the thresholds at batch B"
    )


def _origin_summary(profile: CostProfile) -> str:
    counts: dict[str, int] = {}
    for size in profile.costs:
        origin = profile.origins.get(size, "unlabelled")
        counts[origin] = counts.get(origin, 0) + 1
    return ", ".join(f"{n} {origin}" for origin, n in counts.items())


def evaluate_classes(
    profile: PlanProfile, mix: ClassMix, batch_sizes: list[int], max_drafts: int | None = None
) -> tuple[list[BatchPlan], list[list[ClassBatch]]]:
    """:func:`evaluate` for a batch of request classes (rules: :mod:`ascend_spec.graph.plan_classes`): the plans
    and, per batch size, each class's rows, fixed-K tokens per request and dynamic lengths."""
    drafter = plan_drafter(profile, mix.drafter)
    k_max = check_max_drafts(mix.max_drafts, max_drafts)
    plans, per_class = [], []
    for b in batch_sizes:
        surv, counts = mix.survival_matrix(b, k_max)
        plan, lengths = evaluate_batch(profile, drafter, surv)
        plans.append(plan)
        per_class.append(class_batches(mix, surv, counts, lengths))
    return plans, per_class


def _load_mix(args: argparse.Namespace) -> ClassMix:
    specs = []
    for c in args.classes:
        try:
            path = _configs_path(c.curve, "acceptance")
            specs.append((f"{c.curve}:{c.share:g}", str(path), load_curve(path), c.share))
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"--class {c.curve}:{c.share:g}: {e}") from None
    mix = build_mix(specs)
    if min(args.batch_sizes) < len(mix.classes):
        raise ValueError(
            f"--batch-sizes {min(args.batch_sizes)}: every batch size must be >= the number of --class "
            f"arguments ({len(mix.classes)}), so that each class has a request"
        )
    return mix


def run(args: argparse.Namespace) -> int:
    check_distinct_outputs(json=args.json, plot=args.plot)
    if args.plot is not None:
        check_plot_path(args.plot)
    mix: ClassMix | None = None
    per_class: list[list[ClassBatch]] = []
    try:
        profile_path = _configs_path(args.profile, "profiles")
        profile = load_plan_profile(profile_path)
        if args.classes:
            mix = _load_mix(args)
            plans, per_class = evaluate_classes(profile, mix, list(args.batch_sizes), args.max_drafts)
        else:
            curve_path = _configs_path(args.acceptance or DEFAULT_CURVE, "acceptance")
            curve = load_curve(curve_path)
            plans = evaluate(profile, curve, list(args.batch_sizes), args.max_drafts)
    except (ValueError, FileNotFoundError) as e:
        raise CommandError(str(e)) from None
    k = len(plans[0].fixed)
    print(f"profile: {profile.label} ({profile_path})")
    if mix is None:
        print(f"acceptance: {curve.label} ({curve_path})")
        drafter_name, means = curve.drafter, {"": curve.mean_survival()[:k]}
    else:
        print(f"request classes ({len(mix.classes)}; rows per batch by the rule of docs/controller.md):")
        for c in mix.classes:
            print(f"  {c.name}: share {c.share:.4g}; {c.curve.label} ({c.path})")
        drafter_name = mix.drafter
        means = {c.name: c.curve.mean_survival()[:k] for c in mix.classes}
    drafter = profile.drafters[drafter_name]
    print(
        f"target cost points: {_origin_summary(profile.target)}; {drafter_name} drafter: "
        f"{_origin_summary(drafter.profile)}"
    )
    for name, mean in means.items():
        print(
            f"mean survival p_1..p_K{' of ' + name if name else ''}: " + ", ".join(f"{p:.3f}" for p in mean)
        )
    print("expected tokens/s (* = a cost above the largest graph bucket, extrapolated eager):")
    print(format_table(plans, class_rows(per_class) if mix is not None else None))
    if mix is not None:
        print(
            "(per class: its requests in the batch, and the mean drafts verified per request in the dynamic plan)"
        )
    bad = check_dominance(plans)
    if bad:
        print("CHECK FAILED: " + "; ".join(bad))
        return 1
    print("check: at every batch size the dynamic row >= the best fixed K and >= plain decoding")
    if args.explain is not None:
        ctl = BudgetController(
            drafter.cost_profile(k),
            profile.target,
            max_drafts=k,
            draft_tokens_per_request=drafter.tokens_per_request(k),
        )
        for name, mean in means.items():
            if name:
                print(f"class {name}:")
            print(ctl.explain(args.explain, mean).format())
    if args.json:
        data: dict[str, Any] = {"profile": str(profile_path)}
        if mix is None:
            data["acceptance"] = str(curve_path)
        else:
            data["classes"] = [
                {"name": c.name, "acceptance": c.path, "label": c.curve.label, "share": c.share}
                for c in mix.classes
            ]
        data["plans"] = [asdict(p) for p in plans]
        if mix is not None:
            data["class_plans"] = [
                {"batch_size": p.batch_size, "classes": [asdict(c) for c in cb]}
                for p, cb in zip(plans, per_class)
            ]
        with writing("--json", args.json):
            args.json.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        title = curve.label if mix is None else " + ".join(f"{c.share:.3g} {c.name}" for c in mix.classes)
        with writing("--plot", args.plot):
            plot(plans, args.plot, f"{profile.label} / {title}")
        print(f"wrote {args.plot}")
    return 0
