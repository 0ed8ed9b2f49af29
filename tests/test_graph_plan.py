"""``ascend-spec plan`` on the shipped configs: dynamic >= best fixed K >= ... and never below plain decoding."""

import importlib.util
import json

import pytest

from ascend_spec import cli
from ascend_spec.graph.acceptance import curve_from_dict, load_curve
from ascend_spec.graph.plan_report import check_dominance, evaluate, load_plan_profile
from ascend_spec.paths import CONFIGS_DIR

CURVES = sorted(p.stem for p in (CONFIGS_DIR / "acceptance").glob("*.json"))
PROFILES = sorted(p.stem for p in (CONFIGS_DIR / "profiles").glob("*.json"))
BATCHES = [1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 100, 128, 160, 192, 200, 256, 300, 512]


def test_shipped_configs_exist():
    assert {"eagle3_talk", "dflash_talk", "dspark_talk"} <= set(CURVES)
    assert "talk_ascend910b" in PROFILES


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("curve", CURVES)
def test_dynamic_dominates_on_shipped_configs(profile, curve):
    plans = evaluate(
        load_plan_profile(CONFIGS_DIR / "profiles" / f"{profile}.json"),
        load_curve(CONFIGS_DIR / "acceptance" / f"{curve}.json"),
        BATCHES,
    )
    assert check_dominance(plans) == []
    for p in plans:
        best = max(c.tokens_per_s for c in p.fixed.values())
        assert p.dynamic.tokens_per_s >= best * (1 - 1e-12)
        assert p.dynamic.tokens_per_s >= p.plain.tokens_per_s * (1 - 1e-12)
    if curve == "dspark_talk_mixture":  # requests that differ: the per-request budget beats every fixed K
        big = [p for p in plans if p.batch_size >= 64]
        assert all(p.dynamic.tokens_per_s > 1.02 * p.best_fixed[1].tokens_per_s for p in big)


def test_talk_figures_are_reproduced_by_the_shipped_profile():
    profile = load_plan_profile(CONFIGS_DIR / "profiles" / "talk_ascend910b.json")
    (p256,) = evaluate(profile, load_curve(CONFIGS_DIR / "acceptance" / "dspark_talk.json"), [256])
    assert p256.plain.tokens_per_s == pytest.approx(2411, rel=0.001)  # talk: target AR at BS=256
    assert p256.fixed[9].tokens_per_s == pytest.approx(2614, rel=0.05)  # talk: DSpark fixed K=9
    (e256,) = evaluate(profile, load_curve(CONFIGS_DIR / "acceptance" / "eagle3_talk.json"), [256])
    assert e256.fixed[9].tokens_per_s < e256.plain.tokens_per_s  # talk: EAGLE-3 at K=9 below AR
    assert e256.dynamic.tokens_per_s > e256.plain.tokens_per_s  # the dynamic budget lifts it above AR


def test_eagle3_curve_shape_matches_the_talk():
    curve = load_curve(CONFIGS_DIR / "acceptance" / "eagle3_talk.json")
    data = json.loads((CONFIGS_DIR / "acceptance" / "eagle3_talk.json").read_text())
    a = data["acceptance"]
    assert a[:3] == [0.70, 0.60, 0.50] and a[5] == pytest.approx(0.40, abs=0.01) and max(a[6:]) < 0.40
    for other in ("dflash_talk", "dspark_talk"):
        higher = load_curve(CONFIGS_DIR / "acceptance" / f"{other}.json")
        assert all(h > e for h, e in zip(higher.mean_survival(), curve.mean_survival()))


def test_cli_plan_prints_the_table(capsys, tmp_path):
    out_json = tmp_path / "plan.json"
    rc = cli.main(
        [
            "plan",
            "--profile",
            str(CONFIGS_DIR / "profiles" / "talk_ascend910b.json"),
            "--acceptance",
            str(CONFIGS_DIR / "acceptance" / "dspark_talk.json"),
            "--batch-sizes",
            "1",
            "64",
            "256",
            "--json",
            str(out_json),
            "--explain",
            "256",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert any(line.startswith("plain") and line.split()[-1] == "2411" for line in lines)
    assert any(line.startswith("fixed K=9") for line in lines) and any(
        line.startswith("dynamic") for line in lines
    )
    assert "dynamic row >= the best fixed K and >= plain decoding" in out
    assert "p_{k+1} > threshold" in out
    data = json.loads(out_json.read_text())
    assert [p["batch_size"] for p in data["plans"]] == [1, 64, 256]


def test_cli_plan_reads_an_engine_profile(capsys, tmp_path):
    """The profile an engine measures (``dynamic.profile``) is planned on as it is: its target and its drafter,
    named by the engine's method, give the same table as a plan profile holding the same two profiles."""
    from ascend_spec.graph.plan_report import ENGINE_PROFILE_FORMAT, load_plan_profile

    shipped = load_plan_profile(CONFIGS_DIR / "profiles" / "talk_ascend910b.json")
    target, draft = shipped.target.to_dict(), shipped.drafters["dspark"].profile.to_dict()
    engine = tmp_path / "engine.json"
    engine.write_text(
        json.dumps(
            {
                "format": ENGINE_PROFILE_FORMAT,
                "key": {"method": "dspark", "model": "m", "num_speculative_tokens": 7},
                "startup_s": 1.0,
                "target": target,
                "draft": draft,
            }
        )
    )
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "format": "ascend-spec/plan-profile/v1",
                "label": "same",
                "target": target,
                "drafters": {"dspark": {"query": "K", "profile": draft}},
            }
        )
    )
    tables = []
    for path in (engine, plan):
        assert (
            cli.main(
                ["plan", "--profile", str(path), "--acceptance", "dspark_talk", "--batch-sizes", "4", "64"]
            )
            == 0
        )
        tables.append(
            [
                line
                for line in capsys.readouterr().out.splitlines()
                if line.startswith(("plain", "fixed", "dynamic"))
            ]
        )
    assert tables[0] == tables[1] and tables[0]
    engine.write_text(json.dumps({"format": ENGINE_PROFILE_FORMAT, "target": target}))
    assert cli.main(["plan", "--profile", str(engine), "--acceptance", "dspark_talk"]) == 2
    assert "an engine profile needs a 'draft' profile" in capsys.readouterr().err


@pytest.mark.parametrize("curve", ["eagle3_talk", "dflash_talk", "dspark_talk_mixture"])
def test_cli_plan_by_shipped_name(capsys, curve):
    assert cli.main(["plan", "--acceptance", curve, "--batch-sizes", "8", "128"]) == 0
    assert "check: at every batch size" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_plot_without_matplotlib_is_a_clear_error(capsys, tmp_path):
    assert cli.main(["plan", "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot needs matplotlib, which is not installed" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_plot_with_matplotlib(tmp_path):  # pragma: no cover - only where matplotlib exists
    path = tmp_path / "p.png"
    assert cli.main(["plan", "--batch-sizes", "1", "8", "--plot", str(path)]) == 0
    assert path.stat().st_size > 0


def test_cli_errors(capsys, tmp_path):
    assert cli.main(["plan", "--profile", "no_such_profile"]) == 2
    assert "neither a file nor a shipped config in configs/profiles/" in capsys.readouterr().err
    assert cli.main(["plan", "--batch-sizes", "0"]) == 2
    assert "argument --batch-sizes: must be an integer >= 1; got 0" in capsys.readouterr().err
    assert cli.main(["plan", "--max-drafts", "12"]) == 2
    assert "max_drafts must be in [1, 9]" in capsys.readouterr().err
    bad = tmp_path / "bad_profile.json"
    data = json.loads((CONFIGS_DIR / "profiles" / "talk_ascend910b.json").read_text())
    data["target"]["points"][3]["cost"] = -1.0
    bad.write_text(json.dumps(data))
    assert cli.main(["plan", "--profile", str(bad)]) == 2
    assert "target.points[3].cost (bucket 8) must not be negative" in capsys.readouterr().err
    curve = tmp_path / "curve.json"
    curve.write_text(
        json.dumps({"format": "ascend-spec/acceptance/v1", "drafter": "medusa", "acceptance": [0.5]})
    )
    assert cli.main(["plan", "--acceptance", str(curve)]) == 2
    assert "drafter 'medusa', but the profile has costs only for" in capsys.readouterr().err


@pytest.mark.parametrize(
    "data, match",
    [
        ({"format": "x"}, "format must be 'ascend-spec/acceptance/v1'"),
        ({"format": "ascend-spec/acceptance/v1", "drafter": "", "acceptance": [0.5]}, "drafter must name"),
        (
            {"format": "ascend-spec/acceptance/v1", "drafter": "d", "acceptance": [1.5]},
            r"acceptance\[0\] must be",
        ),
        (
            {"format": "ascend-spec/acceptance/v1", "drafter": "d", "survival": [0.5, 0.6]},
            "must not increase",
        ),
        ({"format": "ascend-spec/acceptance/v1", "drafter": "d"}, "exactly one of 'acceptance'"),
        (
            {"format": "ascend-spec/acceptance/v1", "drafter": "d", "classes": []},
            "classes must be a non-empty",
        ),
        (
            {
                "format": "ascend-spec/acceptance/v1",
                "drafter": "d",
                "classes": [{"weight": 0, "survival": [0.5]}],
            },
            r"classes\[0\].weight must be a positive number",
        ),
    ],
)
def test_bad_curves(data, match):
    with pytest.raises(ValueError, match=match):
        curve_from_dict(data)


def test_curve_classes_split_the_batch():
    c = curve_from_dict(
        {
            "format": "ascend-spec/acceptance/v1",
            "drafter": "d",
            "classes": [{"weight": 3, "survival": [0.9, 0.8]}, {"weight": 1, "acceptance": [0.5, 0.5]}],
        }
    )
    assert c.class_counts(4) == [3, 1] and c.class_counts(1) == [1, 0] and c.class_counts(2) == [2, 0]
    m = c.survival_matrix(4)
    assert m.tolist() == [[0.9, 0.8]] * 3 + [[0.5, 0.25]]
    assert c.mean_survival() == pytest.approx([0.8, 0.6625])
