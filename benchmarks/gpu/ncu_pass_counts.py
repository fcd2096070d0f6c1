"""How many replay passes does each candidate metric set cost on this GPU? One small ncu run per set.

Run on the GPU machine (needs ncu):
    OUT=out python benchmarks/gpu/ncu_pass_counts.py            # ~1.5 min on an H100
    OUT=out python benchmarks/gpu/ncu_pass_counts.py --only sol_parts,dnnprof
    OUT=out python benchmarks/gpu/ncu_pass_counts.py --only none --set bf16=sm__ops_path_tensor_src_bf16_dst_fp32.sum
    OUT=out python benchmarks/gpu/ncu_pass_counts.py --only none --query 'tensor'   # this GPU's metric names

The target is a tiny PyTorch program: a bf16 matrix product, an fp32 element-wise kernel and a reduction inside an
NVTX range; ncu profiles the range's kernels with one metric set at a time and reports
``profiler__replayer_passes`` (and the memory it backed up between passes). Pass counts depend on the GPU and the
Nsight Compute version, not on the kernel, so a small program is enough.

Sets: the speed-of-light throughputs (``sol``), the sub-metrics that decide them on a GPT-2 training step
(``sol_parts``: ``dnnprof.model.sol_metrics``), the one-pass launch/occupancy/DRAM group (``base``), the tensor-core
and SASS FLOP counters, and their unions. Writes $OUT/ncu_pass_counts.json and prints a table.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
OUT = Path(os.environ.get("OUT", "out"))
P = ".avg.pct_of_peak_sustained_elapsed"


def worker() -> None:
    import torch

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1 << 22, device="cuda")
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("probe")
        (a @ a).float().sum()
        (x * 2 + 1).relu_()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def sets() -> dict[str, list[str]]:
    from dnnprof.collect import ncu as N

    base = ["gpu__time_duration.sum", "dram__bytes.sum", "dram__bytes.sum.peak_sustained",
            "dram__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second",
            "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
            "launch__waves_per_multiprocessor"]
    from dnnprof.model.sol_metrics import (
        MEMORY_THROUGHPUT,
        MEMORY_THROUGHPUT_PARTS,
        SM_THROUGHPUT,
        SM_THROUGHPUT_PARTS,
    )

    sol = [SM_THROUGHPUT, MEMORY_THROUGHPUT]
    sm_parts, mem_parts = list(SM_THROUGHPUT_PARTS), list(MEMORY_THROUGHPUT_PARTS)
    tensor = list(N.NCU_TENSOR_METRICS_SM90)
    sass32 = [m for m in N.NCU_METRICS if "sass" in m and ("_opf" in m or "_ffma" in m or "op_f" in m)]
    sass = [m for m in N.NCU_METRICS if "sass" in m]
    return {
        "base": base, "sol": sol, "sm_parts": sm_parts, "mem_parts": mem_parts, "sol_parts": sm_parts + mem_parts,
        "base+sol_parts": base + sm_parts + mem_parts, "tensor": tensor, "sass_fp32": sass32, "sass_all": sass,
        "base+sol_parts+tensor": base + sm_parts + mem_parts + tensor,
        "base+sol_parts+tensor+sass": base + sm_parts + mem_parts + tensor + sass,
        "dnnprof": N.metrics_for("9.0")[0],
        # which tensor-core counters cost the passes: the sums alone, the four common precisions, one precision
        "tensor_sums": [m for m in tensor if m.endswith(".sum")],
        "tensor_4": [m for m in tensor if m.endswith(".sum") and any(t in m for t in ("fp64", "tf32", "fp16", "bf16"))],
        "tensor_bf16": [m for m in tensor if m.endswith(".sum") and "bf16" in m],
        "dnnprof_no_tensor": [m for m in N.metrics_for("9.0")[0] if m not in tensor],
        "dnnprof_tensor_4": [m for m in N.metrics_for("9.0")[0]
                             if m not in tensor or not any(t in m for t in ("fp8", "int8"))],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker()
        return
    from dnnprof.collect.ncu import find_ncu
    from dnnprof.ingest.ncu_csv import read_ncu_csv

    ncu = find_ncu()
    if ncu is None:
        sys.exit("ncu not found")
    OUT.mkdir(parents=True, exist_ok=True)
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    candidates = sets()
    for i, arg in enumerate(sys.argv):  # --set NAME=m1,m2: another metric list to count
        if arg == "--set":
            name, _, metrics = sys.argv[i + 1].partition("=")
            candidates[name] = metrics.split(",")
            only = [*only, name] if only else None
    if "--query" in sys.argv:  # the metrics this GPU has whose names match a regex, to $OUT/ncu_query_metrics.txt
        pat = re.compile(sys.argv[sys.argv.index("--query") + 1])
        text = subprocess.run([ncu, "--query-metrics"], capture_output=True,
                              text=True, timeout=300).stdout
        hits = [ln for ln in text.splitlines() if pat.search(ln)]
        (OUT / "ncu_query_metrics.txt").write_text("\n".join(hits) + "\n")
        print(f"{len(hits)} metric lines match {pat.pattern!r}", flush=True)
    rows = []
    for name, metrics in candidates.items():
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "log.csv"
            cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "probe/", "--metrics",
                   ",".join(dict.fromkeys(metrics)), "--csv", "--page", "raw", "--print-units", "base",
                   "--log-file", str(log), sys.executable, __file__, "--worker"]
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            wall = time.monotonic() - t0
            row = {"set": name, "metrics": len(metrics), "wall_s": round(wall, 2), "rc": p.returncode}
            try:
                t = read_ncu_csv(log)
                row["passes"] = sorted({float(v) for v in t.metric("profiler__replayer_passes")})
                missing = [m for m in metrics if not t.has(m)]
                if missing:
                    row["missing"] = missing
            except (OSError, ValueError) as e:
                row["error"] = f"{e}; {(p.stdout + p.stderr)[-400:]}"
        rows.append(row)
        print(f"{name:<28}{len(metrics):>4} metrics  passes {row.get('passes')}  {wall:.1f} s"
              f"{'  missing ' + ','.join(row['missing']) if row.get('missing') else ''}{row.get('error', '')}",
              flush=True)
    (OUT / "ncu_pass_counts.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
