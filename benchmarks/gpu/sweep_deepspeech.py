"""The four-question study of DeepSpeech2 on one GPU with ``dnnprof sweep``: time taken, trials used, the answers.

    OUT=out python benchmarks/gpu/sweep_deepspeech.py            # fp32, amp-fp16, bf16 × train, infer × auto
    OUT=out python benchmarks/gpu/sweep_deepspeech.py --quick    # ~3 min smoke run: fp32, bf16 × train

What it runs (one command, as a user would)::

    dnnprof sweep deepspeech2 --device cuda --precisions fp32,amp-fp16,bf16 --modes train,infer \\
        --batch-sizes auto --steps 3 --warmup-steps 1 --profile-points default,max --time-budget 780 \\
        --out $OUT/sweep_deepspeech2

Every trial is its own process; probes (fit, speed, NVML/GPM) come first for all six series, then a full
``dnnprof profile`` at the default batch (32) of each, then at each series' largest batch. ``--time-budget``
stops starting trials after 13 minutes so the whole study stays under 15 minutes of device time; re-running the
same command resumes where it stopped. Then ``dnnprof report`` writes report.md/.html/.json next to sweep.json.

Prints, last: the wall time, trials per series against the promised bound ceil(log2(max)) + 3, the largest batch
per series and what ran out, and the four answers. Results: ``$OUT/sweep_deepspeech2/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fp32 and bf16 training only, 150 s budget")
    ap.add_argument("--workload", default="deepspeech2")
    ap.add_argument("--precisions", default="fp32,amp-fp16,bf16")
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--budget-s", type=float, default=780.0, help="no trial starts after this many seconds")
    ap.add_argument("--memory-limit", default=None, help="e.g. 40GiB to study a smaller GPU")
    ap.add_argument("--profile-points", default="default,max",
                    help="profiled points per series (default,max; 'default' answers all four questions)")
    args = ap.parse_args()
    if args.quick:
        args.precisions, args.modes, args.budget_s = "fp32,bf16", "train", 150.0
    out = Path(os.environ.get("OUT", "out")) / f"sweep_{args.workload}"
    cmd = [sys.executable, "-m", "dnnprof", "sweep", args.workload, "--device", "cuda", "--precisions",
           args.precisions, "--modes", args.modes, "--batch-sizes", "auto", "--steps", "3", "--warmup-steps", "1",
           "--profile-points", args.profile_points, "--time-budget", str(args.budget_s), "--timeout", "300",
           "--out", str(out)]
    if args.memory_limit:
        cmd += ["--memory-limit", args.memory_limit]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    wall = time.monotonic() - t0
    sweep_file = out / "sweep.json"
    if not sweep_file.is_file():
        print(f"no sweep.json (dnnprof sweep exited {rc})")
        return rc or 1
    report_json = out / "report.json"
    if not report_json.is_file():
        subprocess.call([sys.executable, "-m", "dnnprof", "report", str(out), "--quiet"])
    doc = json.loads(sweep_file.read_text())
    rep = json.loads(report_json.read_text())
    pts = doc["points"]
    device_s = sum(p.get("wall_s") or 0.0 for p in pts)
    print()
    print(f"device: {doc['device'].get('name')} ({(doc['device'].get('memory_bytes') or 0) / 2**30:.1f} GiB)")
    print(f"status: {doc['status']}; wall {wall:.0f} s for this run; {device_s:.0f} s in trials over all runs; "
          f"{len(pts)} trials ({sum(p['kind'] == 'probe' for p in pts)} probes, "
          f"{sum(p['kind'] == 'profile' for p in pts)} profiles)")
    for title, key in (("1. Bottlenecks", "bottlenecks"), ("2. Batch size", "batch_size"), ("3. Precision", "precision"),
                       ("4. Training vs inference", "modes")):
        print(f"\n{title}")
        for s in rep["answers"][key]:
            print(f"  - {s}")
    print(f"\nreport: {out / 'report.md'} / report.html")
    print("\nseries          largest batch  limited by     exact  trials/bound  best samples/s  at batch  "
          "search s")
    for m in doc["max_batch_size"]:
        series = [p for p in pts if p["precision"] == m["precision"] and p["mode"] == m["mode"]
                  and p["kind"] == "probe"]
        ok = [p for p in series if p["status"] == "ok" and p.get("throughput_samples_per_s")]
        best = max(ok, key=lambda p: p["throughput_samples_per_s"]) if ok else None
        print(f"{m['mode'] + ' ' + m['precision']:<15} {m.get('batch_size')!s:>13}  {m.get('limited_by')!s:<13} "
              f"{'yes' if m.get('exact') else 'no':>5}  {m.get('trials', '-')!s:>6}/{m.get('trial_bound', '-')!s:<5} "
              f"{(best or {}).get('throughput_samples_per_s', 0):>14,.1f}  {(best or {}).get('batch_size', '-')!s:>8}  "
              f"{sum(p.get('wall_s') or 0 for p in series):>8.0f}")
    phases: dict[str, list[float]] = {}
    for p in pts:
        for name, sec in (p.get("phase_s") or {}).items():
            phases.setdefault(name, []).append(sec)
    if phases:
        probes = [p for p in pts if p["kind"] == "probe" and p.get("wall_s")]
        wall = sorted(p["wall_s"] for p in probes)[len(probes) // 2]
        split = ", ".join(f"{k} {sorted(v)[len(v) // 2]:.2f}" for k, v in phases.items())
        print(f"\nwhere a probe's time goes (median s over {len(probes)} probes; wall {wall:.1f} s median): {split}")
    profiles = [p for p in pts if p["kind"] == "profile"]
    if profiles:
        print(f"profiles: {len(profiles)}, {sum(p.get('wall_s') or 0 for p in profiles):.0f} s")
    return 0 if doc["status"] in ("complete", "budget_spent") else 1


if __name__ == "__main__":
    sys.exit(main())
