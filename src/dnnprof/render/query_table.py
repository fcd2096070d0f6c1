"""The result of ``dnnprof query``: a terminal table, CSV or JSON records. Formats values; computes nothing."""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import sys
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from dnnprof.render.safe_text import clean


def plain(value: Any) -> Any:
    """A query value as JSON can hold it: Decimal → float, dates → ISO text, bytes → text, lists kept."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (_dt.date, _dt.time, _dt.timedelta)):
        return str(value) if isinstance(value, _dt.timedelta) else value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def records(columns: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as ``{column: value}`` records (JSON output)."""
    return [{c: plain(v) for c, v in zip(columns, r, strict=True)} for r in rows]


def write_csv(columns: list[str], rows: list[tuple[Any, ...]], stream: IO[str] | None = None) -> None:
    """Rows as CSV with a header line (empty cells for NULL)."""
    w = csv.writer(stream or sys.stdout, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if v is None else plain(v) for v in r])


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return clean(str(plain(v)))


def render_rows(columns: list[str], rows: list[tuple[Any, ...]], *, total: int | None = None,
                console: Console | None = None) -> None:
    """A rich table of ``rows``; ``total`` rows in all when only the first ones are shown."""
    console = console or Console()
    t = Table(show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(clean(c), overflow="ellipsis", no_wrap=True, min_width=min(len(c), 10))
    for r in rows:
        t.add_row(*(_cell(v) for v in r))
    console.print(t)
    total = len(rows) if total is None else total
    more = f" (first {len(rows)} shown: --max-rows N for more, --csv or --json for all)" if total > len(rows) else ""
    console.print(f"{total} row{'s' if total != 1 else ''}{more}", style="dim")
