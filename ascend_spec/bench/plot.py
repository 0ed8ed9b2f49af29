"""``ascend-spec bench --plot``: one chart of the table, since a chart reads faster than the metrics column.

Left: speedup of each op over its baseline, one bar per case (log scale, 1x marked). Right: the op's achieved
bandwidth, (bytes read + written) / time as the case reports them, against the device's nominal peak where the
device reports one and the measured copy bandwidth (:mod:`ascend_spec.bench.bandwidth`); rows that report no
bytes are marked n/a.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ascend_spec.bench.bandwidth import DeviceBandwidth
from ascend_spec.bench.core import BenchRow


def achieved_gbs(row: BenchRow) -> float | None:
    """GB/s of the op: ``bytes_moved``, else ``bytes_read + bytes_written``, over its time; None without bytes."""
    m = row.metrics
    if "bytes_moved" in m:
        nbytes = float(m["bytes_moved"])
    elif "bytes_read" in m or "bytes_written" in m:
        nbytes = float(m.get("bytes_read", 0)) + float(m.get("bytes_written", 0))
    else:
        return None
    return nbytes / (row.time_ms * 1e6) if row.time_ms > 0 else None


def _gbs(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def plot_rows(
    rows: Sequence[BenchRow], path: Path, *, device: torch.device, bandwidth: DeviceBandwidth | None
) -> None:
    """Write the chart of ``rows`` to ``path`` (any format matplotlib writes, by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    if not rows:
        raise ValueError("no bench rows to plot")
    ops = list(dict.fromkeys(r.op for r in rows))
    colors = {op: plt.get_cmap("tab10")(i % 10) for i, op in enumerate(ops)}
    n = len(rows)
    y = list(range(n))[::-1]  # first row at the top, as in the table
    fig, (ax_s, ax_b) = plt.subplots(
        1, 2, figsize=(15, 2.4 + 0.42 * n), sharey=True, gridspec_kw={"width_ratios": [1, 1]}
    )
    bar_colors = [colors[r.op] for r in rows]

    speedups = [r.speedup for r in rows]
    ax_s.barh(y, speedups, color=bar_colors, height=0.7)
    ax_s.set_xscale("log")
    ax_s.axvline(1.0, color="black", linewidth=1)
    for yi, s in zip(y, speedups):
        ax_s.annotate(
            f"{s:.2f}x", (s, yi), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8
        )
    ax_s.set_xlim(min(min(speedups), 1.0) / 2, max(max(speedups), 1.0) * 4)
    ax_s.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_s.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax_s.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax_s.set_xlabel("speedup over the baseline (log; 1x = as fast)")
    ax_s.set_yticks(y, [r.case for r in rows], fontsize=8)
    ax_s.set_title("speedup per op and case", fontsize=10)

    gbs = [achieved_gbs(r) for r in rows]
    known = [g for g in gbs if g]
    peak, peak_name = None, ""
    if bandwidth is not None:
        peak = bandwidth.nominal_gbs or bandwidth.copy_gbs
        peak_name = "peak" if bandwidth.nominal_gbs else "measured copy"
    ax_b.barh(y, [g or 0.0 for g in gbs], color=bar_colors, height=0.7)
    ax_b.set_xscale("log")
    refs = [v for v in (bandwidth.nominal_gbs, bandwidth.copy_gbs) if v] if bandwidth else []
    lo = min(known + refs, default=1.0) / 4
    hi = max(known + refs, default=1.0) * 8
    ax_b.set_xlim(lo, hi)
    ax_b.xaxis.set_major_locator(
        ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if hi / lo < 1e3 else (1.0,))
    )
    ax_b.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax_b.xaxis.set_minor_formatter(ticker.NullFormatter())
    for yi, g in zip(y, gbs):
        if not g:
            ax_b.annotate(
                "n/a (no bytes reported)",
                (lo, yi),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="gray",
            )
            continue
        text = f"{_gbs(g)} GB/s" + (f" ({100 * g / peak:.2g}% of {peak_name})" if peak else "")
        ax_b.annotate(text, (g, yi), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax_b.set_xlabel("achieved bandwidth, (bytes read + written) / time, GB/s (log)")
    ax_b.set_title("achieved bandwidth against the device's peak", fontsize=10)
    handles: list = [plt.Rectangle((0, 0), 1, 1, color=colors[op]) for op in ops]
    impls = {op: ", ".join(sorted({r.impl for r in rows if r.op == op})) for op in ops}
    labels = [f"{op} ({impls[op]})" for op in ops]
    if bandwidth is not None:
        if bandwidth.nominal_gbs:
            handles.append(ax_b.axvline(bandwidth.nominal_gbs, color="red", linewidth=1.5))
            labels.append(f"nominal peak {_gbs(bandwidth.nominal_gbs)} GB/s ({bandwidth.nominal_source})")
        handles.append(ax_b.axvline(bandwidth.copy_gbs, color="black", linestyle="--", linewidth=1.2))
        why = "" if bandwidth.nominal_gbs else f"; {device.type} reports no nominal peak"
        labels.append(f"measured copy {_gbs(bandwidth.copy_gbs)} GB/s (read + write of a large buffer{why})")
    for ax in (ax_s, ax_b):
        ax.grid(axis="x", which="both", alpha=0.25)
    ncol = 3
    legend_rows = -(-len(handles) // ncol)
    height = fig.get_figheight()
    bottom = (0.1 + 0.2 * legend_rows) / height
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(f"ascend-spec bench on {device} (torch {torch.__version__})", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
