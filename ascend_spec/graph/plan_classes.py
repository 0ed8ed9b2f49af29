"""Request classes for ``ascend-spec plan``: a batch made of several kinds of request, each with its own curve.

Real batches mix requests a drafter serves well (repetitive or easy text) with requests it serves badly; a
per-request verify budget pays exactly there. ``--class CURVE:SHARE`` (repeatable) names one acceptance curve per
class and the share of the batch its requests take. The rules, stated once (docs/controller.md repeats them):

- Shares are finite and > 0 and must sum to 1 within :data:`SHARE_SUM_TOLERANCE` (so 0.333 x 3 is accepted);
  they are then divided by their sum. Anything else is refused, never silently rescaled.
- Every class's curve names the same drafter: one engine runs one drafter, and its cost profile prices the step.
  The batch plans up to the shortest class curve's length.
- Rows: class c takes n_c of the B rows of the survival matrix by the largest remainder of B x share_c (ties to
  the earlier class); then every class left with no row takes one from the class holding the most rows (ties to
  the later class). So every class has at least one row, and B must be at least the number of classes. Where
  B x share_c are all integers (B = 64, 128, 256 with halves), n_c = B x share_c exactly.
- A class's n_c rows come from its curve's own :meth:`~ascend_spec.graph.acceptance.AcceptanceCurve.survival_matrix`
  (a curve file that itself holds weighted sub-classes splits its rows by its own rule), so one class of share 1
  is exactly the single-curve plan.

Fixed K then verifies K drafts for every row: expected tokens are B + sum over classes of n_c (p_1 + ... + p_K) of
that class, i.e. B times the share-weighted 1 + p_1 + ... + p_K at the batch's realised shares n_c / B. The dynamic
plan runs the :class:`~ascend_spec.graph.controller.BudgetController` on the same matrix, so fixed K stays one of
its candidates and dynamic >= best fixed K >= ... holds by construction; it may give the classes different lengths,
and :class:`ClassBatch` reports the mean drafts verified per request of each class.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ascend_spec.graph.acceptance import AcceptanceCurve

SHARE_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ClassArg:
    """One ``--class CURVE:SHARE`` as typed: the curve (a file or a shipped name) and its share."""

    curve: str
    share: float


def class_arg(text: str) -> ClassArg:
    """An argparse type for ``--class``: ``CURVE:SHARE`` with a finite share > 0 (split at the last colon)."""
    curve, sep, share_text = text.rpartition(":")
    if not sep or not curve:
        raise argparse.ArgumentTypeError(
            f"must be CURVE:SHARE (an acceptance curve file or shipped name, a colon, its share of the batch, "
            f"e.g. dspark_talk:0.5); got {text!r}"
        )
    try:
        share = float(share_text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the share after the last colon must be a number in (0, 1]; got {share_text!r} in {text!r}"
        ) from None
    if not (math.isfinite(share) and 0 < share <= 1):
        raise argparse.ArgumentTypeError(
            f"the share must be a number in (0, 1]; got {share_text!r} in {text!r}"
        )
    return ClassArg(curve, share)


@dataclass(frozen=True)
class RequestClassSpec:
    """One class of the batch: its name (the curve file's stem, numbered if repeated), curve, file and share."""

    name: str
    curve: AcceptanceCurve
    path: str
    share: float  # normalised: the shares of a mix sum to 1


@dataclass(frozen=True)
class ClassMix:
    """The batch's classes; :meth:`rows` and :meth:`survival_matrix` follow the module docstring's rules."""

    classes: tuple[RequestClassSpec, ...]

    @property
    def drafter(self) -> str:
        return self.classes[0].curve.drafter

    @property
    def max_drafts(self) -> int:
        return min(c.curve.max_drafts for c in self.classes)

    def rows(self, num_reqs: int) -> list[int]:
        """Rows per class in a batch of ``num_reqs``: largest remainder, then at least one row per class."""
        n = len(self.classes)
        if num_reqs < n:
            raise ValueError(
                f"a batch of {num_reqs} cannot give each of the {n} classes a request; every batch size must be "
                f">= {n}"
            )
        exact = [c.share * num_reqs for c in self.classes]
        counts = [math.floor(x) for x in exact]
        order = sorted(range(n), key=lambda i: (-(exact[i] - counts[i]), i))
        for i in order[: num_reqs - sum(counts)]:
            counts[i] += 1
        for i in range(n):
            if counts[i] == 0:
                donor = max(range(n), key=lambda j: (counts[j], j))
                counts[donor] -= 1
                counts[i] += 1
        return counts

    def survival_matrix(self, num_reqs: int, max_drafts: int) -> tuple[torch.Tensor, list[int]]:
        """[num_reqs, max_drafts] float64 survivals, class by class, and the rows per class."""
        counts = self.rows(num_reqs)
        parts = [c.curve.survival_matrix(n, max_drafts) for c, n in zip(self.classes, counts)]
        return torch.cat(parts, dim=0), counts

    def mean_survival(self, max_drafts: int) -> list[float]:
        """The share-weighted mean survival p_1..p_K (each class's own mean, weighted by its share)."""
        means = [c.curve.mean_survival()[:max_drafts] for c in self.classes]
        return [sum(c.share * m[i] for c, m in zip(self.classes, means)) for i in range(max_drafts)]


def build_mix(specs: list[tuple[str, str, AcceptanceCurve, float]]) -> ClassMix:
    """A :class:`ClassMix` from (argument text, file, curve, share) per ``--class``: the shares checked against
    the sum rule and normalised, every curve checked to name the first one's drafter; a ValueError naming the
    ``--class`` argument otherwise."""
    if not specs:
        raise ValueError("--class: give at least one CURVE:SHARE")
    total = math.fsum(share for *_, share in specs)
    if abs(total - 1.0) > SHARE_SUM_TOLERANCE:
        listed = " + ".join(f"{share:g}" for *_, share in specs)
        raise ValueError(
            f"--class: the shares must sum to 1 (within {SHARE_SUM_TOLERANCE:g}); got {listed} = {total:g}"
        )
    first_arg, _, first_curve, _ = specs[0]
    seen: dict[str, int] = {}
    classes = []
    for text, path, curve, share in specs:
        if curve.drafter != first_curve.drafter:
            raise ValueError(
                f"--class {text}: its curve is for drafter {curve.drafter!r}, but --class {first_arg} is for "
                f"{first_curve.drafter!r}; a batch runs one drafter, so every class's curve must name the same one"
            )
        stem = Path(path).stem
        seen[stem] = seen.get(stem, 0) + 1
        name = stem if seen[stem] == 1 else f"{stem}#{seen[stem]}"
        classes.append(RequestClassSpec(name, curve, path, share / total))
    return ClassMix(tuple(classes))


@dataclass
class ClassBatch:
    """One class at one batch size: its rows, fixed-K tokens per request, and the dynamic plan's lengths."""

    name: str
    rows: int
    fixed_tokens_per_request: dict[int, float]  # K -> 1 + p_1 + ... + p_K averaged over the class's rows
    dynamic_mean_drafts: float  # drafts verified per request of this class in the dynamic plan
    dynamic_min_drafts: int
    dynamic_max_drafts: int


def class_batches(
    mix: ClassMix, surv: torch.Tensor, counts: list[int], lengths: list[int]
) -> list[ClassBatch]:
    """Per-class view of one batch: ``surv`` and ``lengths`` (drafts per request) in the mix's row order."""
    out = []
    start = 0
    for c, n in zip(mix.classes, counts):
        rows = surv[start : start + n]
        mine = lengths[start : start + n]
        fixed = {k: 1.0 + float(rows[:, :k].sum()) / n for k in range(1, surv.shape[1] + 1)}
        out.append(ClassBatch(c.name, n, fixed, sum(mine) / n, min(mine), max(mine)))
        start += n
    return out


def class_rows(per_batch: list[list[ClassBatch]]) -> list[list[str]]:
    """Rows for the plan table: per class, its requests in the batch and the dynamic plan's mean drafts."""
    rows = []
    for i, first in enumerate(per_batch[0]):
        rows.append([f"  {first.name} rows"] + [str(batch[i].rows) for batch in per_batch])
        rows.append(
            [f"  {first.name} mean K"] + [f"{batch[i].dynamic_mean_drafts:.2f}" for batch in per_batch]
        )
    return rows
