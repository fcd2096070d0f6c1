"""Terminal tables of an nvprof summary (``dnnprof.nvprof-summary/1``), laid out like nvprof's own."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from dnnprof.model.units import pct_text, us_text
from dnnprof.render.safe_text import cell, clean_doc, markup


def _table(title: str, rows: list[dict[str, Any]], top: int, name_key: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("Time %", "Time", "Calls", "Avg", "Min", "Max", "Name"):
        t.add_column(col, justify="left" if col == "Name" else "right", no_wrap=True, overflow="ellipsis",
                     max_width=80 if col == "Name" else None)
    for r in rows[:top]:
        t.add_row(*map(cell, (pct_text(r["time_pct"]), us_text(r["total_us"]), f"{r['calls']:,}",
                              us_text(r["avg_us"]), us_text(r["min_us"]), us_text(r["max_us"]), r[name_key])))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more rows (--top, --json)"
    return t


def render_nvprof_summary(doc: dict[str, Any], console: Console | None = None, top: int = 15) -> None:
    """Print the GPU activities and API calls tables; names and paths show literally (no markup, no control
    characters)."""
    doc = clean_doc(doc)
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 160)
    src = markup(doc["source"]["path"])
    if doc["gpu_activities"]:
        console.print(_table(f"nvprof summary: GPU activities ({src})", doc["gpu_activities"], top, "short_name"))
    if doc["api_calls"]:
        console.print(_table(f"nvprof summary: API calls ({src})", doc["api_calls"], top, "name"))
