"""Comparison with plain decoding and the e2e table (text and JSON)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ascend_spec.e2e.engine import EngineRun

# Where plain decoding's top-2 logit margin is within this many bf16 ulps of its top logit (and at least
# within BF16_TIE_FLOOR), a bf16 model may legitimately pick either token: speculative and plain kernels
# accumulate in different orders and round hidden states to 8 significant bits at every layer, so logits near 0
# still differ by the rounding of their inputs (at |logit| ~ 10 one ulp is 0.0625).
BF16_TIE_ULPS = 4
BF16_TIE_FLOOR = 0.125


def bf16_ulp(x: float) -> float:
    """Spacing of bf16 numbers at ``x`` (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(abs(x))) - 7) if x != 0 else 2.0**-133


@dataclass(frozen=True)
class Divergence:
    """First token index where a run differs from plain decoding, and plain decoding's top-2 logits there."""

    index: int
    margin: float  # top-1 minus top-2 logit of plain decoding (inf when plain ran without logits)
    top_logit: float = math.inf

    @property
    def is_tie(self) -> bool:
        if not math.isfinite(self.top_logit):
            return False
        return self.margin <= max(BF16_TIE_ULPS * bf16_ulp(self.top_logit), BF16_TIE_FLOOR)


def first_divergences(plain: EngineRun, other: EngineRun) -> list[Divergence | None]:
    """Per prompt: None where ``other`` equals plain decoding token for token, else the first difference."""
    out: list[Divergence | None] = []
    for i, (want, got) in enumerate(zip(plain.tokens, other.tokens)):
        idx = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if idx is None and len(want) != len(got):
            idx = min(len(want), len(got))
        if idx is None:
            out.append(None)
            continue
        margin, top = math.inf, math.inf
        if plain.top2 and idx < len(plain.top2[i]):
            top, second = plain.top2[i][idx]
            margin = top - second
        out.append(Divergence(idx, margin, top))
    return out


@dataclass
class Row:
    mode: str
    method: str
    run: EngineRun
    divergences: list[Divergence | None] | None = None

    def as_dict(self, plain_tps: float | None) -> dict:
        r = self.run
        return {
            "mode": self.mode,
            "method": self.method,
            "error": r.error,
            "tokens_per_s": round(r.tokens_per_second, 2),
            "vs_plain": round(r.tokens_per_second / plain_tps, 3) if plain_tps and not r.error else None,
            "tokens_per_cpu_s": round(r.tokens_per_cpu_second, 2),
            "cpu_seconds": round(r.cpu_seconds, 4),
            "accepted_per_position": [round(x, 3) for x in r.acceptance_rate_per_position],
            "mean_acceptance_length": r.mean_acceptance_length,
            "mean_verify_length": r.mean_verify_length,
            "gdn_state_bytes_per_request": r.gdn_state_bytes_per_request,
            "gdn_state_slots_per_request": r.gdn_slots_per_request,
            "preemptions": r.num_preemptions,
            "divergences": None
            if self.divergences is None
            else [
                None if d is None else {"index": d.index, "plain_top2_margin": d.margin}
                for d in self.divergences
            ],
        }


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _fmt_div(divs: list[Divergence | None] | None) -> str:
    if divs is None:
        return "-"
    parts = []
    for d in divs:
        if d is None:
            parts.append("=")
        else:
            margin = "inf" if math.isinf(d.margin) else f"{d.margin:.3f}"
            parts.append(f"{d.index}@{margin}{'(tie)' if d.is_tie else ''}")
    return " ".join(parts)


def _vs_upstream(row: Row, rows: list[Row]) -> str:
    """The plugin's tok/s and tok/CPU-s over upstream's for the same method (``wall/cpu``), else ``-``."""
    if row.mode != "ascend-spec":
        return "-"
    up = next((r for r in rows if r.mode == "upstream" and r.method == row.method), None)
    if up is None or up.run.error or not up.run.tokens_per_second or not up.run.tokens_per_cpu_second:
        return "-"
    wall = row.run.tokens_per_second / up.run.tokens_per_second
    cpu = row.run.tokens_per_cpu_second / up.run.tokens_per_cpu_second
    return f"{wall:.2f}/{cpu:.2f}"


def format_table(rows: list[Row]) -> str:
    plain = next((r for r in rows if r.mode == "plain"), None)
    plain_tps = plain.run.tokens_per_second if plain and not plain.run.error else None
    header = [
        "mode",
        "method",
        "tok/s",
        "vs plain",
        "tok/CPU-s",
        "vs upstream",
        "accepted/pos",
        "accept len",
        "verify len",
        "GDN B/req (slots)",
        "first divergence per prompt (index@plain top-2 logit margin, = same)",
    ]
    lines = [header]
    for row in rows:
        r = row.run
        if r.error:
            lines.append([row.mode, row.method, "failed", "-", "-", "-", "-", "-", "-", "-", r.error[:160]])
            continue
        state = (
            "-"
            if r.gdn_state_bytes_per_request is None
            else f"{r.gdn_state_bytes_per_request} ({r.gdn_slots_per_request})"
        )
        lines.append(
            [
                row.mode,
                row.method,
                f"{r.tokens_per_second:.1f}",
                _fmt(r.tokens_per_second / plain_tps if plain_tps else None),
                f"{r.tokens_per_cpu_second:.1f}",
                _vs_upstream(row, rows),
                ",".join(f"{x:.2f}" for x in r.acceptance_rate_per_position) or "-",
                _fmt(r.mean_acceptance_length),
                _fmt(r.mean_verify_length),
                state,
                _fmt_div(row.divergences),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        cells = [c.ljust(w) for c, w in zip(line[:-1], widths)] + [line[-1]]
        out.append(" | ".join(cells))
    out.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 20)
    return "\n".join(out)
