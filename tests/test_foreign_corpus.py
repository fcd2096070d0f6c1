"""Every file of the foreign trace corpus (``../shared/foreign``: other projects' profiler outputs, see its README)
through ``dnnprof analyze``: no traceback; a clear one-line error (exit 2) for what is not a trace dnnprof reads;
and kernel totals exactly equal to a count made here from the raw JSON with nothing but ``json`` (for an Nsight
Systems SQLite export, with plain SQL).

Files are found by globbing the folder, so a file added there is covered without editing this test.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli.main import main

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
ENTRIES = sorted(p for p in FOREIGN.glob("*") if p.suffix != ".md") if FOREIGN.is_dir() else []
#: Inputs dnnprof does not read, and what the one-line error must say.
NOT_READ = {
    "hta__memory_timeline_raw.gz": "a JSON array whose items are not trace events",  # export_memory_timeline raw
    "hta__pytorch_execution_trace_et.json.gz": "not a Chrome/Kineto trace (no 'traceEvents')",  # Chakra ET
}
KERNEL_CATEGORIES = ("kernel", "Kernel")  # "Kernel": torch 1.8/1.9


def _raw(path: Path) -> Any:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _raw_kernels(path: Path, rank: int) -> tuple[int, int]:
    """(kernel events, their summed duration in ns) of the trace of ``rank`` (a file, or a folder of per-rank files)."""
    files = sorted(path.glob("*.json*")) if path.is_dir() else [path]
    for f in files:
        doc = _raw(f)
        if len(files) > 1 and (doc.get("distributedInfo") or {}).get("rank", 0) != rank:
            continue
        durs = [e.get("dur", 0) for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KERNEL_CATEGORIES]
        return len(durs), sum(max(0, round(float(d) * 1000)) for d in durs)
    raise AssertionError(f"no trace of rank {rank} in {path}")


def _sql_kernels(path: Path) -> tuple[int, int]:
    """(kernels, their summed duration in ns) of an Nsight Systems SQLite export, by plain SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        n, total = con.execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    finally:
        con.close()
    return int(n), int(total or 0)


def _ncu_launches(path: Path) -> int:
    """Distinct launch IDs in an ``ncu --csv`` page (program output and ==PROF== lines before the header)."""
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return len({row["ID"] for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))) if row.get("ID")})


@pytest.mark.skipif(not ENTRIES, reason=f"the foreign trace corpus ({FOREIGN}) is not here")
@pytest.mark.parametrize("path", ENTRIES, ids=[p.name for p in ENTRIES])
def test_analyze_foreign(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    rc = main(["analyze", str(path), "--json", str(out), "--quiet"])  # an exception would fail the test here
    err = capsys.readouterr().err
    if path.name in NOT_READ:
        assert rc == 2 and not out.exists()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dnnprof: error: ") and NOT_READ[path.name] in lines[0], err
        return
    assert rc == 0, err
    doc = json.loads(out.read_text())
    if path.suffix == ".csv":  # Nsight Compute: launches, not a timeline
        assert doc["launches"] == sum(k["launches"] for k in doc["kernels"]) == _ncu_launches(path)
        return
    count, total_ns = _sql_kernels(path) if path.suffix == ".sqlite" else _raw_kernels(path, doc.get("rank", 0))
    assert sum(k["calls"] for k in doc["kernels"]) == count
    assert sum(round(k["total_us"] * 1000) for k in doc["kernels"]) == total_ns
    assert doc["gpu"]["has_activity"] == bool(count or doc["gpu"]["memcpy_us"] or doc["gpu"]["memset_us"])
