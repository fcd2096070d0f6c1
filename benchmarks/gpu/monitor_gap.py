"""GPU-Util against what the SMs really do, recorded by ``dnnprof monitor`` (run on an H100/H200).

Runs ``dnnprof monitor --record`` around a small PyTorch script with two phases of ~5 s each:

* ``spin``: ``torch.cuda._sleep(cycles)``, a one-thread kernel spinning on one SM, back to back;
* ``gemm``: a bf16 8192×8192 matmul loop (cuBLAS, tensor cores);

with ~1 s idle before and between them. The script writes each phase's start and end (Unix time, after a
device synchronize); the samples inside each phase (less 0.5 s at the start, 0.25 s at the end) are averaged.
Prints a JSON document — per phase, mean GPU-Util vs SM active vs SM occupancy vs tensor vs DRAM bandwidth —
to stdout and, when ``$OUT`` is set, to ``$OUT/monitor_gap.json`` (with the recording as
``$OUT/monitor_gap_samples.parquet``). A small text table goes to stderr. About 20 s.

Run: ``OUT=out python benchmarks/gpu/monitor_gap.py`` (needs torch with CUDA and nvidia-ml-py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHASE_S = 5.0
METRICS = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct",
           "mem_util_pct", "power_w", "sm_clock_mhz")
HEAD_TRIM_S, TAIL_TRIM_S = 0.5, 0.25

WORKLOAD = r"""
import json, sys, time
import torch

PHASE_S = float(sys.argv[2])
marks = open(sys.argv[1], "w")
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
torch.cuda._sleep(1000)
(a @ b)
torch.cuda.synchronize()
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__}), file=marks, flush=True)

def mark(phase, t0, t1, **kw):
    print(json.dumps({"phase": phase, "start_unix_s": t0, "end_unix_s": t1, **kw}), file=marks, flush=True)

time.sleep(1.0)
# spin: one thread on one SM; ~50 ms chunks (cycles at ~2 GHz) so the loop can stop on time
t0 = time.time(); n = 0
while time.time() - t0 < PHASE_S:
    for _ in range(4):
        torch.cuda._sleep(100_000_000)
    torch.cuda.synchronize(); n += 4
mark("spin", t0, time.time(), kernels=n)
time.sleep(1.0)
t0 = time.time(); n = 0
c = torch.empty_like(a)
while time.time() - t0 < PHASE_S:
    for _ in range(10):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize(); n += 10
t1 = time.time()
mark("gemm", t0, t1, matmuls=n, tflops=2 * 8192**3 * n / (t1 - t0) / 1e12)
time.sleep(0.5)
"""


def main() -> int:
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    work = Path(tempfile.mkdtemp(prefix="monitor_gap_"))
    samples, marks = work / "samples.parquet", work / "marks.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "dnnprof.cli.main", "monitor", "--interval", "0.25", "--record", str(samples),
           "--", sys.executable, "-c", WORKLOAD, str(marks), str(PHASE_S)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    doc: dict[str, object] = {"command_exit": proc.returncode, "wall_s": round(time.time() - t0, 1)}
    if proc.returncode != 0 or not samples.exists():
        doc["error"] = (proc.stderr or proc.stdout)[-2000:]
        print(json.dumps(doc, indent=1))
        return 1
    import pyarrow.parquet as pq

    cols = pq.read_table(samples).to_pydict()
    lines = [json.loads(x) for x in marks.read_text().splitlines() if x.strip()]
    doc.update(lines[0])
    out_lines = proc.stdout.splitlines()
    # the whole summary (a line per GPU, then the table), however many GPUs: from the monitor's first line
    first = next((i for i, x in enumerate(out_lines) if x.startswith("the command exited")), 0)
    doc["monitor_summary"] = out_lines[first:]
    phases: dict[str, object] = {}
    for m in lines[1:]:
        lo, hi = m["start_unix_s"] + HEAD_TRIM_S, m["end_unix_s"] - TAIL_TRIM_S
        rows = [i for i, (g, t) in enumerate(zip(cols["gpu"], cols["unix_time_s"], strict=True))
                if g == 0 and lo <= t <= hi]
        means = {}
        for k in METRICS:
            vals = [cols[k][i] for i in rows if cols[k][i] is not None]
            means[k] = round(sum(vals) / len(vals), 3) if vals else None
        phases[m["phase"]] = {"samples": len(rows), "duration_s": round(m["end_unix_s"] - m["start_unix_s"], 2),
                              **{k: v for k, v in m.items() if k not in ("phase", "start_unix_s", "end_unix_s")},
                              **means}
    doc["phases"] = phases
    text = json.dumps(doc, indent=1)
    print(text)
    print(f"{'phase':6} {'GPU-Util %':>10} {'SM active %':>11} {'occupancy %':>11} {'tensor %':>8} {'DRAM %':>7}",
          file=sys.stderr)
    for name, p in phases.items():
        assert isinstance(p, dict)
        cells = [p.get(k) for k in METRICS[:5]]
        print(f"{name:6} " + " ".join(f"{'-' if v is None else f'{v:.2f}':>{w}}"
                                       for v, w in zip(cells, (10, 11, 11, 8, 7), strict=True)), file=sys.stderr)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "monitor_gap.json").write_text(text + "\n")
        shutil.copy(samples, out_dir / "monitor_gap_samples.parquet")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
