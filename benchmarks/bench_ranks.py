"""Time and memory of ``dnnprof analyze FOLDER`` over a folder of per-rank traces: serially, in a local process
pool and on a local Dask cluster (each in a fresh process, with an empty rank cache, then once more with the cache
warm).

    python benchmarks/make_rank_folder.py /tmp/ranks64 --ranks 64
    python benchmarks/bench_ranks.py /tmp/ranks64 --modes 1 2 local:2

Prints one JSON line per run: wall time, peak RSS of the process that reduces (the parent) and of each worker
process (as each measured itself at the end of its last task), and scaling efficiency against the serial run
(T_serial / (workers × T)).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(folder: Path, mode: str) -> None:
    from dnnprof.ingest.detect import trace_files
    from dnnprof.runs.rank_folder import report_folder

    how = {"workers": int(mode)} if mode.isdigit() else {"dask": mode}
    t0 = time.perf_counter()
    _, doc, parts = report_folder(folder, trace_files(folder), 0, **how)
    wall = time.perf_counter() - t0
    workers: dict[int, int] = {}
    for p in parts:
        workers[p["pid"]] = max(workers.get(p["pid"], 0), p["peak_rss_kb"])
    me = os.getpid()
    print(json.dumps({"wall_s": round(wall, 2), "parent_peak_rss_mb": round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_peak_rss_mb": sorted(round(v / 1024, 1) for k, v in workers.items() if k != me),
        "cached": sum(bool(p["cached"]) for p in parts), "ranks": len(parts),
        "verdict": (doc.get("critical_path") or {}).get("verdict")}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--modes", nargs="+", default=["1", "2", "local:2"])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.folder, args.child)
        return 0
    size = sum(f.stat().st_size for f in args.folder.iterdir())
    serial = None
    for mode in args.modes:
        cache = Path(tempfile.mkdtemp(prefix="dnnprof-bench-cache-"))
        env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        for state in ("cold", "warm"):
            out = subprocess.run([sys.executable, __file__, str(args.folder), "--child", mode], env=env,
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            n = int(mode) if mode.isdigit() else int(mode.split(":")[1])
            if state == "cold" and mode == "1":
                serial = r["wall_s"]
            r.update(mode=mode, cache=state, folder_mb=round(size / 2**20, 1),
                     efficiency=round(serial / (n * r["wall_s"]), 2) if serial and state == "cold" else None)
            print(json.dumps(r), flush=True)
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
