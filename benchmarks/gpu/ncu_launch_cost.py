"""What does Nsight Compute spend per profiled launch, and on what? One small program, one ncu run per row.

Run on the GPU machine (needs ncu):
    OUT=out python benchmarks/gpu/ncu_launch_cost.py                 # ~3 min on an H100
    OUT=out python benchmarks/gpu/ncu_launch_cost.py --launches 40 --hold-gb 0.25,6

The target holds ``HOLD`` GB of device memory (one ``torch.empty``, touched once, as PyTorch's caching allocator
holds a training step's memory) and launches ``N`` element-wise kernels on a 4 M-float tensor inside the NVTX
push/pop range ``r``. Each row is one ncu run over that range, timed end to end; the same program with a name filter
that matches nothing gives ncu's fixed cost for that memory size, so

    per-launch cost = (wall with N launches profiled - wall with none profiled) / N

Rows: memory held x metric list (one pass: duration only; dnnprof's own sm_90 list) x ncu options that could change
the per-launch cost (``--cache-control none``, ``--replay-buffer`` where this ncu has it). ``ncu --help`` lines that
mention replay are saved too. Writes $OUT/ncu_launch_cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
OUT = Path(os.environ.get("OUT", "out"))


def worker(hold_gb: float, launches: int) -> None:
    import torch

    chunks = int(os.environ.get("CHUNKS", "1"))  # one allocation, or many as a caching allocator holds them
    size = int(hold_gb * (1 << 30)) // chunks
    held = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(chunks)]
    for h in held:
        h.fill_(1)
    x = torch.randn(1 << 22, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("r")
    for i in range(launches):
        x.mul_(1.0 + 1e-6 * i)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    del held


def _timed(cmd: list[str]) -> tuple[float, int | None, str]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return time.monotonic() - t0, p.returncode, p.stdout + p.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--hold-gb", default="0.25,6")
    ap.add_argument("--launches", type=int, default=40)
    ap.add_argument("--chunks", default="1", help="comma-separated: the held memory in this many allocations")
    ap.add_argument("--lists", default="one-pass,dnnprof")
    ap.add_argument("--extras", default="", help="comma-separated extra option sets to try (cache-none, ...)")
    args = ap.parse_args()
    if args.worker:
        worker(float(os.environ["HOLD_GB"]), int(os.environ["LAUNCHES"]))
        return

    from dnnprof.collect import ncu as N
    from dnnprof.ingest.ncu_csv import read_ncu_csv

    OUT.mkdir(parents=True, exist_ok=True)
    ncu = N.find_ncu()
    if ncu is None:
        sys.exit("ncu not found")
    help_text = N.ncu_help(ncu)
    replay_help = [ln for ln in help_text.splitlines() if re.search(r"replay|backup|restore", ln, re.I)]
    dnnprof_metrics, _ = N.metrics_for("9.0")
    lists = {"one-pass": "gpu__time_duration.sum", "dnnprof": ",".join(dnnprof_metrics)}
    extras: dict[str, list[str]] = {"": [], "cache-none": ["--cache-control", "none"]}
    if "--replay-buffer" in help_text:
        extras["replay-buffer-memory"] = ["--replay-buffer", "memory"]
        extras["replay-buffer-file"] = ["--replay-buffer", "file"]
    target = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    rows = []

    def one(hold: float, chunks: int, mlist: str, extra: str, profiled: bool) -> dict:
        log = OUT / f"ncu_{hold}_{chunks}_{mlist}_{extra or 'default'}_{int(profiled)}.csv"
        cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "r/", "--metrics", lists[mlist],
               "--disable-extra-suffixes", *extras[extra], "--csv", "--page", "raw", "--log-file", str(log)]
        cmd += [] if profiled else ["--kernel-name", "regex:^nothing_matches_this$"]
        os.environ.update(HOLD_GB=str(hold), LAUNCHES=str(args.launches), CHUNKS=str(chunks))
        wall, rc, text = _timed([*cmd, *target])
        row: dict = {"hold_gb": hold, "chunks": chunks, "metrics": mlist, "extra": extra, "profiled": profiled, "wall_s": round(wall, 2),
                     "returncode": rc}
        if rc != 0:
            row["tail"] = text[-600:]
        if profiled and log.is_file():
            try:
                t = read_ncu_csv(log)
                row["launches"] = len(t)
                for m in ("profiler__replayer_passes", "profiler__replayer_bytes_mem_backed_up"):
                    if t.has(m):
                        row[m] = sorted({float(v) for v in t.metric(m)})[-1]
            except ValueError as e:
                row["parse_error"] = str(e)[:200]
        print(json.dumps(row), flush=True)
        return row

    wanted_extras = ["", *[e for e in args.extras.split(",") if e]]
    for hold in (float(h) for h in args.hold_gb.split(",")):
        for chunks in (int(c) for c in args.chunks.split(",")):
            for mlist in [m for m in args.lists.split(",") if m]:
                for extra in wanted_extras if mlist == "dnnprof" else ("",):
                    base = one(hold, chunks, mlist, extra, False)
                    prof = one(hold, chunks, mlist, extra, True)
                    per = (prof["wall_s"] - base["wall_s"]) / max(1, prof.get("launches") or args.launches)
                    rows += [base, prof]
                    rows.append({"hold_gb": hold, "chunks": chunks, "metrics": mlist, "extra": extra,
                                 "per_launch_ms": round(1000 * per, 1), "passes": prof.get("profiler__replayer_passes"),
                                 "backed_up_gb": round((prof.get("profiler__replayer_bytes_mem_backed_up") or 0) / 1e9,
                                                       3)})
    (OUT / "ncu_launch_cost.json").write_text(json.dumps({"ncu": ncu, "replay_help": replay_help, "rows": rows},
                                                         indent=1))
    print("\n".join(replay_help))
    print(f"{'hold GB':>8} {'chunks':>7} {'metrics':<10} {'extra':<22} {'passes':>7} {'backed up GB':>13} {'ms / launch':>12}")
    for r in rows:
        if "per_launch_ms" in r:
            print(f"{r['hold_gb']:>8} {r['chunks']:>7} {r['metrics']:<10} {r['extra'] or '-':<22} {r['passes'] or '':>7} "
                  f"{r['backed_up_gb']:>13} {r['per_launch_ms']:>12}")


if __name__ == "__main__":
    main()
