"""Every built-in workload, training and inference, on one GPU: step time, throughput, busy %, GPM figures and the
capture overhead of a default-mode profile — the table issue 3 asks for.

Run on the GPU machine (dnnprof from this checkout on PYTHONPATH):
    OUT=out python benchmarks/gpu/workload_table.py                         # 8 workloads x 2 modes, ~8 min on an H100 (3 + 10 steps)
    OUT=out python benchmarks/gpu/workload_table.py --workloads gpt2,bert --precision amp-bf16
    OUT=out python benchmarks/gpu/workload_table.py --smoke                 # the -tiny workloads on the CPU (harness check)

For each workload one ``dnnprof sweep W --batch-sizes B --modes train,infer --profile-points all`` (B = the
workload's default batch): every point runs twice, each time in its own process — as a probe (the workload alone,
NVML/GPM sampled from a helper process: the plain step time, throughput, busy %, GPM SM active / occupancy /
tensor / DRAM %) and as a default-mode dnnprof profile (its steps' median). Dilation = profiled step / probe step at
the same point, on the same machine, minutes apart; ``in_process_dilation`` = the profile's timed steps / the
unprofiled steps of the same process (``overhead.dilation`` of its summary). Writes $OUT/workload_table.json, each sweep under
$OUT/<workload>/, and prints a Markdown table last. A workload that fails keeps its row with the status and message.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("deepspeech2", "gpt2", "bert", "resnet50", "inception_v3", "transformer", "seq2seq", "dcgan")
COLUMNS = ("workload", "mode", "batch", "precision", "status", "plain_step_ms", "profiled_step_ms", "dilation",
           "in_process_dilation",
           "throughput", "unit", "gpu_busy_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct",
           "dram_bw_util_pct", "peak_memory_gib", "message")


def sweep(workload: str, out: Path, device: str, precision: str, steps: int, warmup: int,
          timeout_s: float) -> tuple[dict[str, Any] | None, str, float]:
    """Run one sweep; (sweep.json document or None, the command's tail, wall seconds)."""
    from dnnprof.workloads.registry import get_spec

    batch = get_spec(workload).default_batch_size
    cmd = [sys.executable, "-m", "dnnprof", "sweep", workload, "--device", device, "--batch-sizes", str(batch),
           "--precisions", precision, "--modes", "train,infer", "--profile-points", "all", "--steps", str(steps),
           "--warmup-steps", str(warmup), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        tail = (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        tail = f"timed out after {timeout_s:.0f} s"
    wall = time.monotonic() - t0
    doc = out / "sweep.json"
    return (json.loads(doc.read_text()) if doc.is_file() else None), tail, wall


def in_process_dilation(sweep_dir: Path, point: dict[str, Any] | None) -> float | None:
    """The profile's own dilation: its timed steps against the unprofiled steps of the same process (before and
    after the windows), from the run directory's summary."""
    if not point or not point.get("run_dir"):
        return None
    path = sweep_dir / point["run_dir"] / "summary.json"
    if not path.is_file():
        return None
    return (json.loads(path.read_text()).get("overhead") or {}).get("dilation")


def rows_of(workload: str, doc: dict[str, Any], sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per (mode, batch, precision): the probe's plain figures and the profile's step time."""
    pts = doc.get("points", [])
    out = []
    for probe in (p for p in pts if p.get("kind") == "probe"):
        key = (probe["mode"], probe["batch_size"], probe["precision"])
        prof = next((p for p in pts if p.get("kind") == "profile"
                     and (p["mode"], p["batch_size"], p["precision"]) == key), None)
        plain = probe.get("step_time_ms")
        profiled = prof.get("step_time_ms") if prof else None
        status = probe["status"] if prof is None or probe["status"] != "ok" else prof["status"]
        peak = probe.get("peak_memory_bytes")
        out.append({
            "workload": workload, "mode": key[0], "batch": key[1], "precision": key[2], "status": status,
            "plain_step_ms": plain, "profiled_step_ms": profiled,
            "dilation": round(profiled / plain, 3) if plain and profiled else None,
            "in_process_dilation": in_process_dilation(sweep_dir, prof),
            "throughput": probe.get("throughput_items_per_s") or probe.get("throughput_samples_per_s"),
            "unit": probe.get("throughput_unit"), "gpu_busy_pct": probe.get("gpu_busy_pct"),
            "sm_active_pct": probe.get("sm_active_pct"), "sm_occupancy_pct": probe.get("sm_occupancy_pct"),
            "tensor_active_pct": probe.get("tensor_active_pct"), "dram_bw_util_pct": probe.get("dram_bw_util_pct"),
            "peak_memory_gib": round(peak / 2**30, 2) if peak else None,
            "message": " | ".join(m for m in (probe.get("message"), prof.get("message") if prof else "") if m)[:300],
        })
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
        return str(v).replace("|", "/")

    head = [c for c in COLUMNS if c != "message"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in head) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--precision", default="amp-bf16", help="one precision for every workload (default amp-bf16)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=10, help="unprofiled steps first (3 left short-step "
                                                                  "workloads still warming up: clocks, allocator)")
    ap.add_argument("--timeout", type=float, default=420.0, help="seconds for one workload's sweep")
    ap.add_argument("--smoke", action="store_true", help="the -tiny workloads on the CPU, fp32, 3 steps")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    names = [w for w in a.workloads.split(",") if w]
    device, precision, steps, warmup = "cuda", a.precision, a.steps, a.warmup_steps
    if a.smoke:
        names, device, precision, steps, warmup = [f"{w}-tiny" for w in names], "cpu", "fp32", 3, 1
    rows: list[dict[str, Any]] = []
    runs = []
    for w in names:
        doc, tail, wall = sweep(w, out / w, device, precision, steps, warmup, a.timeout)
        runs.append({"workload": w, "wall_s": round(wall, 1), "tail": tail if doc is None else ""})
        got = rows_of(w, doc, out / w) if doc else []
        rows += got or [{"workload": w, "status": "failed", "message": tail[-300:]}]
        print(f"[{w}] {wall:.0f} s, {len(got)} points", flush=True)
    env: dict[str, Any] = {}
    try:
        import torch

        env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""}
    except ImportError:
        pass
    (out / "workload_table.json").write_text(json.dumps({"env": env, "device": device, "precision": precision,
                                                          "steps": steps, "rows": rows, "runs": runs}, indent=1))
    print(f"\n{env.get('gpu') or device}, torch {env.get('torch')}, {precision}, {steps} timed steps\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
