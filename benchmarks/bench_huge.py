"""Huge traces: wall time, CPU time, peak RSS and MB/s of reading and analysing big Kineto traces.

Usage:
    python benchmarks/bench_huge.py SOURCE.json.gz [--big 890e6 5e9] [--tmp /tmp] [--workers 1 2 4 8] [--save]

For the source trace itself (gzip) and for each --big size (built with make_big_trace.py into --tmp as plain
JSON, deleted afterwards), in fresh processes:
  * read_kineto by each number of processes in --workers (``DNNPROF_READ_WORKERS``; 1 is one core; the helpers'
    largest peak RSS reported apart);
  * ``dnnprof analyze TRACE --json FILE -q`` end to end, by the same numbers of processes (with --before: whether
    the summaries are identical to the earlier code's; every count's summary is checked against the first);
  * with --save, ``dnnprof analyze TRACE --save DIR -q``, then ``dnnprof analyze DIR --json FILE -q`` of the saved
    profile (whose summary must be the trace's).
Wall time swings with the machine's load; the load average is printed with each row, and CPU seconds (user +
system, both processes; for the CLI, the process and its children) are the steadier figure. Prints a Markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_READ = r"""
import resource, sys, time
from pathlib import Path
from dnnprof.ingest import kineto
t = time.perf_counter()
try:
    kineto._read_profile(Path(sys.argv[1]), None, parallel_min_bytes=int(sys.argv[2]))
except TypeError:  # a reader from before the two-core split (--before)
    kineto._read_profile(Path(sys.argv[1]), None)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(time.perf_counter() - t, me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, me.ru_maxrss / 1024,
      kids.ru_maxrss / 1024)
"""


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def _env(src: Path | None, workers: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:  # first on the path: the earlier dnnprof, with whatever else the path held
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    if workers is not None:
        env["DNNPROF_READ_WORKERS"] = str(workers)
    return env


def _read(trace: Path, workers: int, src: Path | None = None) -> tuple[float, float, float, float]:
    out = subprocess.run([sys.executable, "-c", _READ, str(trace), "0" if workers > 1 else str(1 << 62)],
                         capture_output=True, text=True, check=True, env=_env(src, workers))
    wall, cpu, rss, child = (float(x) for x in out.stdout.split())
    return wall, cpu, rss, child


def _cli(trace: Path, tmp: Path, src: Path | None = None, workers: int | None = None,
         out: list[str] | None = None) -> tuple[float, float, float]:
    """Wall s, CPU s and peak RSS MB of ``dnnprof analyze``; its summary is left in ``tmp``/before.json or
    after<workers>.json (``out``: other output options in place of ``--json``)."""
    t0 = time.perf_counter()
    summary = tmp / ("before.json" if src is not None else f"after{workers}.json")
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", sys.executable, "-m", "dnnprof", "analyze", str(trace),
                        *(out or ["--json", str(summary)]), "-q"], capture_output=True, text=True, check=True,
                       env=_env(src, workers))
    wall = time.perf_counter() - t0
    user, system, rss_kb = r.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), float(rss_kb) / 1024  # CPU of the CLI process only


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", type=Path)
    ap.add_argument("--big", type=float, nargs="*", default=[890e6])
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--before", type=Path, default=None,
                    help="a src/ folder of an earlier dnnprof: its read and CLI are measured too")
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2],
                    help="numbers of processes that read a big plain trace (DNNPROF_READ_WORKERS)")
    ap.add_argument("--save", action="store_true",
                    help="also save each big trace's profile (--save) and analyse the saved folder")
    a = ap.parse_args()
    here = Path(__file__).resolve().parent
    work = Path(tempfile.mkdtemp(dir=a.tmp, prefix="dnnprof-bench-"))
    rows: list[tuple[str, ...]] = []

    def add(*row: str) -> None:  # printed as measured too: a run cut short keeps what it measured
        print("| " + " | ".join(row) + " |", flush=True)
        rows.append(row)

    try:
        traces = [(a.source, False)]
        for size in a.big:
            traces.append((work / f"big_{size / 1e9:.2f}GB.json", True))
        for trace, built in traces:
            if built:
                size = float(trace.stem.split("_")[1][:-2]) * 1e9
                subprocess.run([sys.executable, str(here / "make_big_trace.py"), str(a.source), str(trace),
                                "--min-bytes", str(size)], check=True, stdout=subprocess.DEVNULL)
            json_mb = (trace.stat().st_size if built else _gunzipped_size(trace)) / 1e6
            if a.before is not None:
                load = _load()
                wall, cpu, rss, _ = _read(trace, 1, a.before)
                add(trace.name, f"{json_mb:,.0f}", "before: read, one process", f"{wall:.2f}", f"{cpu:.2f}",
                    f"{rss:.0f}", f"{json_mb / wall:.0f}", load)
                load = _load()
                wall, cpu, rss = _cli(trace, work, a.before)
                add(trace.name, f"{json_mb:,.0f}", "before: dnnprof analyze --json -q", f"{wall:.2f}",
                    f"{cpu:.2f}", f"{rss:.0f}", f"{json_mb / wall:.0f}", load)
            counts = a.workers if built else a.workers[:1]  # gzip is read by one process
            for n in counts:
                load = _load()
                wall, cpu, rss, child = _read(trace, n)
                add(trace.name, f"{json_mb:,.0f}", f"read, {n} process{'es' if n > 1 else ''}",
                    f"{wall:.2f}", f"{cpu:.2f}", f"{rss:.0f}" + (f" (+{child:.0f} helper)" if n > 1 else ""),
                    f"{json_mb / wall:.0f}", load)
            for n in counts:
                load = _load()
                wall, cpu, rss = _cli(trace, work, workers=n)
                add(trace.name, f"{json_mb:,.0f}", f"dnnprof analyze --json -q, {n} process"
                    f"{'es' if n > 1 else ''}", f"{wall:.2f}", f"{cpu:.2f}", f"{rss:.0f}",
                    f"{json_mb / wall:.0f}", load)
            if built and a.save:  # the profile saved (Parquet), then analysed from the saved folder
                saved = work / "saved-profile"
                load = _load()
                wall, cpu, rss = _cli(trace, work, out=["--save", str(saved)])
                add(trace.name, f"{json_mb:,.0f}", "dnnprof analyze --save -q", f"{wall:.2f}", f"{cpu:.2f}",
                    f"{rss:.0f}", f"{json_mb / wall:.0f}", load)
                load = _load()
                loaded = work / "loaded.json"
                wall, cpu, rss = _cli(saved, work, out=["--json", str(loaded)])
                add(trace.name, f"{json_mb:,.0f}", "dnnprof analyze SAVED --json -q", f"{wall:.2f}", f"{cpu:.2f}",
                    f"{rss:.0f}", "", load)
                same = loaded.read_bytes() == (work / f"after{counts[0]}.json").read_bytes()  # the trace's path kept
                print(f"{trace.name}: summary of the saved profile {'identical' if same else 'DIFFERS'}", flush=True)
                shutil.rmtree(saved)
            first = (work / f"after{counts[0]}.json").read_bytes()
            for n in counts[1:]:
                same = (work / f"after{n}.json").read_bytes() == first
                print(f"{trace.name}: summary JSON by {n} processes {'identical' if same else 'DIFFERS'}", flush=True)
            if a.before is not None:
                same = (work / "before.json").read_bytes() == first
                print(f"{trace.name}: summary JSON {'identical' if same else 'DIFFERS'} before/after", flush=True)
            if built:
                trace.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}\n")
    print("| trace | JSON MB | what | wall s | CPU s | peak RSS MB | MB/s | load |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def _gunzipped_size(path: Path) -> int:
    import gzip

    with gzip.open(path) as f:
        n = 0
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


if __name__ == "__main__":
    main()
