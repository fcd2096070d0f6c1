"""Hand-written SVG roofline of a ``roofline`` object (summary or counters JSON): log-log, no plotting library.

Drawn from the document only: a compute roof per FLOP precision that some plotted kernel is dominated by (roofs
with the same peak share a line), the DRAM slope up to the highest ridge point, the ridge points, one circle per
kernel (area ∝ share of GPU time, colour = bound class) and the top kernels' short names. Kernels without FLOPs or
DRAM bytes cannot sit on log axes; the legend counts them. Output is byte-for-byte reproducible (no ids, fixed
number formats), like :mod:`dnnprof.render.sweep_svg`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dnnprof.render.safe_text import xml_text as escape  # names may hold control characters XML forbids
from dnnprof.render.sweep_svg import PALETTE

WIDTH, HEIGHT = 820, 480
LEFT, RIGHT, TOP, BOTTOM = 64, 196, 34, 46
#: Bound class → colour (Okabe–Ito, as the sweep charts); kernels without a class are grey.
BOUND_COLOURS = {"compute": PALETTE[1], "memory": PALETTE[0], "balanced": PALETTE[2], "high-throughput": PALETTE[3],
                 "latency": PALETTE[4], "small-grid": PALETTE[5], "": "#999999"}
BOUND_LABELS = {"compute": "compute", "memory": "memory", "balanced": "balanced", "high-throughput": "high throughput",
                "latency": "latency", "small-grid": "small grid", "": "no class (no SM%/Mem%)"}
PRECISION_LABELS = {"fp64": "FP64", "fp32": "FP32", "fp16": "FP16", "tensor_fp64": "FP64 tensor",
                    "tensor_tf32": "TF32 tensor", "tensor_fp16": "FP16 tensor", "tensor_bf16": "BF16 tensor",
                    "tensor_fp8": "FP8 tensor"}
EXCLUDED_LABELS = {"no_flops": "without FLOPs", "no_dram_bytes": "without DRAM bytes", "no_time": "without time"}
ROOF_COLOUR, RIDGE_COLOUR = "#222222", "#777777"
LABELLED = 5  #: kernels named on the chart, by share of GPU time
LABEL_CHARS = 28  #: longer short names lose their middle
CHAR_PX = 5.8  #: rough width of one character at font-size 10, for label placement
MIN_DECADES, MAX_DECADES = 2.0, 7.5  #: axis spans (decades)
_SI = ("", "k", "M", "G", "T", "P", "E")


def _n(v: float) -> str:
    return f"{v:.1f}"


def _si(v: float, digits: int = 3) -> str:
    """``1.07e15`` → ``"1.07 P"`` (a unit follows), ``66.8`` → ``"66.8 "``."""
    if v <= 0 or not math.isfinite(v):
        return f"{v:g} "
    i = max(0, min(len(_SI) - 1, math.floor(math.log10(v) / 3)))
    return f"{v / 10 ** (3 * i):.{digits}g} {_SI[i]}"


def _decade_label(e: int, si: bool) -> str:
    if si and e >= 0:
        return f"{10 ** (e % 3)}{_SI[min(e // 3, len(_SI) - 1)]}"
    return f"{10.0 ** e:g}" if -3 <= e <= 4 else f"1e{e}"


def _range(values: list[float], pad_lo: float, pad_hi: float) -> tuple[float, float]:
    """log10 bounds around ``values``: padded, at least :data:`MIN_DECADES` wide and at most :data:`MAX_DECADES`
    (the top is kept: roofs and the heaviest kernels live there; points below are drawn at the edge)."""
    lo, hi = math.log10(min(values)) - pad_lo, math.log10(max(values)) + pad_hi
    if hi - lo < MIN_DECADES:
        lo = hi - MIN_DECADES
    return max(lo, hi - MAX_DECADES), hi


def _roofs(roof: dict[str, Any]) -> list[tuple[float, str, float | None]]:
    """(peak FLOP/s, label, ridge FLOP/byte) per line, highest first: the precisions that dominate a plotted kernel
    (every known one when nothing is plotted); precisions with one peak share a line."""
    compute = roof["ceilings"]["compute"]
    used = [p for p, c in compute.items() if c.get("kernels") and c.get("peak_flops_per_s")]
    if not used and not roof.get("plotted"):
        used = [p for p, c in compute.items() if c.get("peak_flops_per_s")]
    lines: list[tuple[float, list[str], float | None]] = []
    for p in used:
        c = compute[p]
        peak = float(c["peak_flops_per_s"])
        same = next((ln for ln in lines if math.isclose(ln[0], peak, rel_tol=1e-6)), None)
        if same is not None:
            same[1].append(PRECISION_LABELS.get(p, p))
        else:
            lines.append((peak, [PRECISION_LABELS.get(p, p)], c.get("ridge_flops_per_byte")))
    return [(pk, " / ".join(names), ridge) for pk, names, ridge in sorted(lines, key=lambda x: -x[0])]


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


@dataclass(frozen=True)
class _Frame:
    """The plot area and its log10 ranges."""

    x0: float
    x1: float
    y0: float
    y1: float

    @property
    def width(self) -> float:
        return WIDTH - LEFT - RIGHT

    @property
    def height(self) -> float:
        return HEIGHT - TOP - BOTTOM

    def px(self, x: float) -> float:
        return LEFT + (math.log10(x) - self.x0) / (self.x1 - self.x0) * self.width

    def py(self, y: float) -> float:
        return TOP + self.height - (math.log10(y) - self.y0) / (self.y1 - self.y0) * self.height

    def clamp(self, x: float, y: float) -> tuple[float, float, bool]:
        """Pixel position of (x, y), pulled onto the frame when outside it, and whether it was."""
        cx = min(max(x, 10.0**self.x0), 10.0**self.x1)
        cy = min(max(y, 10.0**self.y0), 10.0**self.y1)
        return self.px(cx), self.py(cy), (cx, cy) != (x, y)


class _Labels:
    """First-fit placement of text boxes inside the plot, clear of the circles and of earlier labels."""

    def __init__(self, obstacles: list[Box]) -> None:
        self.taken = list(obstacles)

    def place(self, candidates: list[Box]) -> Box:
        def fits(b: Box) -> bool:
            inside = (b[0] >= LEFT + 2 and b[2] <= WIDTH - RIGHT - 2 and b[1] >= TOP + 2
                      and b[3] <= HEIGHT - BOTTOM - 2)
            return inside and not any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3]
                                      for o in self.taken)

        box = next((b for b in candidates if fits(b)), None) or next(
            (b for b in candidates if b[0] >= LEFT and b[2] <= WIDTH - RIGHT), candidates[0])
        self.taken.append(box)
        return box


def roofline_svg(roof: dict[str, Any], *, title: str | None = None, labels: int = LABELLED) -> str:
    """The roofline chart of a ``roofline`` JSON object as an SVG string.

    Args:
        roof: the ``roofline`` object of a summary (``dnnprof.summary/1``) or counters (``dnnprof.counters/1``)
            document.
        title: chart title (default: "Roofline — <device>").
        labels: how many kernels (largest share of GPU time first) get their short name next to the point.
    """
    title = title or f"Roofline — {roof.get('device') or 'GPU'}"
    bw = roof["ceilings"].get("dram_bytes_per_s")
    roofs = _roofs(roof)
    pts = [k for k in roof["kernels"] if k.get("plotted")]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" role="img">',
           f"<title>{escape(title)}</title>",
           f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="20" text-anchor="middle" font-size="13" '
           f'font-weight="bold">{escape(title)}</text>']
    xs = [float(k["arithmetic_intensity"]) for k in pts] + [r for _, _, r in roofs if r and bw]
    ys = [float(k["achieved_flops_per_s"]) for k in pts] + [p for p, _, _ in roofs]
    if not xs or not ys:
        out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" '
                   'fill="#666666">no kernel with FLOPs and DRAM bytes</text>')
        out += _legend(roof, pts, 0, bool(roofs), bool(bw))
        out.append("</svg>")
        return "\n".join(out)
    f = _Frame(*_range(xs, 0.3, 0.5), *_range(ys, 0.3, 0.45))
    placed = _place_points(pts, f)
    boxes = _Labels([(x - r, y - r, x + r, y + r) for _, x, y, r, _ in placed])
    out += _axes(f)
    out += _roof_lines(roofs, bw, f, boxes)
    out += _points(placed)
    out += _point_labels(placed, labels, boxes)
    out += _legend(roof, pts, sum(off for *_, off in placed), bool(roofs), bool(bw))
    out.append("</svg>")
    return "\n".join(out)


def _axes(f: _Frame) -> list[str]:
    out = [f'<rect x="{LEFT}" y="{TOP}" width="{_n(f.width)}" height="{_n(f.height)}" fill="none" '
           'stroke="#999999"/>']
    for e in range(math.ceil(f.x0), math.floor(f.x1) + 1):
        tx = _n(f.px(10.0**e))
        out.append(f'<line x1="{tx}" x2="{tx}" y1="{TOP}" y2="{_n(TOP + f.height)}" stroke="#eeeeee"/>')
        out.append(f'<text x="{tx}" y="{_n(TOP + f.height + 15)}" text-anchor="middle">'
                   f"{_decade_label(e, False)}</text>")
    for e in range(math.ceil(f.y0), math.floor(f.y1) + 1):
        ty = f.py(10.0**e)
        out.append(f'<line x1="{LEFT}" x2="{_n(LEFT + f.width)}" y1="{_n(ty)}" y2="{_n(ty)}" stroke="#eeeeee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{_n(ty + 4)}" text-anchor="end">{_decade_label(e, True)}</text>')
    out.append(f'<text x="{LEFT + f.width / 2:.0f}" y="{HEIGHT - 10}" text-anchor="middle">arithmetic intensity '
               "(FLOP per DRAM byte, log scale)</text>")
    out.append(f'<text transform="translate(14 {TOP + f.height / 2:.0f}) rotate(-90)" text-anchor="middle">'
               "achieved FLOP/s (log scale)</text>")
    return out


def _roof_lines(roofs: list[tuple[float, str, float | None]], bw: float | None, f: _Frame, labels: _Labels
                ) -> list[str]:
    """Compute roofs (from their ridge point rightwards), the DRAM slope and the ridge points, labelled."""
    out: list[str] = []
    xl, xr, bottom = 10.0**f.x0, 10.0**f.x1, TOP + f.height
    right = f.px(xr)
    for peak, label, ridge in roofs:
        x, y = f.px(max(ridge, xl) if bw and ridge else xl), f.py(peak)
        out.append(f'<line x1="{_n(x)}" x2="{_n(right)}" y1="{_n(y)}" y2="{_n(y)}" stroke="{ROOF_COLOUR}" '
                   f'stroke-width="1.5"><title>{escape(label)} peak {_si(peak)}FLOP/s</title></line>')
    if bw:
        top_peak = max((p for p, _, r in roofs if r), default=None)
        end = min(top_peak / bw, xr) if top_peak else xr
        start = max(xl, 10.0**f.y0 / bw)
        if start < end:
            out.append(f'<line x1="{_n(f.px(start))}" x2="{_n(f.px(end))}" y1="{_n(f.py(start * bw))}" '
                       f'y2="{_n(f.py(end * bw))}" stroke="{ROOF_COLOUR}" stroke-width="1.5">'
                       f"<title>DRAM {_si(bw)}B/s</title></line>")
            lx = 10 ** (math.log10(start) + 0.15 * (math.log10(end) - math.log10(start)))  # label along the slope
            angle = math.degrees(math.atan2(f.py(lx * bw * 10) - f.py(lx * bw), f.px(lx * 10) - f.px(lx)))
            out.append(f'<text transform="translate({_n(f.px(lx))} {_n(f.py(lx * bw) - 5)}) rotate({angle:.1f})" '
                       f'fill="{ROOF_COLOUR}">DRAM {_si(bw)}B/s</text>')
        for peak, label, ridge in roofs:
            if not ridge or not xl <= ridge <= xr:
                continue
            x, y = f.px(ridge), f.py(peak)
            out.append(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(y + 4)}" y2="{_n(bottom)}" '
                       f'stroke="{RIDGE_COLOUR}" stroke-dasharray="3 3"/>')
            out.append(f'<path d="M{_n(x)},{_n(y - 4)} L{_n(x + 4)},{_n(y)} L{_n(x)},{_n(y + 4)} '
                       f'L{_n(x - 4)},{_n(y)} Z" fill="#ffffff" stroke="{ROOF_COLOUR}"><title>ridge point of '
                       f"{escape(label)}: {ridge:.4g} FLOP/byte</title></path>")
            text = f"ridge {ridge:.3g}"
            out.append(f'<text transform="translate({_n(x - 3)} {_n(bottom - 4)}) rotate(-90)" font-size="9" '
                       f'fill="{RIDGE_COLOUR}">{escape(text)}</text>')
            labels.taken.append((x - 12, bottom - 4 - 5 * len(text), x - 2, bottom - 4))
    for peak, label, ridge in roofs:  # names last: they go where no circle or other text is
        x, y = f.px(max(ridge, xl) if bw and ridge else xl), f.py(peak)
        text = f"{label} {_si(peak)}FLOP/s"
        w, h = CHAR_PX * 1.1 * len(text), 12.0
        starts = [x + 8, right - 4 - w, (x + right - w) / 2]
        box = labels.place([(sx, y - h - 1, sx + w, y - 1) for sx in starts]
                           + [(sx, y + 1, sx + w, y + h + 1) for sx in starts])
        out.append(f'<text x="{_n(box[0])}" y="{_n(box[3] - 3)}" fill="{ROOF_COLOUR}">{escape(text)}</text>')
    return out


def _radius(time_pct: float | None) -> float:
    return 3.0 + 11.0 * math.sqrt(max(0.0, min(100.0, time_pct or 0.0)) / 100.0)


def _short(name: str) -> str:
    """At most :data:`LABEL_CHARS` characters; long names keep their head and tail (tile shapes live there)."""
    if len(name) <= LABEL_CHARS:
        return name
    head = LABEL_CHARS // 3
    return name[:head] + "…" + name[len(name) - (LABEL_CHARS - 1 - head):]


Placed = tuple[dict[str, Any], float, float, float, bool]  # kernel, x, y, radius, off-scale


def _place_points(pts: list[dict[str, Any]], f: _Frame) -> list[Placed]:
    """Each plotted kernel's circle, heaviest first."""
    order = sorted(pts, key=lambda k: (-(k.get("time_pct") or 0.0), k["name"]))
    out: list[Placed] = []
    for k in order:
        x, y, off = f.clamp(float(k["arithmetic_intensity"]), float(k["achieved_flops_per_s"]))
        out.append((k, x, y, _radius(k.get("time_pct")), off))
    return out


def _points(placed: list[Placed]) -> list[str]:
    """Kernel circles, largest first so small ones stay visible on top; hollow at the frame's edge when off-scale."""
    out = []
    for k, x, y, r, off in placed:
        colour = BOUND_COLOURS.get(k.get("bound") or "", BOUND_COLOURS[""])
        roof = "" if k.get("pct_of_roof") is None else (
            f", {k['pct_of_roof']:.1f}% of the {PRECISION_LABELS.get(k.get('dominant_precision') or '', '?')} "
            f"{'DRAM' if k.get('limiting_roof') == 'dram' else 'compute'} roof")
        tip = (f"{k['short_name']}: {k['arithmetic_intensity']:.4g} FLOP/byte, "
               f"{_si(float(k['achieved_flops_per_s']))}FLOP/s{roof}; {k.get('time_pct') or 0:.2f}% of GPU time, "
               f"{k['launches']} launches, bound: {k.get('bound') or '–'}"
               f"{' (off-scale, drawn at the edge)' if off else ''}")
        style = ('fill="#ffffff" fill-opacity="0.9" stroke-dasharray="2 1.5"' if off
                 else f'fill="{colour}" fill-opacity="0.7"')
        out.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" {style} stroke="{colour}">'
                   f"<title>{escape(tip)}</title></circle>")
    return out


def _point_labels(placed: list[Placed], n: int, labels: _Labels) -> list[str]:
    """The short names of the ``n`` heaviest kernels next to their circles, or further off with a leader line
    when the neighbourhood is full."""
    out = []
    h = 11.0
    for k, x, y, r, _ in placed[:n]:
        text = _short(k["short_name"])
        w = CHAR_PX * len(text)
        near = [(x + r + 2, y - h / 2), (x - r - 2 - w, y - h / 2), (x + r + 2, y - r - h), (x + r + 2, y + r),
                (x - r - 2 - w, y - r - h), (x - r - 2 - w, y + r), (x - w / 2, y - r - h - 2), (x - w / 2, y + r + 2)]
        far = [(sx, y + sign * (r + i * h) - (h if sign < 0 else 0)) for i in range(1, 9) for sign in (1, -1)
               for sx in (x - w / 2, x - w + r, x - r, x - r - 2 - w, x + r + 2)]
        box = labels.place([(sx, sy, sx + w, sy + h) for sx, sy in near + far])
        if (box[0], box[1]) not in near:
            ly = box[1] if box[1] > y else box[3]
            lx = min(max(x, box[0]), box[2])
            out.append(f'<line x1="{_n(x)}" y1="{_n(y + (r if ly > y else -r))}" x2="{_n(lx)}" y2="{_n(ly)}" '
                       'stroke="#888888" stroke-width="0.8"/>')
        out.append(f'<text x="{_n(box[0])}" y="{_n(box[3] - 2)}" font-size="10">{escape(text)}</text>')
    return out


def _legend(roof: dict[str, Any], pts: list[dict[str, Any]], off_scale: int, roofs: bool, dram: bool) -> list[str]:
    x = WIDTH - RIGHT + 14
    y = TOP + 8
    out = [f'<text x="{x}" y="{y}" font-weight="bold">bound class</text>']
    present = {k.get("bound") or "" for k in pts}
    for b, colour in BOUND_COLOURS.items():
        if b not in present:
            continue
        y += 16
        out.append(f'<circle cx="{x + 5}" cy="{y - 4}" r="5" fill="{colour}" fill-opacity="0.7" stroke="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{y}">{escape(BOUND_LABELS[b])}</text>')
    y += 22
    out.append(f'<text x="{x}" y="{y}">circle area: share of GPU time</text>')
    if roofs:
        y += 18
        out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{ROOF_COLOUR}" '
                   'stroke-width="1.5"/>')
        out.append(f'<text x="{x + 24}" y="{y}">{"roofs: compute, DRAM" if dram else "compute roofs"}</text>')
    if roofs and dram:
        y += 16
        out.append(f'<path d="M{x + 9},{y - 8} L{x + 13},{y - 4} L{x + 9},{y} L{x + 5},{y - 4} Z" fill="#ffffff" '
                   f'stroke="{ROOF_COLOUR}"/>')
        out.append(f'<text x="{x + 24}" y="{y}">ridge point</text>')
    y += 22
    out.append(f'<text x="{x}" y="{y}">{len(pts)} kernels plotted</text>')
    if off_scale:
        y += 15
        out.append(f'<text x="{x}" y="{y}" fill="#666666">{off_scale} off-scale (hollow, at the edge)</text>')
    for reason, n in (roof.get("excluded") or {}).items():
        if n:
            y += 15
            out.append(f'<text x="{x}" y="{y}" fill="#666666">{n} {escape(EXCLUDED_LABELS.get(reason, reason))} '
                       "not shown</text>")
    return out
