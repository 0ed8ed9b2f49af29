"""CostProfile: the step function, eager extrapolation, JSON round trips, measure(), bad profiles."""

import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph import CostProfile, GraphBuckets
from ascend_spec.paths import CONFIGS_DIR

PROFILE = CostProfile({32: 10.0, 64: 12.0, 128: 16.0, 192: 21.0})


def test_step_function_reads_the_padded_bucket():
    assert PROFILE.cost(1) == PROFILE.cost(32) == 10.0
    assert PROFILE.cost(33) == PROFILE.cost(64) == 12.0
    assert PROFILE.cost(65) == 16.0  # the talk's "budget 65 needs the next graph"
    assert PROFILE.cost(160) == PROFILE.cost(184) == PROFILE.cost(192) == 21.0
    lk = PROFILE.lookup(100)
    assert (lk.bucket, lk.eager, lk.extrapolated) == (128, False, False)
    assert PROFILE.buckets == GraphBuckets([32, 64, 128, 192])


def test_eager_above_the_largest_bucket_is_extrapolated_and_marked():
    slope = (21.0 - 16.0) / (192 - 128)
    lk = PROFILE.lookup(256)
    assert lk.eager and lk.extrapolated and lk.bucket is None
    assert lk.cost == pytest.approx(21.0 + slope * 64)
    assert PROFILE.eager_per_token == pytest.approx(slope)
    one = CostProfile({100: 50.0})
    assert one.cost(150) == pytest.approx(75.0)  # a single bucket: its cost per token
    given_slope = CostProfile({100: 50.0}, eager_per_token=1.0)
    lk = given_slope.lookup(110)
    assert lk.eager and not lk.extrapolated and lk.cost == 60.0


@pytest.mark.parametrize(
    "costs, match",
    [
        ({}, "costs must not be empty"),
        ({64: 2.0, 32: 1.0}, "ascending order; got 32 after 64"),
        ({32: 5.0, 64: 3.0}, "must not decrease with bucket size: 32 tokens cost 5.0 but 64 tokens cost 3.0"),
        ({32: -1.0}, r"costs\[32\] must not be negative; got -1.0"),
        ({32: float("nan")}, r"costs\[32\] must be finite"),
        ({32: float("inf")}, r"costs\[32\] must be finite"),
        ({0: 1.0}, "costs bucket size must be >= 1; got 0"),
        ({32: "fast"}, r"costs\[32\] must be a number"),
        ({32: True}, r"costs\[32\] must be a number"),
    ],
)
def test_bad_profiles(costs, match):
    with pytest.raises(ValueError, match=match):
        CostProfile(costs)


def test_bad_profile_arguments():
    with pytest.raises(ValueError, match="costs must be a mapping"):
        CostProfile([(32, 1.0)])
    with pytest.raises(ValueError, match="origins names bucket 16, which is not in costs"):
        CostProfile({32: 1.0}, origins={16: "talk"})
    with pytest.raises(ValueError, match=r"origins\[32\] must be one of"):
        CostProfile({32: 1.0}, origins={32: "guessed"})
    with pytest.raises(ValueError, match="eager_per_token must not be negative"):
        CostProfile({32: 1.0}, eager_per_token=-1.0)
    with pytest.raises(ValueError, match="num_tokens must be >= 1; got 0"):
        PROFILE.cost(0)


@st.composite
def profiles(draw):
    sizes = sorted(draw(st.sets(st.integers(1, 4096), min_size=1, max_size=8)))
    steps = draw(st.lists(st.floats(0, 100, allow_nan=False), min_size=len(sizes), max_size=len(sizes)))
    costs, total = {}, 0.0
    for s, d in zip(sizes, steps):
        total += d
        costs[s] = total
    origins = {s: draw(st.sampled_from(["measured", "talk", "assumed"])) for s in sizes}
    slope = draw(st.one_of(st.none(), st.floats(0, 1, allow_nan=False)))
    return CostProfile(
        costs,
        part=draw(st.sampled_from([None, "target", "draft"])),
        origins=origins,
        source=draw(st.one_of(st.none(), st.text(max_size=20))),
        eager_per_token=slope,
    )


@settings(max_examples=40, deadline=None)
@given(profiles())
def test_json_round_trip(tmp_path_factory, profile):
    path = tmp_path_factory.mktemp("p") / "profile.json"
    profile.save(path)
    again = CostProfile.load(path)
    assert again == profile
    assert again.to_dict() == profile.to_dict()
    for n in (1, profile.buckets.largest, profile.buckets.largest + 7):
        assert again.lookup(n) == profile.lookup(n)


@pytest.mark.parametrize(
    "data, match",
    [
        ([], "must be a JSON object"),
        ({"format": "v0", "points": []}, "format must be 'ascend-spec/cost-profile/v1'"),
        ({"format": "ascend-spec/cost-profile/v1", "points": []}, "points must not be empty"),
        ({"format": "ascend-spec/cost-profile/v1", "points": {"32": 1}}, "points must be a list"),
        (
            {"format": "ascend-spec/cost-profile/v1", "points": [{"tokens": 32}]},
            r"points\[0\] must be an object",
        ),
        (
            {
                "format": "ascend-spec/cost-profile/v1",
                "points": [{"tokens": 64, "cost": 1}, {"tokens": 32, "cost": 2}],
            },
            "ascending order; got 32 after 64",
        ),
        (
            {
                "format": "ascend-spec/cost-profile/v1",
                "points": [{"tokens": 32, "cost": 1}, {"tokens": 32, "cost": 2}],
            },
            r"points\[1\] repeats bucket 32",
        ),
        (
            {"format": "ascend-spec/cost-profile/v1", "points": [{"tokens": 32, "cost": -2}]},
            "must not be negative",
        ),
    ],
)
def test_bad_json_profiles(tmp_path, data, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        CostProfile.load(path)


def test_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        CostProfile.load(path)


def test_measure_on_cpu_takes_the_median_with_the_wall_clock():
    calls = []

    def run(n):
        calls.append(n)
        time.sleep(n * 1e-4)

    prof = CostProfile.measure(run, [4, 16, 32], warmup=2, repeats=3, device="cpu", part="target")
    assert calls == [4] * 5 + [16] * 5 + [32] * 5
    assert prof.buckets.sizes == (4, 16, 32) and prof.part == "target"
    for n in (4, 16, 32):
        assert n * 0.1 <= prof.cost(n) < n * 0.1 + 200.0  # ms; sleep never returns early
        assert prof.origins[n] == "measured"
    assert "median of 3 runs" in prof.source


def test_measure_raises_noisy_inversions_to_the_running_maximum(monkeypatch):
    import ascend_spec.graph.cost_profile as module

    class FakeClock:  # deterministic: each call "takes" its bucket's delay in seconds
        now = 0.0

        @classmethod
        def perf_counter(cls):
            return cls.now

    delays = {1: 0.004, 2: 0.001, 3: 0.006}

    def run(n):
        FakeClock.now += delays[n]

    monkeypatch.setattr(module, "time", FakeClock)
    prof = CostProfile.measure(run, [1, 2, 3], warmup=0, repeats=3, device="cpu")
    assert prof.costs == pytest.approx({1: 4.0, 2: 4.0, 3: 6.0})
    assert prof.origins == {1: "measured", 2: "adjusted", 3: "measured"}


def test_measure_bad_arguments():
    with pytest.raises(ValueError, match="run_fn must be callable"):
        CostProfile.measure(None, [1])
    with pytest.raises(ValueError, match="repeats must be >= 1; got 0"):
        CostProfile.measure(lambda n: None, [1], repeats=0, device="cpu")
    with pytest.raises(ValueError, match="sizes must not be empty"):
        CostProfile.measure(lambda n: None, [], device="cpu")


def test_shipped_talk_profile_is_labelled():
    data = json.loads((CONFIGS_DIR / "profiles" / "talk_ascend910b.json").read_text())
    target = CostProfile.from_dict(data["target"])
    assert target.cost(256 * 6) == 230.0 and target.origins[1536] == "talk"  # BS=256, 5 candidates
    assert target.cost(256 * 10) == 330.0 and target.origins[2560] == "talk"  # BS=256, 9 candidates
    assert target.cost(256) == pytest.approx(256 / 2411 * 1e3, abs=0.05) and target.origins[256] == "derived"
    assert set(target.origins.values()) == {"talk", "derived", "interpolated", "assumed"}
    assert len(target.origins) == len(target.costs)  # every point says where it came from
    assert "FIGURES FROM THE TALK" in target.source
    for name, d in data["drafters"].items():
        prof = CostProfile.from_dict(d["profile"])
        assert set(prof.origins.values()) == {"assumed"}, name
        assert math.isfinite(prof.cost(10**6))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=6, unique=True).map(sorted),
    st.lists(st.floats(0.0, 10.0), min_size=6, max_size=6),
)
def test_per_token_is_the_linear_interpolation_of_the_measured_points(sizes, steps):
    costs, acc = {}, 0.0
    for s, d in zip(sizes, steps):
        acc += d
        costs[s] = acc
    profile = CostProfile(costs, part="target", origins={sizes[0]: "measured"}, eager_per_token=0.5)
    dense = profile.per_token()
    assert dense.buckets.sizes == tuple(range(1, sizes[-1] + 1))
    for n in range(1, sizes[-1] + 1):
        above = min(s for s in sizes if s >= n)
        below = [s for s in sizes if s < n]
        if n == above or not below:
            want = costs[above]
        else:
            lo = below[-1]
            want = costs[lo] + (costs[above] - costs[lo]) * (n - lo) / (above - lo)
        assert dense.cost(n) == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert dense.origins.get(n) == ("interpolated" if n not in costs else profile.origins.get(n))
    assert dense.cost(sizes[-1] + 5) == pytest.approx(costs[sizes[-1]] + 5 * 0.5)  # the eager slope is kept
