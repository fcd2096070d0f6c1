"""``dnnprof monitor`` on the terminal: one panel per GPU for the live view, and the end-of-run summary.

Everything here is drawn from frames, verdicts and summaries computed elsewhere; nothing is measured or judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dnnprof.model.gpu_samples import METRIC_NAMES, METRICS, GpuFrame, GpuInfo
from dnnprof.model.units import bytes_text, pct_text
from dnnprof.render.safe_text import cell, clean, markup

if TYPE_CHECKING:
    from rich.console import RenderableType

    from dnnprof.analysis.live_summary import GpuSummary
    from dnnprof.analysis.live_verdicts import Verdict

#: Rows of the live table: percentages first (with sparklines on a 0–100 scale), then link rates.
LIVE_PCT_ROWS = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct",
                 "fp16_active_pct", "fp32_active_pct", "fp64_active_pct")
LIVE_RATE_ROWS = ("pcie_tx_mib_per_s", "pcie_rx_mib_per_s", "nvlink_tx_mib_per_s", "nvlink_rx_mib_per_s")
GPM_ONLY = frozenset(LIVE_PCT_ROWS[1:] + LIVE_RATE_ROWS)
SPARK_WIDTH = 40
SPARK_WINDOW_S = 60.0
_BLOCKS = "▁▂▃▄▅▆▇█"
LABELS = {name: label for name, label, _ in METRICS}


def metric_text(name: str, v: float | None) -> str:
    """A metric value with its unit, scaled for reading (the unit is the column name's suffix)."""
    if v is None:
        return "-"
    if name.endswith("_pct"):
        return pct_text(v)
    if name.endswith("_mib_per_s"):
        return bytes_text(v * 1024 * 1024) + "/s"
    if name.endswith("_bytes"):
        return bytes_text(v)
    if name.endswith("_w"):
        return f"{v:,.0f} W"
    if name.endswith("_mhz"):
        return f"{v:,.0f} MHz"
    if name.endswith("_c"):
        return f"{v:.0f} °C"
    return f"{v:,.3g}"


def sparkline(points: Sequence[tuple[float, float | None]], end_s: float, *, width: int = SPARK_WIDTH,
              window_s: float = SPARK_WINDOW_S, top: float | None = 100.0) -> str:
    """``(t_s, value)`` points of the last ``window_s`` before ``end_s`` as ``width`` block characters, one per
    time bucket (mean of its points; blank where none). ``top`` fixes the scale (None: the window's maximum)."""
    start = end_s - window_s
    sums = [0.0] * width
    counts = [0] * width
    for t, v in points:
        if v is None or t <= start or t > end_s:
            continue
        i = min(width - 1, int((t - start) / window_s * width))
        sums[i] += v
        counts[i] += 1
    means = [s / c if c else None for s, c in zip(sums, counts, strict=True)]
    hi = top if top is not None else max((m for m in means if m is not None), default=0.0)
    out = []
    for m in means:
        if m is None:
            out.append(" ")
        elif hi <= 0:
            out.append(_BLOCKS[0])
        else:
            out.append(_BLOCKS[max(0, min(len(_BLOCKS) - 1, int(m / hi * (len(_BLOCKS) - 1) + 0.5)))])
    return "".join(out)


def _points(history: Sequence[GpuFrame], name: str) -> list[tuple[float, float | None]]:
    return [(f.t_s, f.values.get(name)) for f in history]


def _mean(history: Sequence[GpuFrame], name: str) -> float | None:
    vals = [v for f in history if (v := f.values.get(name)) is not None]
    return sum(vals) / len(vals) if vals else None


def gpu_panel(info: GpuInfo, history: Sequence[GpuFrame], verdict: Verdict | None) -> RenderableType:
    """One GPU: the metrics now, their last minute as a sparkline and its mean, the device's state, the
    processes on it, and what the numbers mean."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    now = history[-1] if history else None
    values = now.values if now else {}
    end = now.t_s if now else 0.0
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("metric", min_width=12)
    table.add_column("now", justify="right", min_width=11)
    table.add_column(f"last {SPARK_WINDOW_S:.0f} s", min_width=SPARK_WIDTH, no_wrap=True)
    table.add_column("mean", justify="right", min_width=11)
    for name in LIVE_PCT_ROWS + LIVE_RATE_ROWS:
        if name in GPM_ONLY and not info.gpm_supported:
            continue
        top = 100.0 if name.endswith("_pct") else None
        table.add_row(LABELS[name], metric_text(name, values.get(name)),
                      Text(sparkline(_points(history, name), end, top=top), style="cyan"),
                      metric_text(name, _mean(history, name)))
    lines: list[RenderableType] = [table]
    state = (f"memory {metric_text('memory_used_bytes', values.get('memory_used_bytes'))} / "
             f"{metric_text('memory_total_bytes', values.get('memory_total_bytes', info.memory_total_bytes))}"
             f" · power {metric_text('power_w', values.get('power_w'))}"
             f" · clocks SM {metric_text('sm_clock_mhz', values.get('sm_clock_mhz'))}, "
             f"memory {metric_text('mem_clock_mhz', values.get('mem_clock_mhz'))}"
             f" · {metric_text('temperature_c', values.get('temperature_c'))}")
    lines.append(Text(state))
    reasons = now.throttle_reasons if now else ()
    lines.append(Text("clock reasons: " + (", ".join(reasons) if reasons else "none")))
    procs = now.processes if now else ()
    if procs:
        ptable = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for col, just in (("pid", "right"), ("process", "left"), ("user", "left"), ("GPU memory", "right")):
            ptable.add_column(col, justify=just)  # type: ignore[arg-type]
        for p in procs:
            ptable.add_row(str(p.pid), cell(p.name), cell(p.user),
                           bytes_text(p.used_memory_bytes) if p.used_memory_bytes is not None else "not shown")
        lines.append(ptable)
    else:
        lines.append(Text("processes: none"))
    if not info.gpm_supported:
        lines.append(Text(f"note: no GPM ({clean(info.gpm_reason) or 'not available'}): only NVML fields; "
                          "GPU-Util says a kernel ran, not how much of the GPU it used", style="yellow"))
    if verdict is not None:
        lines.append(Text("⇒ " + verdict.words, style="bold"))
        if verdict.slowdowns:
            lines.append(Text(f"⇒ clocks held down: {', '.join(verdict.slowdowns)}", style="bold"))
    title = f"GPU {info.index} · {markup(info.name)}"
    return Panel(Group(*lines), title=title, title_align="left", expand=False)


def live_view(infos: Sequence[GpuInfo], histories: Mapping[int, Sequence[GpuFrame]],
              verdicts: Mapping[int, Verdict | None], footer: str = "") -> RenderableType:
    """Every monitored GPU's panel, then a footer line (what is recorded, how to stop)."""
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = [gpu_panel(i, histories.get(i.index, ()), verdicts.get(i.index))
                                   for i in infos]
    if footer:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)


def summary_view(summaries: Sequence[GpuSummary], infos: Mapping[int, GpuInfo], *, header: str = "",
                 metrics: Sequence[str] = METRIC_NAMES, width: int = 180) -> RenderableType:
    """One screen: a line per GPU (its name and what was recorded), a table of every recorded metric (rows) with
    each GPU's mean and p95 (columns), then per GPU what GPU-Util said against how active the SMs were.

    No cell is ever cut or wrapped: every column keeps the width of its widest cell, and when all GPUs do not fit
    in ``width`` cells they are shown in several tables of as many GPUs as fit (each repeating the metric names).
    """
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = []
    if header:
        parts.append(Text(header))
    if not summaries:
        parts.append(Text("no samples were recorded"))
        return Group(*parts)
    for s in summaries:
        info = infos.get(s.gpu)
        parts.append(Text(f"GPU {s.gpu}: {clean(info.name) if info else '?'}, {s.samples} samples over "
                          f"{s.duration_s:.1f} s"))
    shown = [m for m in metrics if m != "memory_total_bytes"
             and any(s.get(m) is not None for s in summaries)]
    labels = [LABELS.get(m, m) for m in shown]
    cells: list[list[str]] = []  # per GPU: mean and p95 of every shown metric, interleaved
    for s in summaries:
        col: list[str] = []
        for m in shown:
            g = s.get(m)
            col += [metric_text(m, g.mean if g else None), metric_text(m, g.p95 if g else None)]
        cells.append(col)
    per_block = _gpus_per_block(labels, summaries, cells, width)
    blocks = -(-len(summaries) // per_block)
    per_block = -(-len(summaries) // blocks)  # as even as the blocks can be: 4 GPUs in 2 + 2, not 3 + 1
    for b in range(0, len(summaries), per_block):
        parts.append(_summary_table(labels, summaries[b:b + per_block], cells[b:b + per_block]))
    for s in summaries:
        util, sm = s.get("gpu_util_pct"), s.get("sm_active_pct")
        if util is not None and sm is not None:
            parts.append(Text(f"GPU {s.gpu}: GPU-Util said {util.mean:.0f} %, SMs were actually {sm.mean:.1f} % "
                              "active", style="bold"))
        elif util is not None:
            parts.append(Text(f"GPU {s.gpu}: GPU-Util said {util.mean:.0f} %; no GPM on this GPU, so how many SMs "
                              "were active is unknown", style="bold"))
    return Group(*parts)


#: Between two columns of the summary table: a space of padding on each side and the (blank) rule; and its two
#: blank edges (SIMPLE_HEAD box, no edge padding).
_BETWEEN, _EDGES = 3, 2


def _column_widths(labels: Sequence[str], summaries: Sequence[GpuSummary],
                   cells: Sequence[Sequence[str]]) -> tuple[int, list[tuple[int, int]]]:
    """The metric column's width and each GPU's (mean, p95) widths: the widest header or cell of each."""
    from rich.cells import cell_len

    label_w = max(cell_len(x) for x in ["metric", *labels])
    out = []
    for s, col in zip(summaries, cells, strict=True):
        mean_w = max(cell_len(x) for x in [f"GPU {s.gpu} mean", *col[0::2]])
        p95_w = max(cell_len(x) for x in [f"GPU {s.gpu} p95", *col[1::2]])
        out.append((mean_w, p95_w))
    return label_w, out


def _gpus_per_block(labels: Sequence[str], summaries: Sequence[GpuSummary], cells: Sequence[Sequence[str]],
                    width: int) -> int:
    """How many GPUs' columns fit beside the metric names in ``width`` cells (at least one)."""
    label_w, gpu_w = _column_widths(labels, summaries, cells)
    used, n = _EDGES + label_w, 0
    for mean_w, p95_w in gpu_w:
        used += mean_w + p95_w + 2 * _BETWEEN
        if used > width:
            break
        n += 1
    return max(1, n)


def _summary_table(labels: Sequence[str], summaries: Sequence[GpuSummary],
                   cells: Sequence[Sequence[str]]) -> RenderableType:
    from rich import box
    from rich.table import Table

    label_w, gpu_w = _column_widths(labels, summaries, cells)
    t = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    t.add_column("metric", no_wrap=True, min_width=label_w)
    for s, (mean_w, p95_w) in zip(summaries, gpu_w, strict=True):
        t.add_column(f"GPU {s.gpu} mean", justify="right", no_wrap=True, min_width=mean_w)
        t.add_column(f"GPU {s.gpu} p95", justify="right", no_wrap=True, min_width=p95_w)
    for r, label in enumerate(labels):
        row = [label]
        for col in cells:
            row += [col[2 * r], col[2 * r + 1]]
        t.add_row(*row)
    return t
