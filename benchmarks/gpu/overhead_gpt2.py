"""What dnnprof's capture costs: GPT-2 124M step time with no profiler, default mode and --full mode.

Run on the GPU machine (no network; dnnprof from this checkout, msgspec importable):
    OUT=out python benchmarks/gpu/overhead_gpt2.py            # ~2–3 min on an H100
    OUT=out python benchmarks/gpu/overhead_gpt2.py --variants # also without NVML, and without external correlation
    OUT=out python benchmarks/gpu/overhead_gpt2.py --repeats 3 # 3 rounds of (plain, default, full), interleaved
    python benchmarks/gpu/overhead_gpt2.py --smoke                # CPU check of this harness, measures nothing

Workload (as in docs/collection.md): transformers ``GPT2LMHeadModel(GPT2Config())`` (124M, random init), batch
8 x 512 tokens, bf16 autocast, ``AdamW(fused=True)``, ``loss.item()`` every step (as a training loop logs).
The same script (this file with ``--train``) runs in every configuration, each in a fresh process:

  none      plain ``python overhead_gpt2.py --train``: per-step host intervals, median of 20 steps after 10 warm-up
  default   ``dnnprof run --warmup-steps 10 --steps 20`` (timing window: CUDA + user ranges, no ops; then a
            2-step attribution window)
  full      ``dnnprof run --full --warmup-steps 10 --steps 20`` (one window: CPU ops, shapes, stacks, memory)

Step times are host intervals between consecutive ``optimizer.step()`` returns (the loop syncs on ``loss.item()``,
so they equal the GPU's pace), measured by the script itself in every configuration, and also read from the run
directory dnnprof wrote (its own per-step timing and its unprofiled in-process baseline). Dilation = median step in
the profiled window / median step of the plain run. Targets: default <= 1.05x, full <= 1.3x.
Writes $OUT/overhead_gpt2.json and prints a summary table last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "out"))
#: Warm-up and profiled steps; ``--smoke`` shrinks them.
RUN = {"warmup": 10, "steps": 20, "smoke": False}


def train(steps: int, times_path: str, smoke: bool = False) -> None:
    """The workload: a plain training loop, no dnnprof markers. Writes per-step host intervals (ns) as JSON.

    ``smoke``: a 1-layer GPT-2 on the CPU, only to check this harness where there is no GPU.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    dev = "cpu" if smoke else "cuda"
    cfg = GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=1000, n_positions=64) if smoke else GPT2Config()
    batch, seq = (2, 32) if smoke else (8, 512)
    model = GPT2LMHeadModel(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=not smoke)
    data = torch.randint(0, cfg.vocab_size, (steps, batch, seq), device=dev)
    ends = [time.perf_counter_ns()]
    for i in range(steps):
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(data[i], labels=data[i]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        ends.append(time.perf_counter_ns())
    Path(times_path).write_text(json.dumps([b - a for a, b in itertools.pairwise(ends)]))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _script_median(times_path: Path, first: int, count: int) -> tuple[float, list[float]]:
    ts = json.loads(times_path.read_text())[first:first + count]
    return statistics.median(ts) / 1e6, [t / 1e6 for t in ts]


def run_config(name: str, dnnprof_args: list[str] | None, tag: str = "") -> dict:
    times = OUT / f"steps_{name}{tag}.json"
    warmup, n = RUN["warmup"], RUN["steps"]
    target = [sys.executable, __file__, "--train", "--steps", str(warmup + n + 15), "--times", str(times),
              *(["--smoke"] if RUN["smoke"] else [])]
    run_dir = OUT / f"run_{name}{tag}"
    if dnnprof_args is None:
        cmd = target
    else:
        cmd = [sys.executable, "-m", "dnnprof", "run", "--warmup-steps", str(warmup), "--steps", str(n),
               "--out", str(run_dir), "-q", *dnnprof_args, "--", *target]
    env = _env()
    for a in [a for a in cmd if a.startswith("env:")]:  # "env:NAME=VALUE" entries set the environment
        var, _, value = a[4:].partition("=")
        env[var] = value
        cmd.remove(a)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    row: dict = {"config": name, "command": cmd, "returncode": r.returncode, "wall_s": round(wall, 1)}
    if r.returncode != 0:
        row["error"] = (r.stderr or r.stdout)[-3000:]
        return row
    if dnnprof_args is None:
        row["median_ms"], row["steps_ms"] = _script_median(times, warmup, n)
        return row
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    cap = meta["capture"]
    timed = cap["timed_steps"]
    # dnnprof step k = the script's iteration k+1 (the first boundary is the second optimizer step). The boundary
    # that ends the window (profiler stop, in optimizer.step() before loss.item()) falls inside the script's last
    # interval: that interval is dnnprof's work between steps, not a profiled step, so it is left out.
    row["median_ms"], row["steps_ms"] = (_script_median(times, timed[0] + 1, max(len(timed) - 1, 1)) if timed
                                         else (None, []))
    # After the collector is done (its last boundary falls in script iteration plan.last): a capture that left a
    # cost behind (CUPTI still attached) shows here, against the plain run.
    last = int((cap.get("plan") or {}).get("post_baseline", [0, 0])[1])
    tail = json.loads(times.read_text())[last + 2:]
    row["after_median_ms"] = statistics.median(tail) / 1e6 if tail else None
    ov = cap["overhead"]
    row.update(
        dnnprof_profiled_median_ms=(ov["profiled"]["median_us"] or 0) / 1000,
        dnnprof_baseline_median_ms=(ov["baseline"]["median_us"] or 0) / 1000,
        dnnprof_in_process_dilation=ov["dilation"],
        attribution_median_ms=(ov["attribution"]["median_us"] or 0) / 1000 if ov["attribution"]["median_us"] else None,
        matched_kernels_pct=(cap.get("attribution") or {}).get("matched_kernels_pct"),
        clock=cap.get("clock"),
        gpu_busy_pct=summary["gpu"]["busy_pct"],
        layers=len(summary["layers"]),
        samples={k: v["mean"] for k, v in summary["samples"]["metrics"].items()},
        nvml=meta.get("nvml"),
        memory=summary["memory"].get("breakdown"),
        peak_allocated_bytes=summary["memory"].get("peak_allocated_bytes"),
        host_top=(summary.get("host_hotspots") or {}).get("top_user_lines", [])[:3],
        status=meta["status"], messages=meta["messages"],
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=45, help=argparse.SUPPRESS)
    p.add_argument("--times", default="", help=argparse.SUPPRESS)
    p.add_argument("--variants", action="store_true", help="also default mode without NVML sampling, and with "
                                                              "the timing window's external correlation off")
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the harness, measures nothing")
    p.add_argument("--repeats", type=int, default=1, help="rounds of all configurations, interleaved")
    args = p.parse_args()
    if args.train:
        train(args.steps, args.times, smoke=args.smoke)
        return
    if args.smoke:
        RUN.update(warmup=2, steps=3, smoke=True)
    OUT.mkdir(parents=True, exist_ok=True)
    configs: list[tuple[str, list[str] | None]] = [("none", None), ("default", []), ("full", ["--full"])]
    if args.variants:
        configs.insert(2, ("default_no_nvml", ["--no-nvml"]))
        configs.insert(3, ("default_noextcorr", ["env:DNNPROF_TIMING_EXTERNAL_CORRELATION=0"]))
    rows = []
    for k in range(args.repeats):
        tag = f"_r{k}" if args.repeats > 1 else ""
        got: list[dict] = []
        for name, a in configs:
            r = run_config(name, a, tag)
            r["round"] = k
            base = got[0].get("median_ms") if got else r.get("median_ms")
            if base and r.get("median_ms"):
                r["dilation"] = round(r["median_ms"] / base, 4)
            got.append(r)
            print(f"round {k} {name}: {r.get('median_ms')} ms/step, dilation {r.get('dilation')}, in-process "
                  f"{r.get('dnnprof_in_process_dilation')}, wall {r.get('wall_s')} s", flush=True)
        rows += got
    medians = {name: statistics.median(ds) for name, _ in configs
               if (ds := [r["dilation"] for r in rows if r["config"] == name and r.get("dilation")])}
    import torch

    doc = {"gpu": "cpu (smoke)" if RUN["smoke"] else torch.cuda.get_device_name(0), "torch": torch.__version__,
           "warmup": RUN["warmup"], "steps": RUN["steps"],
           "targets": {"default": 1.05, "full": 1.3}, "repeats": args.repeats, "median_dilation": medians,
           "rows": rows}
    (OUT / "overhead_gpt2.json").write_text(json.dumps(doc, indent=1, default=str))
    print(f"\nGPT-2 124M, batch 8x512, bf16 autocast, AdamW(fused) on {doc['gpu']} (torch {doc['torch']})")
    print(f"{'config':<18}{'rnd':>4}{'step ms':>9}{'dilation':>10}{'in-proc':>9}{'attr ms':>9}{'after ms':>9}{'matched%':>9}"
          f"{'busy%':>7}{'layers':>7}{'SM act%':>8}{'wall s':>8}")
    for r in rows:
        if r.get("error"):
            print(f"{r['config']:<18}{r['round']:4d} FAILED (exit {r['returncode']}): {r['error'].splitlines()[-1:]}")
            continue

        def f(v: object, fmt: str) -> str:
            return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(int(fmt.split(".")[0].rstrip("d")))

        print(f"{r['config']:<18}{r['round']:4d}{f(r.get('median_ms'), '9.2f')}{f(r.get('dilation'), '10.3f')}"
              f"{f(r.get('dnnprof_in_process_dilation'), '9.3f')}{f(r.get('attribution_median_ms'), '9.2f')}"
              f"{f(r.get('after_median_ms'), '9.2f')}{f(r.get('matched_kernels_pct'), '9.1f')}"
              f"{f(r.get('gpu_busy_pct'), '7.1f')}{f(r.get('layers'), '7d')}"
              f"{f((r.get('samples') or {}).get('sm_active_pct'), '8.1f')}{f(r.get('wall_s'), '8.1f')}")

    print("median dilation over rounds: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
