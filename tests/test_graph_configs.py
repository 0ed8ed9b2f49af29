"""Config files are read strictly: JSON types, unknown keys, file and field named in every error, no crash."""

import copy
import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_spec.graph import BudgetController, CostProfile, GraphBuckets
from ascend_spec.graph import buckets as buckets_module
from ascend_spec.graph.acceptance import curve_from_dict, load_curve
from ascend_spec.graph.config_io import read_json
from ascend_spec.graph.plan_report import check_dominance, evaluate, format_table, load_plan_profile
from ascend_spec.paths import CONFIGS_DIR

SHIPPED_PROFILE = CONFIGS_DIR / "profiles" / "seed_ascend910b.json"
SHIPPED_CURVE = CONFIGS_DIR / "acceptance" / "eagle3_seed.json"


def shipped_profile() -> dict:
    return json.loads(SHIPPED_PROFILE.read_text())


def write(tmp_path: Path, data: object, name: str = "cfg.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def small_profile(costs: dict[int, float], **extra) -> dict:
    points = [{"tokens": t, "cost": c} for t, c in costs.items()]
    return {"format": "ascend-spec/cost-profile/v1", "part": "target", "points": points, **extra}


# -- reading files ---------------------------------------------------------------------------------------------
def test_read_json_names_the_file_for_every_unreadable_input(tmp_path):
    with pytest.raises(ValueError, match=rf"{tmp_path}: is a folder, not a JSON file"):
        read_json(tmp_path)
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"label": "caf\xe9"}')
    with pytest.raises(ValueError, match=rf"{latin1}: not UTF-8 text \(byte 14"):
        read_json(latin1)
    twice = tmp_path / "twice.json"
    twice.write_text('{"sequential": true, "sequential": false}')
    with pytest.raises(ValueError, match=rf"{twice}: .*key 'sequential' appears twice"):
        read_json(twice)
    nan = tmp_path / "nan.json"
    nan.write_text('{"cost": NaN}')
    with pytest.raises(ValueError, match=rf"{nan}: .*NaN is not a JSON number"):
        read_json(nan)
    broken = tmp_path / "broken.json"
    broken.write_text("{oops")
    with pytest.raises(ValueError, match=rf"{broken}: not valid JSON"):
        read_json(broken)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


# -- plan profiles ---------------------------------------------------------------------------------------------
def test_sequential_must_be_a_json_bool(tmp_path):
    data = shipped_profile()
    data["drafters"]["eagle3"]["sequential"] = "false"
    path = write(tmp_path, data)
    with pytest.raises(
        ValueError, match=rf"{path}: drafters.eagle3.sequential must be a JSON bool .*got string 'false'"
    ):
        load_plan_profile(path)


def test_sequential_false_is_read_as_false_and_changes_the_plan(tmp_path):
    data = shipped_profile()
    data["drafters"]["eagle3"]["sequential"] = False
    parallel = load_plan_profile(write(tmp_path, data))
    sequential = load_plan_profile(SHIPPED_PROFILE)
    assert sequential.drafters["eagle3"].sequential and not parallel.drafters["eagle3"].sequential
    curve = load_curve(SHIPPED_CURVE)
    (seq,), (par,) = evaluate(sequential, curve, [64]), evaluate(parallel, curve, [64])
    # one pass of K tokens is costed once, K sequential passes K times: the drafter is cheaper in parallel
    assert par.fixed[9].detail["cost_ms"] < seq.fixed[9].detail["cost_ms"]


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.update(labl="x"), r"unknown key\(s\) \['labl'\]"),
        (lambda d: d.update(label=7), "label must be a string; got number 7"),
        (lambda d: d.update(notes="one note"), "notes must be an array of strings"),
        (lambda d: d.update(soc=910), "soc must be a string"),
        (lambda d: d["drafters"].update(dspark=[]), "drafters.dspark must be a JSON object; got array"),
        (
            lambda d: d["drafters"]["dspark"].update(qeury="K"),
            r"drafters.dspark: unknown key\(s\) \['qeury'\]",
        ),
        (lambda d: d["drafters"]["dspark"].update(query=1), "drafters.dspark.query must be one of"),
        (lambda d: d["target"].update(eager="fast"), "target.eager must be a JSON object; got string"),
        (lambda d: d.update(target=None), "target must be a JSON object; got null"),
    ],
)
def test_bad_plan_profiles_name_the_file_and_field(tmp_path, edit, match):
    data = shipped_profile()
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(ValueError, match=rf"{path}: .*{match}"):
        load_plan_profile(path)


def test_zero_cost_target_is_refused_and_zero_cost_drafter_plans(tmp_path):
    data = shipped_profile()
    for p in data["target"]["points"]:
        p["cost"] = 0.0
    data["target"]["eager"] = {"per_token": 0.0, "origin": "given"}
    path = write(tmp_path, data)
    with pytest.raises(ValueError, match=rf"{path}: target.points: the cost at 1 tokens must be > 0 ms"):
        load_plan_profile(path)
    data = shipped_profile()
    for d in data["drafters"].values():
        for p in d["profile"]["points"]:
            p["cost"] = 0
        d["profile"].pop("eager", None)
    free = load_plan_profile(write(tmp_path, data, "free_drafter.json"))
    (plan,) = evaluate(free, load_curve(SHIPPED_CURVE), [8])
    plain_ms = free.target.cost(8)
    assert plan.plain.tokens_per_s == pytest.approx(8 / plain_ms * 1e3)
    assert plan.fixed[1].tokens_per_s == pytest.approx((8 + 8 * 0.7) / free.target.cost(16) * 1e3)


def test_controller_refuses_a_free_target():
    free = CostProfile({8: 0.0, 16: 0.0})
    with pytest.raises(ValueError, match="verify_cost must be > 0 ms at every bucket .*got 0.0 at 8 tokens"):
        BudgetController(free, free, max_drafts=2, draft_tokens_per_request=2)
    ctl = BudgetController(free, CostProfile({8: 1.0, 16: 1.0}), max_drafts=2, draft_tokens_per_request=2)
    plan = ctl.plan(torch.tensor([[0.9, 0.8], [0.5, 0.1]]))
    assert plan.total_budget == 4 and plan.tokens_per_second == pytest.approx((2 + 2.3) / 1.0 * 1e3)
    assert "tok/s" in ctl.explain(2, [0.9, 0.8]).format()


# -- cost profiles ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, match",
    [
        (small_profile({8: 1.0}, eager="fast"), "eager must be a JSON object; got string 'fast'"),
        (small_profile({8: 1.0}, eager=[1]), "eager must be a JSON object; got array"),
        (small_profile({8: 1.0}, eager={"per_token": 1}), "eager.origin must be 'given' or"),
        (small_profile({8: 1.0}, eager={"origin": "given"}), "eager.per_token must be given"),
        (
            small_profile({8: 1.0}, eager={"per_token": "1", "origin": "given"}),
            "eager.per_token must be a number",
        ),
        (
            small_profile({8: 1.0}, eager={"per_token": -1, "origin": "given"}),
            "eager.per_token must not be neg",
        ),
        (
            small_profile({8: 1.0}, eager={"per_token": 1, "origin": "given", "x": 1}),
            r"unknown key\(s\) \['x'\]",
        ),
        (
            small_profile(
                {8: 1.0, 16: 3.0},
                eager={"per_token": 1.0, "origin": "extrapolated from the two largest buckets"},
            ),
            "eager.per_token is 1.0 but the points imply 0.25",
        ),
        (small_profile({8: "1"}), r"points\[0\].cost must be a number; got string '1'"),
        (small_profile({8: True}), r"points\[0\].cost must be a number; got bool True"),
        (small_profile({8: None}), r"points\[0\].cost must be a number; got null"),
        (small_profile({8: 1.0}, unit="us"), "unit must be 'ms'"),
        (small_profile({8: 1.0}, part=5), "part must be a string; got number 5"),
        (small_profile({8: 1.0}, source=["a"]), "source must be a string"),
        (small_profile({8: 1.0}, extra=1), r"unknown key\(s\) \['extra'\]"),
    ],
)
def test_from_dict_checks_every_field_up_front(data, match):
    with pytest.raises(ValueError, match=rf"^profile: .*{match}"):
        CostProfile.from_dict(data)


def test_from_dict_checks_point_fields():
    data = small_profile({8: 1.0})
    data["points"][0]["tokens"] = 8.0
    with pytest.raises(ValueError, match=r"points\[0\].tokens must be an int; got 8.0"):
        CostProfile.from_dict(data)
    data = small_profile({8: 1.0})
    data["points"][0]["orign"] = "seed"
    with pytest.raises(ValueError, match=r"points\[0\]: unknown key\(s\) \['orign'\]"):
        CostProfile.from_dict(data)
    data = small_profile({8: 1.0})
    data["points"][0]["origin"] = "guessed"
    with pytest.raises(ValueError, match=r"points\[0\].origin must be one of"):
        CostProfile.from_dict(data)


def test_eager_block_round_trips_and_may_be_left_out():
    given_slope = CostProfile({8: 1.0, 16: 3.0}, eager_per_token=0.5)
    assert CostProfile.from_dict(given_slope.to_dict()) == given_slope
    default = CostProfile({8: 1.0, 16: 3.0})
    assert CostProfile.from_dict(default.to_dict()) == default
    assert CostProfile.from_dict(small_profile({8: 1.0, 16: 3.0})) == CostProfile(
        {8: 1.0, 16: 3.0}, part="target"
    )
    assert CostProfile.from_dict(small_profile({8: 1.0}, eager=None)).eager_extrapolated


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            yield from _paths(v, (*prefix, i))


BASE_PROFILE = shipped_profile()
PROFILE_PATHS = [p for p in _paths(BASE_PROFILE) if p]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PROFILE_PATHS), JSON_VALUES)
def test_any_field_replaced_by_any_json_value_is_read_or_refused_with_a_value_error(tmp_path, where, value):
    data = copy.deepcopy(BASE_PROFILE)
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path = write(tmp_path, data)
    try:
        profile = load_plan_profile(path)
    except ValueError as e:
        assert str(e).startswith(str(path))  # the message names the file
        return
    plans = evaluate(profile, load_curve(SHIPPED_CURVE), [1, 64])  # accepted: it must also plan and print
    assert format_table(plans) and check_dominance(plans) == []


def test_costs_so_large_that_tokens_per_second_underflows_still_print(tmp_path):
    data = shipped_profile()
    for d in (data["target"], *(d["profile"] for d in data["drafters"].values())):
        for p in d["points"]:
            p["cost"] = 1e308
        d.pop("eager", None)
    profile = load_plan_profile(write(tmp_path, data))
    plans = evaluate(profile, load_curve(CONFIGS_DIR / "acceptance" / "dspark_seed.json"), [8])
    assert plans[0].fixed[1].tokens_per_s == 0.0  # 1e308 + 1e308 ms overflows to inf
    assert "n/a" in format_table(plans)
    with pytest.raises(ValueError, match="scaling the draft costs by 2.0 overflows"):
        evaluate(profile, load_curve(SHIPPED_CURVE), [8])  # EAGLE-3: K sequential passes, K x 1e308 ms


BASE_CURVE = json.loads((CONFIGS_DIR / "acceptance" / "dspark_seed_mixture.json").read_text())
CURVE_PATHS = [p for p in _paths(BASE_CURVE) if p]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(CURVE_PATHS), JSON_VALUES)
def test_any_curve_field_replaced_by_any_json_value_is_read_or_refused_with_a_value_error(
    tmp_path, where, value
):
    data = copy.deepcopy(BASE_CURVE)
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path = write(tmp_path, data)
    try:
        curve = load_curve(path)
    except ValueError as e:
        assert str(e).startswith(str(path))
        return
    k = curve.max_drafts
    assert curve.survival_matrix(5, k).shape == (5, k) and len(curve.mean_survival()) == k


# -- acceptance curves and bucket files ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, match",
    [
        ({"label": 3}, "label must be a string"),
        ({"notes": [1]}, "notes must be an array of strings"),
        ({"acceptanse": [0.5]}, r"unknown key\(s\) \['acceptanse'\]"),
        ({"classes": [{"weight": 1, "survival": [0.5]}]}, "either classes or a top-level"),
    ],
)
def test_bad_curve_fields(extra, match):
    data = {"format": "ascend-spec/acceptance/v1", "drafter": "d", "acceptance": [0.5], **extra}
    with pytest.raises(ValueError, match=match):
        curve_from_dict(data)


def test_bad_curve_class_fields():
    base = {"format": "ascend-spec/acceptance/v1", "drafter": "d"}
    huge = [{"weight": 1e308, "survival": [0.5]}, {"weight": 1e308, "survival": [0.4]}]
    with pytest.raises(ValueError, match="class weights must have a finite sum"):
        curve_from_dict({**base, "classes": huge})
    with pytest.raises(ValueError, match=r"classes\[0\]: unknown key\(s\) \['wieght'\]"):
        curve_from_dict({**base, "classes": [{"wieght": 1, "survival": [0.5]}]})
    with pytest.raises(ValueError, match=r"classes\[0\].name must be a string"):
        curve_from_dict({**base, "classes": [{"weight": 1, "name": 2, "survival": [0.5]}]})


def test_bucket_file_errors_name_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, {"soc": "x", "target": [1, "2"], "draft": "8"}, "x.json")
    monkeypatch.setattr(buckets_module, "soc_bucket_files", lambda: {"x": path})
    with pytest.raises(ValueError, match=rf"{path}: target: sizes entry must be an int; got '2'"):
        GraphBuckets.for_soc("x")
    with pytest.raises(ValueError, match=rf"{path}: draft must be an array of sizes"):
        GraphBuckets.for_soc("x", "draft")
