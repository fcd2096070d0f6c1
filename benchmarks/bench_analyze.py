"""Benchmark `dnnprof analyze` against HTA and a bare json.load, side by side, in one run.

Usage:
    python benchmarks/bench_analyze.py TRACE.json.gz [--hta-python PATH] [--repeat 5]

Measures, each in a fresh process (median of --repeat runs):
  * dnnprof CLI end to end: `dnnprof analyze TRACE --json FILE` with the terminal report (wall time, peak RSS);
  * dnnprof in-process: read + summarize, after imports (what the CLI spends on the trace itself);
  * a bare `json.load` of the same (gunzipped) file;
  * HTA (if --hta-python names a Python with HolisticTraceAnalysis installed): TraceAnalysis(trace_dir=…) parse,
    then get_gpu_kernel_breakdown(visualize=False), with peak RSS;
  * re-opening a saved profile (`Profile.load`) in-process.
Prints a Markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_INPROC = r"""
import resource, sys, time
t0 = time.perf_counter()
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.kineto import read_kineto
t1 = time.perf_counter()
p = read_kineto(sys.argv[1])
t2 = time.perf_counter()
doc = summarize(p)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

_JSONLOAD = r"""
import gzip, json, resource, sys, time
t0 = time.perf_counter()
with gzip.open(sys.argv[1]) as f:
    json.load(f)
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

_LOAD = r"""
import resource, sys, time
t0 = time.perf_counter()
from dnnprof.model.profile import Profile
t1 = time.perf_counter()
Profile.load(sys.argv[1])
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

_HTA = r"""
import logging, resource, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
a.get_gpu_kernel_breakdown(visualize=False)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _run(argv: list[str]) -> list[float]:
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.strip().splitlines()[-1].split()]


def _wall_rss(argv: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    return wall, float(r.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--hta-python", default=None)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    py = sys.executable
    dnnprof = [py, "-m", "dnnprof"]
    tmp = Path(tempfile.mkdtemp())
    rows: list[tuple[str, str, str]] = []

    cli = [_wall_rss([*dnnprof, "analyze", str(a.trace), "--json", str(tmp / "s.json")]) for _ in range(a.repeat)]
    rows.append(("dnnprof analyze (CLI, end to end, report + JSON)",
                 f"{statistics.median(w for w, _ in cli):.3f} s", f"{max(r for _, r in cli):.0f} MB"))
    inproc = [_run([py, "-c", _INPROC, str(a.trace)]) for _ in range(a.repeat)]
    rows.append(("dnnprof in-process: imports", f"{statistics.median(x[0] for x in inproc):.3f} s", ""))
    rows.append(("dnnprof in-process: read_kineto", f"{statistics.median(x[1] for x in inproc):.3f} s", ""))
    rows.append(("dnnprof in-process: summarize", f"{statistics.median(x[2] for x in inproc):.3f} s", ""))
    dn_trace = statistics.median(x[1] + x[2] for x in inproc)
    rows.append(("dnnprof in-process: read + summarize", f"{dn_trace:.3f} s",
                 f"{max(x[3] for x in inproc):.0f} MB"))
    jl = [_run([py, "-c", _JSONLOAD, str(a.trace)]) for _ in range(a.repeat)]
    rows.append(("bare json.load (gzip)", f"{statistics.median(x[0] for x in jl):.3f} s",
                 f"{max(x[1] for x in jl):.0f} MB"))
    subprocess.run([*dnnprof, "analyze", str(a.trace), "--save", str(tmp / "prof"), "--quiet"], check=True)
    ld = [_run([py, "-c", _LOAD, str(tmp / "prof")]) for _ in range(a.repeat)]
    rows.append(("re-open saved profile (Profile.load, after import)", f"{statistics.median(x[1] for x in ld):.3f} s",
                 f"{max(x[2] for x in ld):.0f} MB"))
    rows.append(("re-open saved profile (import of pyarrow included)",
                 f"{statistics.median(x[0] + x[1] for x in ld):.3f} s", ""))
    if a.hta_python:
        hdir = tmp / "hta"
        hdir.mkdir()
        doc = json.loads(gzip.open(a.trace).read())
        doc.setdefault("distributedInfo", {"rank": 0})  # HTA 0.5 needs a rank
        with gzip.open(hdir / "rank-0.json.gz", "wt") as f:
            json.dump(doc, f)
        hta = [_run([a.hta_python, "-c", _HTA, str(hdir)]) for _ in range(max(2, a.repeat // 2))]
        parse = statistics.median(x[1] for x in hta)
        brk = statistics.median(x[2] for x in hta)
        rows.append(("HTA 0.5.0: TraceAnalysis parse", f"{parse:.3f} s", f"{max(x[3] for x in hta):.0f} MB"))
        rows.append(("HTA 0.5.0: get_gpu_kernel_breakdown", f"{brk:.3f} s", ""))
        rows.append(("speed-up, in-process (HTA parse+breakdown / dnnprof read+summarize)",
                     f"{(parse + brk) / dn_trace:.1f}x", ""))
        rows.append(("speed-up, end to end (HTA parse+breakdown / dnnprof CLI wall)",
                     f"{(parse + brk) / statistics.median(w for w, _ in cli):.1f}x", ""))
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{a.trace.name} — {platform.node() and 'this machine'}: {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}\n")
    print("| measurement | time | peak RSS |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
