"""Turn one input of ``dnnprof view`` into a cache folder the server queries with DuckDB.

A raw trace is ingested once (``ingest.detect.open_profile``), reported through ``runs.report`` (the one writer of
summary documents) and saved as a profile (Parquet) in the cache; a saved profile is read in place when it already
holds the analysed rank's steps. Beside it go small Parquet tables aggregated once (kernels by name, GPU time by
layer/op/phase/kernel, each kernel's attribution) so no request ever scans more than one step of the big tables.

Run as ``python -m dnnprof.serve.prepare INPUT CACHE_DIR [RANK]``: the server prepares in a child process, so the
memory an ingest needs is given back before the server answers its first request.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The cache folder's format; bump when its files change.
CACHE_FORMAT = "dnnprof.view-cache/1"
VIEW_FILE = "view.json"


def _step_stack(profile: Any, rank: int) -> list[dict[str, Any]]:
    """Per step of ``rank``: compute, exposed NCCL, exposed memcpy/memset and idle time (us), summing to the step's
    GPU window: compute = union of non-collective kernels; NCCL = what collectives add to it; memcpy = what copies
    add to both; idle = the rest of the window."""
    from dnnprof.analysis.intervals import covered_per_window, merge
    from dnnprof.analysis.utilization import collective_mask

    st = profile.tables["steps"]
    mine = np.flatnonzero((st["rank"] == rank) & (st["gpu_start_ns"] >= 0))
    if not mine.size:
        return []
    lo = st["gpu_start_ns"][mine].astype(np.int64)
    hi = np.maximum(st["gpu_end_ns"][mine].astype(np.int64), lo)
    k = profile.tables["kernels"]
    rows = np.flatnonzero(k["rank"] == rank)
    ks = k["start_ns"][rows].astype(np.int64)
    ke = ks + k["dur_ns"][rows].astype(np.int64)
    nccl = collective_mask(profile, rows)
    copies_s, copies_e = [], []
    for name in ("memcpy", "memset"):
        t = profile.tables[name]
        r = t["rank"] == rank
        copies_s.append(t["start_ns"][r].astype(np.int64))
        copies_e.append(copies_s[-1] + t["dur_ns"][r].astype(np.int64))

    def cover(s: np.ndarray, e: np.ndarray) -> np.ndarray:
        ms, me = merge(s, e)
        return covered_per_window(ms, me, lo, hi).astype(np.int64)

    compute = cover(ks[~nccl], ke[~nccl])
    with_nccl = cover(ks, ke)
    everything = cover(np.concatenate([ks, *copies_s]), np.concatenate([ke, *copies_e]))
    window = hi - lo
    out = []
    for i, row in enumerate(mine):
        out.append({"step": int(st["number"][row]), "start_ns": int(lo[i]), "end_ns": int(hi[i]),
                    "compute_us": compute[i] / 1e3, "nccl_us": (with_nccl[i] - compute[i]) / 1e3,
                    "memcpy_us": (everything[i] - with_nccl[i]) / 1e3,
                    "idle_us": max(0, window[i] - everything[i]) / 1e3})
    return out


def _samples(path: Path) -> dict[str, Any]:
    """NVML/GPM series of a run directory (``samples.json``) or of a ``dnnprof monitor --record`` file, as
    ``{metric: {"t_s": [...], "value": [...]}}`` of the first device."""
    if path.is_dir() and (path / "samples.json").is_file():
        doc = json.loads((path / "samples.json").read_text())
        names = doc.get("metrics") or []
        t0 = min(doc.get("ts_ns") or [0])
        out: dict[str, Any] = {}
        first = min(doc.get("device") or [0])
        for dev, ts, m, v in zip(doc.get("device", []), doc.get("ts_ns", []), doc.get("metric", []),
                                 doc.get("value", []), strict=False):
            if dev != first or v is None:
                continue
            name = names[m] if isinstance(m, int) and 0 <= m < len(names) else str(m)
            series = out.setdefault(name, {"t_s": [], "value": []})
            series["t_s"].append((ts - t0) / 1e9)
            series["value"].append(v)
        return out
    return {}


def _aggregate(tables: Path, out: Path) -> None:
    """Kernels grouped by name, and GPU time by (layer, phase, op, kernel), written once as small Parquet files."""
    import duckdb

    con = duckdb.connect()
    s, a = str(tables / "strings.parquet"), str(out / "kattr.parquet")
    base = f"SELECT rank, dur_ns, est_occupancy_pct, name_id, layer, phase, op FROM read_parquet('{a}')"
    con.execute(f"""COPY (
        SELECT b.rank, s.value AS name, count(*) AS calls, sum(b.dur_ns) AS total_ns, avg(b.dur_ns) AS mean_ns,
               min(b.dur_ns) AS min_ns, max(b.dur_ns) AS max_ns, avg(b.est_occupancy_pct) AS est_occupancy_pct,
               arg_max(b.layer, b.dur_ns) AS layer, arg_max(b.phase, b.dur_ns) AS phase,
               arg_max(b.op, b.dur_ns) AS op
        FROM ({base}) b JOIN read_parquet('{s}') s ON b.name_id = s.id
        GROUP BY b.rank, s.value) TO '{out / "kgroups.parquet"}' (FORMAT parquet)""")
    con.execute(f"""COPY (
        SELECT b.rank, b.layer, b.phase, b.op, s.value AS name, count(*) AS calls, sum(b.dur_ns) AS total_ns
        FROM ({base}) b JOIN read_parquet('{s}') s ON b.name_id = s.id
        GROUP BY ALL) TO '{out / "lgroups.parquet"}' (FORMAT parquet)""")
    con.close()


def build(source: Path, out: Path, rank: int | None = None) -> dict[str, Any]:
    """Write the cache folder ``out`` for ``source`` (complete, then renamed into place) and return its view.json."""
    from dnnprof.ingest.detect import kind_of
    from dnnprof.runs.report import report_path

    kind = kind_of(source)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        analysis, doc = report_path(source, rank)
        view = write_cache(analysis, doc, source, kind, tmp, out)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return view


def write_cache(analysis: Any, doc: dict[str, Any], source: Path, kind: str, tmp: Path,
                final: Path) -> dict[str, Any]:
    """The cache files of an analysed input, written into ``tmp`` (which will be renamed ``final``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dnnprof.analysis.attribution import PHASES
    from dnnprof.runs.report import report

    profile = analysis.profile
    if kind == "profile" and (profile.tables["steps"]["rank"] == analysis.rank).any():
        tables = source.resolve()  # a saved profile with its steps: query it in place, no copy
        written = tables
    else:
        profile.save(tmp / "profile")
        tables, written = final / "profile", tmp / "profile"
    attr = analysis.attribution
    k = profile.tables["kernels"]
    # The kernels' columns the views need, with each kernel's layer/phase/op beside them; ordered by start
    # like kernels.parquet, in row groups small enough that one step's window reads a few of them.
    cols = {c: pa.array(k[c]) for c in ("rank", "stream", "start_ns", "dur_ns", "name_id", "correlation",
                                         "est_occupancy_pct")}
    # from the object arrays of str as they are: a fixed-width copy would be as wide as the longest name everywhere
    cols["layer"] = pa.array(attr.layer, pa.string()).dictionary_encode()
    cols["phase"] = pa.array(np.asarray(PHASES, dtype=object)[attr.phase], pa.string()).dictionary_encode()
    cols["op"] = pa.array(attr.op_name, pa.string()).dictionary_encode()
    pq.write_table(pa.table(cols), tmp / "kattr.parquet", row_group_size=65536, compression="zstd")
    _aggregate(written, tmp)
    per_rank = {}
    if len(profile.ranks) > 1:  # the Ranks view: each rank's own summary (findings of that rank included)
        for r in profile.ranks:
            per_rank[str(r)] = doc if r == analysis.rank else report(profile, r)[1]
    view = {"format": CACHE_FORMAT, "source": str(source), "kind": kind, "tables": str(tables),
            "rank": analysis.rank, "ranks": profile.ranks, "step_stack": _step_stack(profile, analysis.rank),
            "samples": _samples(source)}
    (tmp / "summary.json").write_text(json.dumps(doc, default=str))
    (tmp / "ranks.json").write_text(json.dumps(per_rank, default=str))
    (tmp / VIEW_FILE).write_text(json.dumps(view))
    return view


def main(argv: list[str]) -> int:
    from dnnprof.ingest.errors import TraceError
    from dnnprof.runs.report import ReportError

    source, out = Path(argv[0]), Path(argv[1])
    rank = int(argv[2]) if len(argv) > 2 and argv[2] != "" else None
    try:
        build(source, out, rank)
    except (TraceError, ReportError) as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
