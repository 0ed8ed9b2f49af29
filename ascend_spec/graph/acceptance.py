"""Acceptance curves for planning: per-position acceptance of one drafter, turned into survival matrices.

A curve file gives, per draft position i, either the conditional acceptance a_i (the chance position i is accepted
given that every earlier one was; the seed's per-position plot) or the survival p_i = a_1 ... a_i directly.
Optionally it holds several request classes with weights (e.g. easy and hard prompts): real batches mix requests
of different difficulty, which is what a per-request budget exploits; a single class plans for the average.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ascend_spec.graph.config_io import (
    check_keys,
    field_path,
    get_str,
    get_str_list,
    read_json,
    require_object,
)

CURVE_FORMAT = "ascend-spec/acceptance/v1"
_CURVE_KEYS = ("format", "drafter", "label", "notes", "acceptance", "survival", "classes")
_CLASS_KEYS = ("weight", "name", "acceptance", "survival")


@dataclass(frozen=True)
class RequestClass:
    weight: float
    survival: tuple[float, ...]  # p_1 .. p_K, non-increasing, in [0, 1]


@dataclass(frozen=True)
class AcceptanceCurve:
    drafter: str
    label: str
    classes: tuple[RequestClass, ...]

    @property
    def max_drafts(self) -> int:
        return min(len(c.survival) for c in self.classes)

    def mean_survival(self) -> list[float]:
        total = sum(c.weight for c in self.classes)
        k = self.max_drafts
        return [sum(c.weight * c.survival[i] for c in self.classes) / total for i in range(k)]

    def class_counts(self, num_reqs: int) -> list[int]:
        """Requests per class in a batch of ``num_reqs`` (largest remainder; ties to the earlier class)."""
        total = sum(c.weight for c in self.classes)
        exact = [c.weight / total * num_reqs for c in self.classes]
        counts = [math.floor(x) for x in exact]
        order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
        for i in order[: num_reqs - sum(counts)]:
            counts[i] += 1
        return counts

    def survival_matrix(self, num_reqs: int, max_drafts: int | None = None) -> torch.Tensor:
        """[num_reqs, K] float64 survivals: each class's curve repeated for its share of the batch."""
        k = self.max_drafts if max_drafts is None else max_drafts
        if k > self.max_drafts:
            raise ValueError(f"max_drafts {k} exceeds the curve's {self.max_drafts} positions ({self.label})")
        rows = []
        for c, n in zip(self.classes, self.class_counts(num_reqs)):
            rows.extend([c.survival[:k]] * n)
        return torch.tensor(rows, dtype=torch.float64).reshape(num_reqs, k)


def _probabilities(where: str, values: Any) -> list[float]:
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where} must be a non-empty list of probabilities; got {values!r}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{where}[{i}] must be a probability in [0, 1]; got {v!r}")
        out.append(float(v))
    return out


def _class_survival(where: str, data: Mapping) -> tuple[float, ...]:
    if ("acceptance" in data) == ("survival" in data):
        raise ValueError(f"{where} must give exactly one of 'acceptance' (conditional) or 'survival'")
    if "acceptance" in data:
        surv, p = [], 1.0
        for a in _probabilities(field_path(where, "acceptance"), data["acceptance"]):
            p *= a
            surv.append(p)
        return tuple(surv)
    surv = _probabilities(field_path(where, "survival"), data["survival"])
    for i in range(1, len(surv)):
        if surv[i] > surv[i - 1]:
            raise ValueError(
                f"{field_path(where, 'survival')} must not increase; got {surv[i - 1]} then {surv[i]} at {i}"
            )
    return tuple(surv)


def curve_from_dict(data: Any, *, where: str = "acceptance curve") -> AcceptanceCurve:
    data = require_object(where, data)
    if data.get("format") != CURVE_FORMAT:
        raise ValueError(f"{where}: format must be {CURVE_FORMAT!r}; got {data.get('format')!r}")
    check_keys(where, data, _CURVE_KEYS)
    drafter = data.get("drafter")
    if not isinstance(drafter, str) or not drafter:
        raise ValueError(f"{where}: drafter must name the drafter (e.g. 'dspark'); got {drafter!r}")
    label = get_str(where, data, "label", drafter) or drafter
    get_str_list(where, data, "notes")
    if "classes" in data:
        if "acceptance" in data or "survival" in data:
            raise ValueError(f"{where}: give either classes or a top-level 'acceptance'/'survival', not both")
        raw = data["classes"]
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"{where}: classes must be a non-empty list; got {raw!r}")
        classes = []
        for i, c in enumerate(raw):
            at = field_path(where, f"classes[{i}]")
            c = require_object(at, c)
            check_keys(at, c, _CLASS_KEYS)
            get_str(at, c, "name")
            w = c.get("weight")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0 or not math.isfinite(w):
                raise ValueError(f"{at}.weight must be a positive number; got {w!r}")
            classes.append(RequestClass(float(w), _class_survival(at, c)))
        if not math.isfinite(sum(c.weight for c in classes)):
            raise ValueError(
                f"{where}: the class weights must have a finite sum; got {[c.weight for c in classes]}"
            )
    else:
        classes = [RequestClass(1.0, _class_survival(where, data))]
    return AcceptanceCurve(drafter, label, tuple(classes))


def load_curve(path: str | Path) -> AcceptanceCurve:
    path = Path(path)
    data = read_json(path)
    return curve_from_dict(data, where=str(path))


def uniform_tokens(curve_survival: Sequence[float], k: int) -> float:
    """Expected tokens per request when every request verifies k drafts: 1 + p_1 + ... + p_k."""
    return 1.0 + sum(curve_survival[:k])
