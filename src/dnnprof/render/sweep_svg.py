"""Hand-written SVG line charts for sweep reports (no plotting library, no network, byte-for-byte reproducible).

Why not matplotlib: it is a 30 MB optional dependency for four line charts, its SVG embeds fonts and random ids
(golden tests would churn), and a report must render on the machine that ran the sweep. These charts are plain
``<polyline>``s on a log2 batch-size axis, readable in a browser, a Markdown viewer or an editor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dnnprof.render.safe_text import xml_text as escape  # names may hold control characters XML forbids

#: Okabe–Ito colours (distinguishable with colour-blindness), one per series.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
WIDTH, HEIGHT = 640, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 34, 44

Series = tuple[str, Sequence[tuple[float, float | None]]]


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / max(ticks, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _num(v: float) -> str:
    return f"{v:.1f}"


def line_chart(series: Sequence[Series], *, title: str, y_label: str, x_label: str = "batch size",
               y_fmt: Callable[[float], str] = lambda v: f"{v:g}", hline: tuple[float, str] | None = None,
               y_max: float | None = None) -> str:
    """An SVG line chart of ``(label, [(x, y), …])`` series on a log2 x axis.

    Args:
        series: one line per entry; points with ``y`` None are left out.
        title: chart title.
        y_label: y-axis label (with unit).
        y_fmt: formats y tick labels.
        hline: a dashed horizontal reference line ``(y, label)`` (e.g. the memory limit).
        y_max: fixed top of the y axis (100 for percentages); default: the data's maximum.
    """
    pts: list[tuple[float, float]] = [(x, y) for _, s in series for x, y in s if y is not None and x > 0]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" role="img">',
           f"<title>{escape(title)}</title>",
           f'<text x="{WIDTH / 2:.0f}" y="18" text-anchor="middle" font-size="13" font-weight="bold">'
           f"{escape(title)}</text>"]
    if not pts:
        out.append(f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" fill="#666">'
                   "no data</text></svg>")
        return "\n".join(out)
    lx = [math.log2(x) for x, _ in pts]
    x0, x1 = min(lx), max(lx)
    if x1 - x0 < 1:
        x0, x1 = x0 - 0.5, x1 + 0.5
    top = y_max if y_max is not None else max([y for _, y in pts] + ([hline[0]] if hline else []))
    top = top * 1.05 if y_max is None else top
    if top <= 0:
        top = 1.0
    step = _nice_step(top)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (math.log2(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + ph - (y / top) * ph

    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    y = 0.0
    while y <= top + 1e-9:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{_num(py(y))}" y2="{_num(py(y))}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{_num(py(y) + 4)}" text-anchor="end">{escape(y_fmt(y))}</text>')
        y += step
    every = max(1, math.ceil((math.floor(x1) - math.ceil(x0) + 1) / 10))
    for e in range(math.ceil(x0), math.floor(x1) + 1, every):
        tx = _num(px(2.0**e))
        out.append(f'<line x1="{tx}" x2="{tx}" y1="{TOP}" y2="{TOP + ph}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{tx}" y="{TOP + ph + 16}" text-anchor="middle">{2**e:g}</text>')
    out.append(f'<text x="{LEFT + pw / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)} '
               "(log scale)</text>")
    out.append(f'<text transform="translate(14 {TOP + ph / 2:.0f}) rotate(-90)" text-anchor="middle">'
               f"{escape(y_label)}</text>")
    if hline is not None and hline[0] <= top:
        yy = _num(py(hline[0]))
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{yy}" y2="{yy}" stroke="#c00" stroke-dasharray="5 4"/>')
        out.append(f'<text x="{LEFT + pw - 4}" y="{_num(py(hline[0]) - 4)}" text-anchor="end" fill="#c00">'
                   f"{escape(hline[1])}</text>")
    for i, (label, s) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        good: list[tuple[float, float]] = [(x, y) for x, y in s if y is not None and x > 0]
        if len(good) > 1:
            coords = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in good)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        for x, y in good:
            out.append(f'<circle cx="{_num(px(x))}" cy="{_num(py(y))}" r="3" fill="{color}">'
                       f"<title>{escape(label)}: batch {x:g} → {escape(y_fmt(y))}</title></circle>")
        ly = TOP + 8 + 16 * i
        out.append(f'<line x1="{LEFT + pw + 10}" x2="{LEFT + pw + 28}" y1="{ly}" y2="{ly}" stroke="{color}" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 32}" y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _series(report: dict[str, Any], key: str, scale: float = 1.0) -> list[Series]:
    out: list[Series] = []
    for b in report["batch_size"]:
        rows = [r for r in b["rows"] if r["status"] == "ok"]
        pts = [(float(r["batch_size"]), None if r.get(key) is None else float(r[key]) / scale) for r in rows]
        if any(y is not None for _, y in pts):
            out.append((f"{b['mode']} {b['precision']}", pts))
    return out


def sweep_plots(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The batch-size charts of a sweep report: ``{name: (title, svg)}`` for throughput, busy %, occupancy, memory.

    SM active % and the other GPM figures are in the tables; one chart per question keeps each readable.
    """
    caps = [r.get("memory_capacity_bytes") for b in report["batch_size"] for r in b["rows"]
            if r.get("memory_capacity_bytes")]
    limit = (min(caps) / 2**30, "memory available") if caps else None
    specs = [
        ("throughput", "Throughput vs batch size", "samples/s", _series(report, "throughput_samples_per_s"),
         lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}", None, None),
        ("busy", "GPU busy vs batch size", "GPU busy %", _series(report, "gpu_busy_pct"), lambda v: f"{v:.0f}",
         None, 100.0),
        ("occupancy", "SM occupancy vs batch size (NVML GPM)", "SM occupancy %", _series(report, "sm_occupancy_pct"),
         lambda v: f"{v:.0f}", None, 100.0),
        ("memory", "Peak memory vs batch size", "GiB", _series(report, "peak_memory_bytes", 2.0**30),
         lambda v: f"{v:.1f}", limit, None),
    ]
    out = {}
    for name, title, ylab, series, fmt, hline, ymax in specs:
        out[name] = (title, line_chart(series, title=title, y_label=ylab, y_fmt=fmt, hline=hline, y_max=ymax))
    return out
