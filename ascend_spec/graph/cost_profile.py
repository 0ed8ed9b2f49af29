"""Cost profiles: the measured time of one model part (drafter or target) at each graph bucket.

The cost of running ``n`` tokens is the cost of the bucket ``n`` is padded to: a step function, because a graph
does the same work whatever share of it is padding. Above the largest bucket the part runs eagerly; that cost was
never measured, so it is extrapolated linearly from the two largest buckets (or from an explicit per-token slope)
and every lookup says so (:attr:`CostLookup.extrapolated`).

``CostProfile.measure`` times each bucket at start-up with the device's own timer (CUDA/NPU events around each
call; the wall clock on CPU) and keeps the median. Medians of neighbouring buckets can come out in the wrong order
through noise; since a larger graph is never cheaper to run, the profile keeps the running maximum and records
which points were raised.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ascend_spec.checks import check_int
from ascend_spec.graph.buckets import GraphBuckets
from ascend_spec.graph.config_io import (
    check_keys,
    field_path,
    get_number,
    get_str,
    json_type,
    read_json,
    require_object,
)

PROFILE_FORMAT = "ascend-spec/cost-profile/v1"
#: Where a cost point came from; anything not "measured" is marked in the JSON and the plan report.
ORIGINS = ("measured", "talk", "derived", "interpolated", "assumed", "adjusted")
#: The one cost unit: every consumer reads costs as milliseconds (tokens/s = tokens / cost * 1e3).
UNIT = "ms"
#: ``eager.origin`` values: a slope given by the profile, or the default extrapolation (recomputed on load).
EAGER_GIVEN = "given"
EAGER_EXTRAPOLATED = "extrapolated from the two largest buckets"
_PROFILE_KEYS = ("format", "part", "unit", "source", "points", "eager")
_POINT_KEYS = ("tokens", "cost", "origin")
_EAGER_KEYS = ("per_token", "origin")
#: How ``measure`` reduces the timed runs of one bucket.
STATISTICS = {"median": statistics.median, "min": min}


@dataclass(frozen=True)
class CostLookup:
    """One cost read: the time, the bucket that ran (None when eager) and whether the time is extrapolated."""

    cost: float
    bucket: int | None
    eager: bool
    extrapolated: bool


def _check_cost(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (ms); got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite; got {value!r}")
    if v < 0:
        raise ValueError(f"{name} must not be negative; got {value!r}")
    return v


class CostProfile:
    """Cost (ms) per graph bucket for one model part; ``cost(n)`` reads the bucket ``n`` is padded to.

    ``costs`` maps bucket size (tokens) to cost; sizes must be listed in ascending order and costs must not
    decrease with size (a larger graph is never cheaper; an unsorted or decreasing profile is a mistake and is
    rejected). ``origins`` labels points ("measured", "talk" (a figure from Huawei's talk on DFlash and DSpark in
    vLLM), "derived", "interpolated", "assumed", "adjusted").
    ``eager_per_token`` is the cost of each token above the largest bucket; by default it is the slope between the
    two largest buckets (the only bucket's cost per token when there is one), and marked as extrapolated.
    """

    def __init__(
        self,
        costs: Mapping[int, float],
        *,
        part: str | None = None,
        unit: str = "ms",
        origins: Mapping[int, str] | None = None,
        source: str | None = None,
        eager_per_token: float | None = None,
    ) -> None:
        if unit != UNIT:
            raise ValueError(f"unit must be {UNIT!r} (every cost is read as milliseconds); got {unit!r}")
        if not isinstance(costs, Mapping):
            raise ValueError(f"costs must be a mapping of bucket size -> cost; got {type(costs).__name__}")
        if not costs:
            raise ValueError("costs must not be empty: a profile needs at least one bucket")
        sizes: list[int] = []
        values: list[float] = []
        for size, value in costs.items():
            s = check_int("costs bucket size", size, minimum=1)
            c = _check_cost(f"costs[{s}]", value)
            if sizes and s <= sizes[-1]:
                raise ValueError(
                    f"costs must list bucket sizes in ascending order; got {s} after {sizes[-1]} "
                    f"(sizes {list(costs)})"
                )
            if values and c < values[-1]:
                raise ValueError(
                    f"costs must not decrease with bucket size: {sizes[-1]} tokens cost {values[-1]} "
                    f"but {s} tokens cost {c}"
                )
            sizes.append(s)
            values.append(c)
        self._buckets = GraphBuckets(sizes)
        self._costs = dict(zip(sizes, values))
        self.part = part
        self.unit = unit
        self.source = source
        self.origins: dict[int, str] = {}
        for size, origin in (origins or {}).items():
            s = check_int("origins bucket size", size, minimum=1)
            if s not in self._costs:
                raise ValueError(f"origins names bucket {s}, which is not in costs {sizes}")
            if origin not in ORIGINS:
                raise ValueError(f"origins[{s}] must be one of {ORIGINS}; got {origin!r}")
            self.origins[s] = origin
        if eager_per_token is None:
            self._eager_slope = self._default_slope()
            self.eager_extrapolated = True
        else:
            self._eager_slope = _check_cost("eager_per_token", eager_per_token)
            self.eager_extrapolated = False

    def _default_slope(self) -> float:
        s = self._buckets.sizes
        if len(s) == 1:
            return self._costs[s[0]] / s[0]
        return (self._costs[s[-1]] - self._costs[s[-2]]) / (s[-1] - s[-2])

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def buckets(self) -> GraphBuckets:
        return self._buckets

    @property
    def costs(self) -> dict[int, float]:
        return dict(self._costs)

    @property
    def eager_per_token(self) -> float:
        return self._eager_slope

    def lookup(self, num_tokens: int) -> CostLookup:
        """The cost of ``num_tokens`` with where it came from (bucket, or eager and extrapolated)."""
        bucket = self._buckets.pad(num_tokens)
        if bucket is not None:
            return CostLookup(self._costs[bucket], bucket, eager=False, extrapolated=False)
        top = self._buckets.largest
        extra = self._costs[top] + self._eager_slope * (num_tokens - top)
        return CostLookup(extra, None, eager=True, extrapolated=self.eager_extrapolated)

    def cost(self, num_tokens: int) -> float:
        """Cost (ms) of running ``num_tokens``: the cost of its bucket, or the eager extrapolation above them."""
        return self.lookup(num_tokens).cost

    def per_token(self) -> CostProfile:
        """The profile of an eager part: a point at every token count up to the largest bucket.

        A graph pads its input to the bucket, so tokens inside a bucket are free and the controller only weighs
        bucket fill points. An eager part runs exactly the tokens it gets: between two measured sizes its cost
        grows, here linearly (points labelled "interpolated"); below the smallest size it is the smallest's cost.
        Without this, an eager engine's controller fills buckets whose extra tokens it pays for.
        """
        sizes = self._buckets.sizes
        costs: dict[int, float] = {}
        origins: dict[int, str] = {}
        lo = 0
        for n in range(1, sizes[-1] + 1):
            while sizes[lo] < n:
                lo += 1
            hi_size, hi_cost = sizes[lo], self._costs[sizes[lo]]
            if n == hi_size:
                costs[n] = hi_cost
                if hi_size in self.origins:
                    origins[n] = self.origins[hi_size]
                continue
            if lo == 0:
                costs[n] = hi_cost
            else:
                prev = sizes[lo - 1]
                prev_cost = self._costs[prev]
                costs[n] = prev_cost + (hi_cost - prev_cost) * (n - prev) / (hi_size - prev)
            origins[n] = "interpolated"
        return CostProfile(
            costs,
            part=self.part,
            unit=self.unit,
            origins=origins,
            source=self.source,
            eager_per_token=self._eager_slope,
        )

    def scaled(self, factor: float) -> CostProfile:
        """The same profile with every cost multiplied by ``factor`` (what-if studies, tests)."""
        f = _check_cost("factor", factor)
        costs = {s: c * f for s, c in self._costs.items()}
        if not all(math.isfinite(c) for c in costs.values()):
            raise ValueError(
                f"scaling the {self.part or 'profile'} costs by {f} overflows (largest {max(self._costs.values())} ms)"
            )
        return CostProfile(
            costs,
            part=self.part,
            unit=self.unit,
            origins=self.origins,
            source=self.source,
            eager_per_token=None if self.eager_extrapolated else self._eager_slope * f,
        )

    def __repr__(self) -> str:
        return f"CostProfile(part={self.part!r}, costs={self._costs})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CostProfile)
            and other._costs == self._costs
            and other._eager_slope == self._eager_slope
            and other.eager_extrapolated == self.eager_extrapolated
            and other.part == self.part
            and other.unit == self.unit
            and other.origins == self.origins
            and other.source == self.source
        )

    # -- JSON ----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        points = []
        for s, c in self._costs.items():
            point: dict[str, Any] = {"tokens": s, "cost": c}
            if s in self.origins:
                point["origin"] = self.origins[s]
            points.append(point)
        out: dict[str, Any] = {"format": PROFILE_FORMAT, "part": self.part, "unit": self.unit}
        if self.source is not None:
            out["source"] = self.source
        out["points"] = points
        out["eager"] = {
            "per_token": self._eager_slope,
            "origin": EAGER_EXTRAPOLATED if self.eager_extrapolated else EAGER_GIVEN,
        }
        return out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "profile") -> CostProfile:
        """Read a profile written by :meth:`to_dict`, checking every field's JSON type before building it.

        ``eager`` is optional; when present it is ``{"per_token": number, "origin": "given"}`` (the slope used
        above the largest bucket) or the default extrapolation as :meth:`to_dict` writes it, whose
        ``per_token``, when given, must match the slope the points imply (a stale value is refused rather
        than silently replaced).
        """
        data = require_object(where, data)
        check_keys(where, data, _PROFILE_KEYS)
        fmt = data.get("format")
        if fmt != PROFILE_FORMAT:
            raise ValueError(f"{where}: format must be {PROFILE_FORMAT!r}; got {fmt!r}")
        part = get_str(where, data, "part")
        unit = get_str(where, data, "unit", UNIT)
        source = get_str(where, data, "source")
        points = data.get("points")
        if not isinstance(points, list):
            raise ValueError(
                f"{where}: points must be a list of {{tokens, cost}} objects; got {json_type(points)} {points!r}"
            )
        if not points:
            raise ValueError(f"{where}: points must not be empty")
        costs: dict[int, float] = {}
        origins: dict[int, str] = {}
        for i, p in enumerate(points):
            at = field_path(where, f"points[{i}]")
            if not isinstance(p, Mapping) or "tokens" not in p or "cost" not in p:
                raise ValueError(f"{at} must be an object with 'tokens' and 'cost'; got {p!r}")
            check_keys(at, p, _POINT_KEYS)
            tokens = check_int(f"{at}.tokens", p["tokens"], minimum=1)
            if tokens in costs:
                raise ValueError(f"{at} repeats bucket {tokens}")
            cost = get_number(f"{at}.cost", p["cost"])
            if cost < 0:
                raise ValueError(f"{at}.cost (bucket {tokens}) must not be negative; got {p['cost']!r}")
            costs[tokens] = cost
            if "origin" in p:
                origin = p["origin"]
                if origin not in ORIGINS:
                    raise ValueError(f"{at}.origin must be one of {ORIGINS}; got {origin!r}")
                origins[tokens] = origin
        eager_slope, stated_slope = _read_eager(where, data.get("eager"))
        try:
            profile = cls(
                costs, part=part, unit=unit, origins=origins, source=source, eager_per_token=eager_slope
            )
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if stated_slope is not None and not math.isclose(
            stated_slope, profile.eager_per_token, rel_tol=1e-9, abs_tol=1e-12
        ):
            raise ValueError(
                f"{field_path(where, 'eager.per_token')} is {stated_slope} but the points imply {profile.eager_per_token} "
                f"({EAGER_EXTRAPOLATED}); fix it, or set eager.origin to {EAGER_GIVEN!r} to use it"
            )
        return profile

    def save(self, path: str | Path) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path: str | Path) -> CostProfile:
        path = Path(path)
        data = read_json(path)
        return cls.from_dict(data, where=str(path))

    # -- measuring -----------------------------------------------------------------------------------------
    @classmethod
    def measure(
        cls,
        run_fn: Callable[[int], Any],
        buckets: GraphBuckets | Iterable[int],
        warmup: int = 3,
        repeats: int = 10,
        *,
        device: str | torch.device | None = None,
        part: str | None = None,
        statistic: str = "median",
    ) -> CostProfile:
        """Time ``run_fn(bucket)`` at every bucket and keep the median (ms) of ``repeats`` runs.

        ``statistic="min"`` keeps the fastest run instead: on a shared machine other work only ever adds time,
        so the minimum is the uncontended cost (``ascend-spec e2e`` takes the best of its repeats likewise).

        ``device`` picks the timer: CUDA/NPU events around each call on those devices, the wall clock on CPU.
        By default it is the device of the current accelerator when one is available, else CPU; pass
        ``device="cpu"`` when ``run_fn`` runs on the CPU of a machine that also has an accelerator.
        """
        if not callable(run_fn):
            raise ValueError(f"run_fn must be callable; got {run_fn!r}")
        if not isinstance(buckets, GraphBuckets):
            buckets = GraphBuckets(buckets)
        warmup = check_int("warmup", warmup, minimum=0)
        repeats = check_int("repeats", repeats, minimum=1)
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}; got {statistic!r}")
        reduce = STATISTICS[statistic]
        dev = _timing_device(device)
        medians: dict[int, float] = {}
        for size in buckets:
            for _ in range(warmup):
                run_fn(size)
            medians[size] = reduce(_time_calls(run_fn, size, repeats, dev))
        costs: dict[int, float] = {}
        origins: dict[int, str] = {}
        running = 0.0
        for size, median in medians.items():
            if median < running:  # noise: a larger graph measured faster than a smaller one
                costs[size], origins[size] = running, "adjusted"
            else:
                costs[size], origins[size] = median, "measured"
                running = median
        source = f"CostProfile.measure on {dev}: {statistic} of {repeats} runs after {warmup} warm-up"
        return cls(costs, part=part, origins=origins, source=source)


def _read_eager(where: str, eager: object) -> tuple[float | None, float | None]:
    """(slope to use, or None for the default extrapolation; slope stated next to a default extrapolation)."""
    if eager is None:
        return None, None
    at = field_path(where, "eager")
    eager = require_object(at, eager)
    check_keys(at, eager, _EAGER_KEYS)
    origin = eager.get("origin")
    if origin not in (EAGER_GIVEN, EAGER_EXTRAPOLATED):
        raise ValueError(f"{at}.origin must be {EAGER_GIVEN!r} or {EAGER_EXTRAPOLATED!r}; got {origin!r}")
    if origin == EAGER_GIVEN:
        if "per_token" not in eager:
            raise ValueError(f"{at}.per_token must be given when eager.origin is {EAGER_GIVEN!r}")
        slope = get_number(f"{at}.per_token", eager["per_token"])
        if slope < 0:
            raise ValueError(f"{at}.per_token must not be negative; got {eager['per_token']!r}")
        return slope, None
    if "per_token" not in eager:
        return None, None
    return None, get_number(f"{at}.per_token", eager["per_token"])


def _timing_device(device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return torch.device("npu", npu.current_device())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _time_calls(run_fn: Callable[[int], Any], size: int, repeats: int, device: torch.device) -> list[float]:
    if device.type in ("cuda", "npu"):
        mod = torch.cuda if device.type == "cuda" else torch.npu  # type: ignore[attr-defined]
        pairs = []
        for _ in range(repeats):
            start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
            start.record()
            run_fn(size)
            end.record()
            pairs.append((start, end))
        mod.synchronize(device)
        return [s.elapsed_time(e) for s, e in pairs]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_fn(size)
        times.append((time.perf_counter() - t0) * 1e3)
    return times
