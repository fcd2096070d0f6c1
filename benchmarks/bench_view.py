"""``dnnprof view`` on a big saved profile: time to the first page, to each view switch, and the server's RSS.

The big profile repeats a real trace's profile N times with shifted times, step numbers, correlation ids and row
links (``--repeat``), as if the trace had N times as many steps; its equivalent trace size is N times the real
trace's uncompressed JSON. The server runs as ``dnnprof view --no-browser`` in its own process; the cache is
prepared once before the clock starts (its cost is printed too), then each page's requests are timed as a browser
makes them (the page and its assets, then the view's endpoints).

    PYTHONPATH=src python benchmarks/bench_view.py TRACE.json.gz --repeat 60 --work /tmp/bigview
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

LINKS = {"launch_row": "runtime", "op_row": "ops", "parent_row": "ops", "fwd_row": "ops", "kernel_row": "kernels"}
TIMES = ("start_ns", "ts_ns", "gpu_start_ns", "gpu_end_ns")
IDS = ("correlation", "external_id", "sequence_nr")


def tiled(profile, n: int):
    """``profile`` repeated ``n`` times, one copy after the other on the clock."""
    from dnnprof.model.profile import Profile

    t = profile.tables
    starts = [v["start_ns"].min() for v in t.values() if "start_ns" in v and v["start_ns"].size]
    ends = [(v["start_ns"] + v["dur_ns"]).max() for v in t.values() if "dur_ns" in v and v["dur_ns"].size]
    span = int(max(ends) - min(starts)) + 1_000_000
    nstep = int(max(t["steps"]["number"].max(initial=0), 0)) + 1
    idmax = {c: int(max((v[c].max() for v in t.values() if c in v and v[c].size), default=0)) + 1 for c in IDS}
    out = {}
    for name, cols in t.items():
        rows = {k: profile.rows(k) for k in t}
        parts = {c: [] for c in cols}
        for k in range(n):
            for c, v in cols.items():
                w = v.copy()
                if c in TIMES:
                    w[w >= 0] += k * span
                elif c in LINKS:
                    w[w >= 0] += k * rows[LINKS[c]]
                elif c in ("step", "number"):
                    w[w >= 0] += k * nstep
                elif c in IDS:
                    w[w >= 0] += k * idmax[c]
                parts[c].append(w)
        out[name] = {c: np.concatenate(p) if p else cols[c] for c, p in parts.items()}
    return Profile(tables=out, strings=list(profile.strings), devices=list(profile.devices), meta=dict(profile.meta))


def get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=1800) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (``VmRSS``) or at its highest so far (``VmHWM``), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--work", type=Path, default=Path("/tmp/dnnprof-bench-view"))
    a = ap.parse_args()
    from dnnprof.ingest.detect import open_profile
    from dnnprof.serve.inputs import prepared

    a.work.mkdir(parents=True, exist_ok=True)
    raw_mb = len(gzip.open(a.trace).read()) / 2**20
    prof_dir = a.work / f"profile-x{a.repeat}"
    t0 = time.perf_counter()
    if not (prof_dir / "profile.json").is_file():
        tiled(open_profile(a.trace), a.repeat).save(prof_dir)
    build_s = time.perf_counter() - t0
    env = dict(os.environ, XDG_CACHE_HOME=str(a.work / "cache"))
    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]
    t0 = time.perf_counter()
    prepared(prof_dir)
    prepare_s = time.perf_counter() - t0
    import pyarrow.parquet as pq

    kernels = pq.ParquetFile(prof_dir / "kernels.parquet").metadata.num_rows
    ops = pq.ParquetFile(prof_dir / "ops.parquet").metadata.num_rows
    proc = subprocess.Popen([sys.executable, "-m", "dnnprof.cli.main", "view", str(prof_dir), "--no-browser"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        t_start = time.perf_counter()
        line = ""
        while "http://" not in line:
            line = proc.stdout.readline()
        url = re.search(r"http://\S+/", line).group(0)
        listening_s = time.perf_counter() - t_start
        assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', urllib.request.urlopen(url).read().decode())

        def page(paths: list[str]) -> float:
            t0 = time.perf_counter()
            for p in paths:
                get(url.rstrip("/") + p)
            return time.perf_counter() - t0

        first = page(["/", *assets, "/api/inputs", "/api/0/overview"])
        views = {
            "kernels": ["/api/0/kernels?sort=total_us&desc=1&limit=50"],
            "kernels sorted by calls": ["/api/0/kernels?sort=calls&desc=1&limit=50"],
            "kernels searched": ["/api/0/kernels?q=gemm&limit=50"],
            "layers": ["/api/0/layers", "/api/0/layer?name=lm_head%20(Linear)"],
            "ops": ["/api/0/ops"],
            "timeline (median step)": ["/api/0/timeline"],
            "timeline (step 7)": ["/api/0/timeline?step=7"],
            "memory / findings": ["/api/0/overview"],
        }
        times = {k: page(v) for k, v in views.items()}
        rss_views = rss_mb(proc.pid)
        t0 = time.perf_counter()
        _, perfetto_bytes = get(url.rstrip("/") + "/api/0/perfetto")
        perfetto_s = time.perf_counter() - t0
        doc = {"date": time.strftime("%Y-%m-%d"), "trace": a.trace.name, "trace_json_mb": round(raw_mb, 1),
               "repeat": a.repeat, "equivalent_trace_mb": round(raw_mb * a.repeat, 1), "kernels": kernels, "ops": ops,
               "build_profile_s": round(build_s, 1), "prepare_cache_s": round(prepare_s, 1),
               "server_listening_s": round(listening_s, 2), "first_page_s": round(first, 3),
               "view_switch_s": {k: round(v, 3) for k, v in times.items()},
               "server_rss_mb": round(rss_views, 1), "perfetto_export_s": round(perfetto_s, 1),
               "perfetto_export_mb": round(perfetto_bytes / 2**20, 1),
               "server_rss_after_perfetto_mb": round(rss_mb(proc.pid), 1),
               "server_peak_rss_mb": round(rss_mb(proc.pid, "VmHWM"), 1), "cpus": os.cpu_count(),
               "load_average": [round(x, 2) for x in os.getloadavg()]}
        print(json.dumps(doc, indent=1))
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
