"""Terminal report of a ``dnnprof.diff/1`` document (rich). Reads the diff; computes nothing new."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dnnprof.model.units import bytes_text, pct_text, us_text
from dnnprof.render.evidence import gain_text
from dnnprof.render.safe_text import cell, clean_doc, markup


def _change(pair: dict[str, Any], fmt: Any = us_text) -> str:
    if pair.get("base") is None and pair.get("new") is None:
        return "-"
    text = f"{fmt(pair.get('base'))} → {fmt(pair.get('new'))}"
    if pair.get("ratio") is not None:
        text += f" ({pair['ratio']:.2f}×)"
    return text


def _delta(us: float) -> Text:
    sign = "+" if us > 0 else "−" if us < 0 else "±"
    return Text(f"{sign}{us_text(abs(us))}", style="red" if us > 0 else "green" if us < 0 else "dim")


def _rows(title: str, rows: list[dict[str, Any]], top: int) -> Table:
    t = Table(title=f"{title} (per step, largest change first)", title_justify="left")
    for col, just in (("Change", "right"), ("Base", "right"), ("New", "right"), ("", "left"), ("Name", "left")):
        t.add_column(col, justify=just, overflow="fold" if col == "Name" else "ellipsis")  # type: ignore[arg-type]
    for r in rows[:top]:
        note = {"gone": Text("gone", style="green"), "new": Text("new", style="yellow")}.get(r["status"], Text())
        t.add_row(_delta(r["delta_us_per_step"]), cell(us_text(r["base_us_per_step"])),
                  cell(us_text(r["new_us_per_step"])), note, cell(r["label"]))
    return t


def render_diff(doc: dict[str, Any], console: Console | None = None, top: int = 10) -> None:
    """Print the diff; names and paths show literally (no markup, no control characters)."""
    console = console or Console()
    doc = clean_doc(doc)
    b, n = doc["base"], doc["new"]
    console.print(f"[bold]base[/] {markup(b['source'])} ({markup(b['device'] or 'no GPU')}, {markup(b['steps'])} "
                  f"steps)\n[bold]new[/]  {markup(n['source'])} ({markup(n['device'] or 'no GPU')}, "
                  f"{markup(n['steps'])} steps)")
    step = doc["step_time_median_us"]
    line = f"step time (median): {_change(step)}"
    if step.get("speedup") is not None:
        line += f" — {step['speedup']:.2f}× {'faster' if step['speedup'] >= 1 else 'as fast'}"
    console.print(line)
    if doc.get("throughput"):
        unit = markup(doc["throughput"].get("unit") or "items/s")
        console.print(f"throughput: {_change(doc['throughput'], lambda v: '-' if v is None else f'{v:,.1f} {unit}')}")
    g = doc["gpu"]
    console.print(f"GPU busy: {_change(g['busy_pct'], pct_text)}; kernels per step: {_change(g['kernel_us_per_step'])}; "
                  f"idle per step: {_change(g['idle_us_per_step'])}; tensor cores: "
                  f"{_change(g['tensor_core_pct'], pct_text)}")
    if g.get("collectives_only_pct"):
        console.print(f"collectives alone (transfer, or waiting for other ranks): "
                      f"{_change(g['collectives_only_pct'], pct_text)} of the window")
    if doc.get("peak_allocated_bytes"):
        console.print(f"peak allocated: {_change(doc['peak_allocated_bytes'], bytes_text)}")
    phases = ", ".join(f"{markup(k)} {_change(v)}" for k, v in doc["phases_us_per_step"].items()
                       if v["base"] or v["new"])
    if phases:
        console.print(f"phases per step: {phases}")
    for title, key in (("Kernel families", "families"), ("Layers", "layers"), ("Kernels", "kernels")):
        if doc[key]:
            console.print(_rows(title, doc[key], top))
    f = doc["findings"]

    def gain(x: dict[str, Any]) -> str:
        g = x.get("est_gain_pct", x.get("base_est_gain_pct"))
        return f" (expected gain {gain_text(g)})" if g and g > 0 else ""

    for label, key, style in (("resolved", "resolved", "green"), ("new", "new", "yellow"),
                              ("still there", "persisting", "dim")):
        if f[key]:
            console.print(f"[{style}]findings {label}:[/] " + ", ".join(markup(x["id"]) + gain(x) for x in f[key]))
