"""``ascend-spec plan --class CURVE:SHARE``: a batch of request classes, each with its own acceptance curve.

Oracles: today's single-curve plan (one class of share 1 must equal it exactly), float64 hand computations of the
fixed-K expectation, and the dominance that holds by construction (dynamic >= best fixed K, >= plain).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ascend_spec import cli
from ascend_spec.graph.acceptance import curve_from_dict, load_curve
from ascend_spec.graph.plan_classes import ClassMix, RequestClassSpec, build_mix
from ascend_spec.graph.plan_report import (
    check_dominance,
    evaluate,
    evaluate_classes,
    load_plan_profile,
)
from ascend_spec.paths import CONFIGS_DIR

PROFILE = load_plan_profile(CONFIGS_DIR / "profiles" / "talk_ascend910b.json")
CURVES = sorted(p.stem for p in (CONFIGS_DIR / "acceptance").glob("*.json"))
BATCHES = [1, 2, 3, 5, 8, 64, 100, 128, 256, 300]


def _curve(name: str):
    return load_curve(CONFIGS_DIR / "acceptance" / f"{name}.json")


def _mix(*parts: tuple[str, object, float]) -> ClassMix:
    """A mix from (name, curve or shipped name, share) triples, through build_mix's checks."""
    specs = []
    for name, curve, share in parts:
        c = _curve(curve) if isinstance(curve, str) else curve
        specs.append((f"{name}:{share}", f"{name}.json", c, share))
    return build_mix(specs)


def _synthetic(survival: list[float], drafter: str = "dspark"):
    return curve_from_dict({"format": "ascend-spec/acceptance/v1", "drafter": drafter, "survival": survival})


# -- a batch of one class is today's single-curve plan -----------------------------------------------------
@pytest.mark.parametrize("curve", CURVES)
def test_one_class_equals_the_single_curve_plan_exactly(curve):
    single = evaluate(PROFILE, _curve(curve), BATCHES)
    plans, per_class = evaluate_classes(PROFILE, _mix((curve, curve, 1.0)), BATCHES)
    assert [asdict(p) for p in plans] == [asdict(p) for p in single]
    assert [[c.rows for c in cb] for cb in per_class] == [[b] for b in BATCHES]


@pytest.mark.parametrize("curve", ["dspark_talk", "eagle3_talk", "dspark_weak_synthetic"])
def test_two_identical_classes_equal_one_class(curve):
    batches = [b for b in BATCHES if b >= 2]
    one = evaluate(PROFILE, _curve(curve), batches)
    two, per_class = evaluate_classes(PROFILE, _mix(("a", curve, 0.5), ("b", curve, 0.5)), batches)
    for p1, p2, cb in zip(one, two, per_class):
        assert p2.plain.tokens_per_s == p1.plain.tokens_per_s
        for k in p1.fixed:
            assert p2.fixed[k].tokens_per_s == pytest.approx(p1.fixed[k].tokens_per_s, rel=1e-12)
        assert p2.dynamic.tokens_per_s == pytest.approx(p1.dynamic.tokens_per_s, rel=1e-12)
        assert p2.dynamic.detail["total_budget"] == p1.dynamic.detail["total_budget"]
        # the total budget is the same; ties between the identical halves may split it unevenly
        drafts = sum(c.rows * c.dynamic_mean_drafts for c in cb)
        assert drafts == p1.dynamic.detail["total_budget"]


def test_the_mixture_file_as_two_classes_equals_the_file():
    """dspark_talk_mixture's sub-classes given as two --class curves of share 0.5 plan the same batch."""
    data = json.loads((CONFIGS_DIR / "acceptance" / "dspark_talk_mixture.json").read_text())
    parts = []
    for c in data["classes"]:
        d = {"format": "ascend-spec/acceptance/v1", "drafter": "dspark", "acceptance": c["acceptance"]}
        parts.append((c["name"], curve_from_dict(d), c["weight"]))
    batches = [2, 8, 64, 128, 256]
    plans, _ = evaluate_classes(PROFILE, _mix(*parts), batches)
    file_plans = evaluate(PROFILE, _curve("dspark_talk_mixture"), batches)
    for p, q in zip(plans, file_plans):
        assert asdict(p) == asdict(q)


# -- rows per class ------------------------------------------------------------------------------------------
def test_rows_rule():
    half = _mix(("a", "dspark_talk", 0.5), ("b", "dspark_weak_synthetic", 0.5))
    assert [half.rows(b) for b in (2, 3, 64, 128, 256)] == [[1, 1], [2, 1], [32, 32], [64, 64], [128, 128]]
    small = _mix(("a", "dspark_talk", 0.05), ("b", "dspark_talk", 0.05), ("c", "dspark_talk", 0.9))
    assert small.rows(10) == [1, 1, 8]  # largest remainder gives [1, 0, 9]; c lends b one row
    assert small.rows(3) == [1, 1, 1]
    with pytest.raises(ValueError, match="a batch of 2 cannot give each of the 3 classes a request"):
        small.rows(2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5),
    st.integers(1, 600),
)
@example(weights=[0.01, 0.01, 1.0], batch=3)  # largest remainder alone leaves two classes without a row
@example(weights=[0.01, 1.0, 1.0, 1.0], batch=40)
def test_rows_sum_to_the_batch_and_follow_the_shares(weights, batch):
    total = sum(weights)
    classes = tuple(
        RequestClassSpec(f"c{i}", _curve("dspark_talk"), "x", w / total) for i, w in enumerate(weights)
    )
    mix = ClassMix(classes)
    if batch < len(classes):
        with pytest.raises(ValueError):
            mix.rows(batch)
        return
    rows = mix.rows(batch)
    assert sum(rows) == batch and min(rows) >= 1
    # largest remainder is within one row of the exact quota; lending a row to an empty class moves it by one more
    for r, c in zip(rows, classes):
        assert abs(r - c.share * batch) < len(classes) + 1


# -- fixed K: the share-weighted expectation, by hand in float64 ------------------------------------------
@pytest.mark.parametrize("shares", [(0.5, 0.5), (0.25, 0.75)])
def test_fixed_k_expectation_is_the_share_weighted_sum(shares):
    strong = [0.8, 0.75, 0.72, 0.7, 0.68, 0.66, 0.64, 0.62, 0.6]  # dspark_talk.json's conditional acceptance
    weak = [0.5] * 9  # dspark_weak_synthetic.json's
    mix = _mix(("strong", "dspark_talk", shares[0]), ("weak", "dspark_weak_synthetic", shares[1]))
    drafter = PROFILE.drafters["dspark"]
    for b in (64, 128, 256):
        (plan,), (per_class,) = evaluate_classes(PROFILE, mix, [b])
        for k in range(1, 10):
            g = []
            for acc in (strong, weak):
                surv, p = [], 1.0
                for a in acc[:k]:
                    p *= a
                    surv.append(p)
                g.append(1.0 + math.fsum(surv))
            tokens = b * (shares[0] * g[0] + shares[1] * g[1])
            cost = drafter.cost(b, k) + PROFILE.target.cost(b + b * k)
            assert plan.fixed[k].tokens_per_s == pytest.approx(tokens / cost * 1e3, rel=1e-12)
            assert per_class[0].fixed_tokens_per_request[k] == pytest.approx(g[0], rel=1e-12)
            assert per_class[1].fixed_tokens_per_request[k] == pytest.approx(g[1], rel=1e-12)
        assert [c.rows for c in per_class] == [round(b * s) for s in shares]


# -- dynamic: never below the best fixed K nor plain; weak classes get shorter lengths ------------------------
survivals = st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5).map(
    lambda xs: [math.prod(xs[: i + 1]) for i in range(len(xs))]
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(survivals, st.floats(0.05, 1.0)), min_size=1, max_size=3),
    st.lists(st.sampled_from([3, 4, 16, 64, 100, 128, 256, 300]), min_size=1, max_size=3),
)
def test_dynamic_dominates_for_random_classes(classes, batches):
    total = sum(w for _, w in classes)
    mix = _mix(*[(f"c{i}", _synthetic(s), w / total) for i, (s, w) in enumerate(classes)])
    plans, per_class = evaluate_classes(PROFILE, mix, batches)
    assert check_dominance(plans) == []
    for p, cb in zip(plans, per_class):
        assert p.dynamic.tokens_per_s >= p.best_fixed[1].tokens_per_s * (1 - 1e-12)
        assert p.dynamic.tokens_per_s >= p.plain.tokens_per_s * (1 - 1e-12)
        assert sum(c.rows for c in cb) == p.batch_size
        assert sum(c.rows * c.dynamic_mean_drafts for c in cb) == pytest.approx(
            p.dynamic.detail["total_budget"]
        )


@pytest.mark.parametrize("b", [64, 128, 256])
def test_a_useless_class_gets_shorter_lengths_than_a_strong_one(b):
    useless = _synthetic([0.01 * 0.5**i for i in range(9)])
    mix = _mix(("strong", "dspark_talk", 0.5), ("useless", useless, 0.5))
    (plan,), ((strong, weak),) = evaluate_classes(PROFILE, mix, [b])
    assert plan.dynamic.detail["depth"] > 0  # the strong half is worth speculating for
    assert weak.dynamic_mean_drafts < strong.dynamic_mean_drafts
    assert weak.dynamic_max_drafts == 0  # a 1 % draft never pays for the tokens it adds
    assert (
        plan.dynamic.tokens_per_s > plan.best_fixed[1].tokens_per_s
    )  # fixed K wastes slots on the useless half


def test_the_talk_mix_treats_the_halves_differently():
    mix = _mix(("dspark_talk", "dspark_talk", 0.5), ("weak", "dspark_weak_synthetic", 0.5))
    plans, per_class = evaluate_classes(PROFILE, mix, [64, 128, 256])
    for p, (strong, weak) in zip(plans, per_class):
        assert strong.rows == weak.rows == p.batch_size // 2
        assert strong.dynamic_mean_drafts > weak.dynamic_mean_drafts
        assert p.dynamic.tokens_per_s > p.best_fixed[1].tokens_per_s > p.plain.tokens_per_s


# -- the command line --------------------------------------------------------------------------------------
def test_cli_classes_table_and_json(capsys, tmp_path: Path):
    out_json = tmp_path / "plan.json"
    argv = ["plan", "--class", "dspark_talk:0.5", "--class", "dspark_weak_synthetic:0.5"]
    argv += ["--batch-sizes", "64", "128", "256", "--json", str(out_json), "--explain", "256"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "request classes (2;" in out and "dspark_weak_synthetic: share 0.5;" in out
    lines = out.splitlines()
    mean_k = next(line for line in lines if line.strip().startswith("dspark_talk mean K")).split()[-3:]
    weak_k = next(line for line in lines if line.strip().startswith("dspark_weak_synthetic mean K")).split()[
        -3:
    ]
    assert all(float(s) > float(w) for s, w in zip(mean_k, weak_k))
    assert "check: at every batch size the dynamic row >= the best fixed K" in out
    assert out.count("p_{k+1} > threshold") == 2  # --explain once per class
    data = json.loads(out_json.read_text())
    assert [c["name"] for c in data["classes"]] == ["dspark_talk", "dspark_weak_synthetic"]
    assert [c["share"] for c in data["classes"]] == [0.5, 0.5]
    assert [p["batch_size"] for p in data["class_plans"]] == [64, 128, 256]
    first = data["class_plans"][0]["classes"]
    assert [c["rows"] for c in first] == [32, 32]
    assert first[0]["dynamic_mean_drafts"] > first[1]["dynamic_mean_drafts"]
    assert set(first[0]["fixed_tokens_per_request"]) == {str(k) for k in range(1, 10)}
    assert "acceptance" not in data


def test_cli_shares_within_the_tolerance_are_normalised(capsys, tmp_path: Path):
    out_json = tmp_path / "plan.json"
    argv = ["plan", "--batch-sizes", "3", "9", "--json", str(out_json)]
    for name in ("dspark_talk", "dspark_weak_synthetic", "dspark_talk_mixture"):
        argv += ["--class", f"{name}:0.333"]
    assert cli.main(argv) == 0
    data = json.loads(out_json.read_text())
    assert [c["share"] for c in data["classes"]] == pytest.approx([1 / 3] * 3, rel=1e-12)
    assert [[c["rows"] for c in p["classes"]] for p in data["class_plans"]] == [[1, 1, 1], [3, 3, 3]]


def _fails(argv: list[str], capsys, *fragments: str) -> None:
    assert cli.main(["plan", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ascend-spec plan: error: "), captured.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert captured.out == ""


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--class", "dspark_talk"], ["argument --class", "must be CURVE:SHARE", "'dspark_talk'"]),
        (["--class", ":0.5"], ["argument --class", "must be CURVE:SHARE", "':0.5'"]),
        (["--class", "dspark_talk:half"], ["argument --class", "'half'", "'dspark_talk:half'"]),
        (["--class", "dspark_talk:0"], ["argument --class", "(0, 1]", "'dspark_talk:0'"]),
        (["--class", "dspark_talk:-0.5"], ["argument --class", "(0, 1]", "'dspark_talk:-0.5'"]),
        (["--class", "dspark_talk:1.5"], ["argument --class", "(0, 1]", "'dspark_talk:1.5'"]),
        (["--class", "dspark_talk:nan"], ["argument --class", "(0, 1]", "'dspark_talk:nan'"]),
        (
            ["--class", "dspark_talk:0.5", "--class", "dspark_weak_synthetic:0.4"],
            ["--class", "must sum to 1", "0.5 + 0.4 = 0.9"],
        ),
        (["--class", "dspark_talk:0.5"], ["--class", "must sum to 1", "0.5 = 0.5"]),
        (
            ["--class", "dspark_talk:0.5", "--class", "eagle3_talk:0.5"],
            ["--class eagle3_talk:0.5", "drafter 'eagle3'", "--class dspark_talk:0.5", "'dspark'"],
        ),
        (
            ["--class", "no_such_curve:0.5", "--class", "dspark_talk:0.5"],
            ["--class no_such_curve:0.5", "neither a file nor a shipped config in configs/acceptance/"],
        ),
        (
            ["--acceptance", "dspark_talk", "--class", "dspark_talk:1"],
            ["argument --class", "not allowed with argument --acceptance"],
        ),
        (
            ["--class", "dspark_talk:0.5", "--class", "dspark_weak_synthetic:0.5", "--batch-sizes", "1", "8"],
            ["--batch-sizes 1", "number of --class arguments (2)"],
        ),
        (["--class", "dspark_talk:1", "--max-drafts", "10"], ["max_drafts must be in [1, 9]", "got 10"]),
    ],
)
def test_cli_class_errors(argv, fragments, capsys):
    _fails(argv, capsys, *fragments)


def test_cli_class_curve_with_another_profile_drafter(capsys, tmp_path: Path):
    curve = tmp_path / "medusa.json"
    curve.write_text(
        json.dumps({"format": "ascend-spec/acceptance/v1", "drafter": "medusa", "acceptance": [0.5]})
    )
    _fails(["--class", f"{curve}:1"], capsys, "drafter 'medusa', but the profile has costs only for")
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"format": "ascend-spec/acceptance/v1", "drafter": "dspark", "acceptance": [1.5]})
    )
    _fails(["--class", f"{bad}:1"], capsys, f"--class {bad}:1:", r"acceptance[0] must be a probability")
