"""Terminal table of Nsight Compute counters per kernel (``dnnprof.counters/1``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dnnprof.model.units import rate_text
from dnnprof.render.safe_text import cell, clean_doc, markup


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render_counters(doc: dict[str, Any], console: Console | None = None, top: int = 15) -> None:
    """Print the counters table; names and paths show literally (no markup, no control characters)."""
    doc = clean_doc(doc)
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 180)
    t = Table(title=f"Nsight Compute counters: {doc['launches']} launches, {len(doc['kernels'])} kernels "
                    f"({markup(doc['source']['path'])})", title_justify="left")
    for col in ("Time %", "Total µs", "Launches", "SM %", "Mem %", "Ach. occ %", "Waves", "DRAM B/launch",
                "FLOP/launch", "AI", "Bound", "Kernel"):
        t.add_column(col, justify="left" if col in ("Bound", "Kernel") else "right", no_wrap=True,
                     overflow="ellipsis", max_width=64 if col == "Kernel" else None)
    for k in doc["kernels"][:top]:
        t.add_row(*map(cell, (_f(k["pct"]), _f(k["total_us"], "{:,.1f}"), str(k["launches"]), _f(k["sm_throughput_pct"]),
                  _f(k["memory_throughput_pct"]), _f(k["achieved_occupancy_pct"]), _f(k["waves_per_sm"], "{:.2f}"),
                  _f(k["dram_bytes"], "{:,.0f}"), _f(k["flops"], "{:,.0f}"), _f(k["arithmetic_intensity"], "{:.2f}"),
                  k["bound"] or "-", k["short_name"])))
    console.print(t)
    shares = ", ".join(f"{b} {v:.0f}%" for b, v in doc["bound_share_pct"].items())
    src = doc.get("throughput_source") or {}
    if "parts" in src.values() or "mixed" in src.values():
        shares += " (SM % and Mem %: the maximum of their parts, dnnprof's cheaper ncu metric list)"
    console.print(Text(f"time by bound class: {shares}"))
    roof = doc.get("roofline")
    if roof:
        console.print(Text(roofline_line(roof)))


def roofline_line(roof: dict[str, Any]) -> str:
    """One line on the roofline: the DRAM ceiling, the ceilings of the precisions that dominate a plotted kernel
    with their ridge points, and how many kernels are plotted or left off."""
    c = roof["ceilings"]
    parts = [f"DRAM {rate_text(c.get('dram_bytes_per_s'), 'B/s', missing='?')} ({c.get('dram_source') or '?'})"]
    for p, v in c["compute"].items():
        if v.get("kernels"):
            parts.append(f"{p} {rate_text(v['peak_flops_per_s'], 'FLOP/s', missing='?')} ({v.get('source')}, ridge "
                         f"{_f(v.get('ridge_flops_per_byte'), '{:.3g}')} FLOP/B, {v['kernels']} kernels)")
    ex = roof.get("excluded") or {}
    words = {"no_flops": "without FLOPs", "no_dram_bytes": "without DRAM bytes", "no_time": "without time"}
    left = ", ".join(f"{n} {words.get(r, r)}" for r, n in ex.items() if n)
    return (f"roofline: {'; '.join(parts)}; {roof.get('plotted', 0)} kernels plotted"
            + (f" ({left} not plotted)" if left else ""))
