"""``dnnprof bench`` on one GPU: GPT-2 124M (sequence 1024; batch 1 and 8) and ResNet-50 (batch 1 and 64) on every
backend there, and the harness's own cost against a plain CUDA-event loop written here.

Run on the GPU machine (dnnprof from this checkout on PYTHONPATH; transformers, torchvision; onnx, onnxscript and
onnxruntime-gpu / tensorrt when present):
    OUT=out python benchmarks/gpu/bench_table.py                    # ~6 min on an H100
    OUT=out python benchmarks/gpu/bench_table.py --models resnet50 --precision fp32

Each model is benchmarked by ``dnnprof bench --json`` in its own processes, one per backend group (eager and CUDA
graphs; torch.compile; the ONNX backends, which share one export), each under a time limit, inside a global
deadline; a group that runs out of time keeps its rows as ``error`` with the reason. Then, in this process, the same
eager model at the same batch is timed by a plain loop (pinned H2D copy, forward, D2H copy, CUDA events, sync) of the
same iterations: ``harness_overhead_pct`` = dnnprof's eager p50 latency / the plain loop's p50 - 1; and, on the same
model object in this process, alternating rounds of the plain loop and dnnprof's trial (``in_process_overhead_pct``:
the harness alone, without what differs between two processes). Writes
$OUT/bench_table.json (the merged dnnprof.bench/1 documents and the overhead rows) and $OUT/bench_table.md.
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
HOOK = Path(__file__).resolve().parent / "bench_models.py"
BATCHES = {"gpt2": "1,8", "resnet50": "1,64"}
#: (backends, time limit in seconds) per group; the ONNX group exports once for its backends.
#: Each limit counts the whole process: importing torch (and transformers), building the model on the CPU and
#: moving it to the GPU, the eager reference per batch size, then the trials (CUDA graph capture, compilation).
#: On the first H100 run GPT-2's eager+CUDA-graph group ran out of its 45 s with nothing on stderr: the model was
#: built three times (once per hook call) and the limit left no room for it; now it is built once and every stage
#: prints a line to stderr, so a group that still runs out says where it was.
GROUPS = {
    "gpt2": [("eager,cuda-graph", 120), ("compile", 150), ("onnxruntime,onnxruntime-trt,tensorrt", 120)],
    "resnet50": [("eager,cuda-graph", 60), ("compile", 90), ("onnxruntime,onnxruntime-trt,tensorrt", 60)],
}
#: The groups stop here, so that with the plain loops and the in-process rounds (~60 s) the whole script stays
#: within 10 minutes.
DEADLINE_S = 500.0
ITERATIONS, WARMUP = 50, 5
#: Alternating rounds of the plain loop and dnnprof's trial in this process (``plain_loop``).
ROUNDS = 3


def run_group(model: str, backends: str, limit_s: float, precision: str, out: Path) -> dict[str, Any] | None:
    path = out / f"{model}-{backends.split(',')[0]}.json"
    cmd = [sys.executable, "-m", "dnnprof.cli.main", "bench", "--device", "cuda", "--precision", precision,
           "--batch-sizes", BATCHES[model], "--backends", backends, "--warmup", str(WARMUP), "--iterations",
           str(ITERATIONS), "--json", str(path), "--", "python", str(HOOK), model]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit_s)
        tail = (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        last = err.strip().splitlines()[-1:] or ["nothing on stderr"]
        tail = f"timed out after {limit_s:.0f} s; last stage: {last[0]}\n{err[-1500:]}"
    print(f"[{model} {backends}] {time.time() - t0:.0f} s\n{tail}", flush=True)
    if path.exists():
        return json.loads(path.read_text())
    empty = dict.fromkeys(("throughput_qps", "throughput_samples_per_s", "throughput_tokens_per_s", "latency_ms",
                           "h2d_ms", "gpu_compute_ms", "compute_ms", "d2h_ms", "enqueue_ms", "cv_pct"))
    return {"results": [{"backend": b, "batch_size": int(n), "status": "error", "reason": tail.strip()[-300:],
                         "diagnoses": [], **empty}
                        for b in backends.split(",") for n in BATCHES[model].split(",")]}


def plain_round(model: Any, host: Any, dev: Any) -> tuple[list[float], list[float]]:
    """One round of the plain loop: latencies (ms) and the host time inside the model's call (ms)."""
    import torch

    with torch.inference_mode():
        out = model(dev)
        out = out if torch.is_tensor(out) else out[0]  # GPT-2's output: its logits first
        pinned = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times, enqueue = [], []
        for i in range(WARMUP + ITERATIONS):
            start.record()
            dev.copy_(host, non_blocking=True)
            t0 = time.perf_counter()
            out = model(dev)
            t1 = time.perf_counter()
            out = out if torch.is_tensor(out) else out[0]
            pinned.copy_(out, non_blocking=True)
            end.record()
            end.synchronize()
            if i >= WARMUP:
                times.append(start.elapsed_time(end))
                enqueue.append((t1 - t0) * 1e3)
    return times, enqueue


def plain_loop(model_name: str, batch_size: int, precision: str) -> dict[str, Any]:
    """The same eager forward, timed the obvious way, with the same copies and synchronisation per query; then, on
    the same model object in this process, ``ROUNDS`` alternating rounds of this loop and of dnnprof's trial
    (``run_trial``), so the harness's cost is seen apart from what differs between processes (the groups run in
    their own): ``in_process_overhead_pct`` = median of dnnprof's p50s / median of the plain p50s - 1.
    ``enqueue_p50_ms`` is the host time inside the model's call (a clock read on each side of it)."""
    import runpy
    import statistics

    import torch

    from dnnprof.bench.sources import Source
    from dnnprof.bench.trial import Settings, run_trial

    build = runpy.run_path(str(HOOK))["build"]
    model, x, _ = build(model_name, batch_size)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    model = model.to("cuda", dtype=dtype).eval()
    x = x.to(dtype) if x.is_floating_point() else x
    host = x.pin_memory()
    dev = host.to("cuda")

    times, enqueue = plain_round(model, host, dev)
    source = Source(name=model_name, kind="script", device="cuda", precision=precision,
                    make_inputs=lambda b: (x,), model=model)
    plain_p50, harness_p50, harness_enqueue = [], [], []
    for _ in range(ROUNDS):
        t, _e = plain_round(model, host, dev)
        plain_p50.append(statistics.median(t))
        trial, _out = run_trial(source, "eager", batch_size, Settings(warmup=WARMUP, iterations=ITERATIONS),
                                None, None)
        if trial.status != "ok":
            raise RuntimeError(f"dnnprof's trial in this process: {trial.status}: {trial.reason}")
        harness_p50.append(statistics.median(trial.latency_ms))
        harness_enqueue.append(statistics.median(trial.enqueue_ms or [0.0]))
    del model, dev, source
    torch.cuda.empty_cache()
    p, h = statistics.median(plain_p50), statistics.median(harness_p50)
    times.sort()
    return {"p50_ms": times[len(times) // 2], "mean_ms": sum(times) / len(times), "iterations": len(times),
            "enqueue_p50_ms": statistics.median(enqueue), "in_process_plain_p50_ms": p,
            "in_process_dnnprof_p50_ms": h, "in_process_dnnprof_enqueue_p50_ms": statistics.median(harness_enqueue),
            "in_process_overhead_pct": (h / p - 1) * 100, "rounds": ROUNDS}


def overhead_markdown(rows: list[dict[str, Any]]) -> str:
    """The harness-overhead table: one row per (model, batch), no blank lines inside; why a figure is missing
    goes below the table."""
    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = ["### Harness overhead (eager, p50 latency)", "",
             "| model | batch | plain loop ms | dnnprof ms | overhead % | plain enqueue ms | dnnprof enqueue ms | "
             "in-process plain ms | in-process dnnprof ms | in-process overhead % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        pct, pl = r.get("harness_overhead_pct"), r["plain"]
        ipct = pl.get("in_process_overhead_pct")
        lines.append(f"| {r['model']} | {r['batch_size']} | {ms(pl.get('p50_ms'))} | "
                     f"{ms(r['dnnprof_p50_ms'])} | {'-' if pct is None else f'{pct:+.2f}'} | "
                     f"{ms(pl.get('enqueue_p50_ms'))} | {ms(r.get('dnnprof_enqueue_ms'))} | "
                     f"{ms(pl.get('in_process_plain_p50_ms'))} | {ms(pl.get('in_process_dnnprof_p50_ms'))} | "
                     f"{'-' if ipct is None else f'{ipct:+.2f}'} |")
        if r["plain"].get("error"):
            notes.append(f"- {r['model']} batch {r['batch_size']}: plain loop failed: {r['plain']['error']}")
        if r["dnnprof_p50_ms"] is None:
            notes.append(f"- {r['model']} batch {r['batch_size']}: no dnnprof eager result (see the table above)")
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="gpt2,resnet50")
    p.add_argument("--precision", default="fp16")
    p.add_argument("--groups", default="", help="only the backend groups whose first backend is listed "
                                                   "(eager, compile, onnxruntime); default all")
    p.add_argument("--deadline-s", type=float, default=DEADLINE_S)
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    from dnnprof.render.bench_table import markdown

    t0 = time.time()
    docs, overhead = {}, []
    for model in args.models.split(","):
        merged: dict[str, Any] = {"results": [], "knee": []}
        wanted = [g for g in args.groups.split(",") if g]
        for backends, limit in GROUPS[model]:
            if wanted and backends.split(",")[0] not in wanted:
                continue
            left = args.deadline_s - (time.time() - t0)
            if left < 20:
                print(f"[{model} {backends}] skipped: the {DEADLINE_S:.0f} s deadline is near", flush=True)
                continue
            doc = run_group(model, backends, min(limit, left), args.precision, out) or {}
            if "schema" in doc and "schema" not in merged:
                merged = {**doc, "results": merged["results"] + doc["results"], "knee": merged["knee"] + doc["knee"]}
            else:
                merged["results"] += doc.get("results", [])
                merged["knee"] += doc.get("knee", [])
        docs[model] = merged
        for b in BATCHES[model].split(","):
            eager = next((r for r in (merged or {}).get("results", [])
                          if r["backend"] == "eager" and r["batch_size"] == int(b) and r["status"] == "ok"), None)
            try:
                plain = plain_loop(model, int(b), args.precision)
            except Exception as e:  # noqa: BLE001 - keep the row, say why
                plain = {"error": f"{type(e).__name__}: {e}"}
            row = {"model": model, "batch_size": int(b), "plain": plain,
                   "dnnprof_p50_ms": eager["latency_ms"]["p50"] if eager else None,
                   "dnnprof_enqueue_ms": eager["enqueue_ms"] if eager else None}
            if eager and plain.get("p50_ms"):
                row["harness_overhead_pct"] = (eager["latency_ms"]["p50"] / plain["p50_ms"] - 1) * 100
            overhead.append(row)
            print(json.dumps(row), flush=True)
    (out / "bench_table.json").write_text(json.dumps({"docs": docs, "overhead": overhead,
                                                       "wall_s": time.time() - t0}, indent=1))
    md = [markdown(d) for d in docs.values() if d and "schema" in d]
    md.append(overhead_markdown(overhead))
    (out / "bench_table.md").write_text("\n\n".join(md) + "\n")
    print("\n\n".join(md))
    print(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
