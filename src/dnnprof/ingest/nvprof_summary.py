"""nvprof ``--csv --print-summary`` output → per-name rows of GPU activities and API calls (no timeline).

Layout (nvprof's documented CSV mode): ``==<pid>==`` lines (and program output) first, then the header row
``"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"``, then a units row (``"","%","ms","","us","us","us",""``)
that gives the unit of each time column, then one row per name with Type ``GPU activities`` or ``API calls``. Some
nvprof versions repeat the header and units row before the API calls; each block is read with its own units.
Times are scaled to µs with the units row.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from dnnprof.ingest.errors import TraceError

HEADER = ["Type", "Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"]
_TIME_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}
_TYPES = {"GPU activities": "gpu_activities", "API calls": "api_calls"}


@dataclass
class SummaryRow:
    name: str
    time_pct: float
    total_us: float
    calls: int
    avg_us: float
    min_us: float
    max_us: float


@dataclass
class NvprofSummary:
    path: Path
    gpu_activities: list[SummaryRow] = field(default_factory=list)
    api_calls: list[SummaryRow] = field(default_factory=list)


def is_nvprof_summary(head: bytes) -> bool:
    """True for the start of an nvprof ``--print-summary`` CSV (its header, and no gpu-trace header)."""
    return b'"Type","Time(%)"' in head and b'"Start","Duration"' not in head


def read_nvprof_summary(path: str | Path) -> NvprofSummary:
    """Rows of an nvprof summary CSV, times in µs. Raises TraceError (one line) for a malformed file."""
    path = Path(path)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    rows = list(csv.reader(io.StringIO("\n".join(s for s in lines if not s.startswith("==")))))
    out = NvprofSummary(path)
    i = next((k for k, r in enumerate(rows) if r[:2] == HEADER[:2]), None)
    if i is None:
        raise TraceError(f"{path}: nvprof output without a --print-summary table (\"Type\",\"Time(%)\",…)")
    scale: dict[str, float] = {}
    while i < len(rows):
        r = rows[i]
        i += 1
        if not r or not any(x.strip() for x in r):
            continue
        if r[:2] == HEADER[:2]:
            if r != HEADER:
                raise TraceError(f"{path}: line {_line(lines, i - 1)}: summary header has columns {r}, expected "
                                 f"{HEADER}")
            units = rows[i] if i < len(rows) else []
            if len(units) != len(HEADER) or units[0].strip() in _TYPES:
                raise TraceError(f"{path}: line {_line(lines, i)}: no units row after the summary header "
                                 "(nvprof --csv writes one: \"\",\"%\",\"ms\",…)")
            scale = {}
            for col, u in zip(HEADER, units, strict=True):
                if col in ("Time", "Avg", "Min", "Max"):
                    if u.strip() not in _TIME_US:
                        raise TraceError(f"{path}: the units row gives {u!r} for {col}, not a time unit "
                                         "(s, ms, us, ns)")
                    scale[col] = _TIME_US[u.strip()]
            i += 1
            continue
        if len(r) != len(HEADER):
            raise TraceError(f"{path}: line {_line(lines, i - 1)}: {len(r)} columns, the summary header has "
                             f"{len(HEADER)}")
        kind = _TYPES.get(r[0].strip())
        if kind is None:
            raise TraceError(f"{path}: line {_line(lines, i - 1)}: Type {r[0]!r} is neither 'GPU activities' "
                             "nor 'API calls'")
        v = dict(zip(HEADER, r, strict=True))
        try:
            row = SummaryRow(name=v["Name"], time_pct=_num(v["Time(%)"]), total_us=_num(v["Time"]) * scale["Time"],
                             calls=int(_num(v["Calls"])), avg_us=_num(v["Avg"]) * scale["Avg"],
                             min_us=_num(v["Min"]) * scale["Min"], max_us=_num(v["Max"]) * scale["Max"])
        except ValueError as e:
            raise TraceError(f"{path}: line {_line(lines, i - 1)}: {e}") from None
        getattr(out, kind).append(row)
    if not out.gpu_activities and not out.api_calls:
        raise TraceError(f"{path}: the nvprof summary has no GPU activities and no API calls")
    return out


def _num(s: str) -> float:
    x = s.strip()
    try:
        return float(x[1:] if x.startswith("<") else x)  # nvprof writes "<0.01" for a tiny share
    except ValueError:
        raise ValueError(f"{s!r} is not a number") from None


def _line(lines: list[str], row: int) -> str:
    """Approximate 1-based line of a CSV row (rows are counted after the ``==`` lines are dropped)."""
    body = [k for k, s in enumerate(lines) if not s.startswith("==")]
    return str(body[row] + 1) if row < len(body) else "?"
