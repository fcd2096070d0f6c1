"""Nsight Compute counters for a 4-layer GPT-2 training step: all kernels vs dnnprof's selective capture.

Run on the GPU machine (needs ncu; no network):
    OUT=out python benchmarks/gpu/ncu_gpt2_counters.py            # everything, 5-8 min on an H100
    OUT=out python benchmarks/gpu/ncu_gpt2_counters.py --quick    # dnnprof's default pass only, ~1 min
    OUT=out python benchmarks/gpu/ncu_gpt2_counters.py --quick --metrics a,b    # other metrics (pass counts)

Workload: GPT-2 with 4 layers (transformers ``GPT2LMHeadModel(GPT2Config(n_layer=4))`` when transformers is
installed, else an equivalent built-in model), random init, batch 8 x 512 tokens, bf16 autocast, AdamW. The 4th
step is wrapped in ``torch.cuda.nvtx.range_push("step3")``/``range_pop`` and ``cudaProfilerStart/Stop``.

Runs, each a fresh process timed end to end (wall clock, as a user waits for it):
  plain         the workload alone
  kineto        torch.profiler over step 3 → the step's kernel launches ($OUT/kernels_step3.json)
  full          ncu over every kernel of the step (NVTX range, process-wide push/pop scope), dnnprof's metrics
  sel-<s>       dnnprof's selective capture (collect/ncu.py) for strategy <s>: signatures covering ≥ 95% of
                the step's GPU time, predicted launches vs launches ncu really profiled, replay passes, coverage
                after the join
  none          ncu over the same program with a filter that matches nothing (ncu's fixed cost)
  details       8 kernels (GEMMs, norms, elementwise) with SpeedOfLight/LaunchStats/Occupancy sections exported to $OUT/details.ncu-rep and
                re-printed as the details page (labels and --print-metric-name name) and the raw page: parser
                fixtures; read back through ncu_report to test dnnprof's .ncu-rep path.
Writes $OUT/ncu_gpt2_counters.json (all numbers), the ncu CSV logs, and prints a summary table last.
Target: counters covering ≥ 95% of GPU time in ≤ 25 s of wall time.
"""

from __future__ import annotations

import argparse
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
STEPS, PROFILE_STEP, RANGE = 4, 3, "step3"


# --- the workload (runs in child processes) -----------------------------------------------------------------------
def _model():  # type: ignore[no-untyped-def]
    import torch
    from torch import nn
    from torch.nn import functional as F

    try:
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=4)
        return GPT2LMHeadModel(cfg), "transformers"
    except ImportError:
        pass

    class Block(nn.Module):
        def __init__(self, d: int = 768, h: int = 12) -> None:
            super().__init__()
            self.h, self.ln1, self.ln2 = h, nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out, self.drop = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
            x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))

    class GPT2(nn.Module):
        def __init__(self, vocab: int = 50257, d: int = 768, layers: int = 4, ctx: int = 1024) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks, self.ln, self.drop = nn.ModuleList(Block(d) for _ in range(layers)), nn.LayerNorm(d), \
                nn.Dropout(0.1)
            for m in self.modules():  # GPT-2's initialisation
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)

        def forward(self, ids: torch.Tensor, labels: torch.Tensor):  # type: ignore[no-untyped-def]
            x = self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.wte.weight.t()
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))
            return type("Out", (), {"loss": loss})()

    return GPT2(), "builtin"


def _mark(event: str, **extra: object) -> None:
    """Append (event, wall clock) to $BENCH_TIMES: where a run's time goes (before the step, in it, after it)."""
    if os.environ.get("BENCH_TIMES"):
        with open(os.environ["BENCH_TIMES"], "a") as f:
            f.write(json.dumps({"event": event, "t": time.time(), **extra}) + "\n")


def worker(mode: str, kernels_json: str | None, main_thread_only: bool = False) -> None:
    import threading

    _mark("python-started")
    import torch

    torch.manual_seed(0)
    model, impl = _model()
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 512), device="cuda")
    prof = None
    for step in range(STEPS):
        if step == PROFILE_STEP:
            torch.cuda.synchronize()
            if os.environ.get("NCU_EMPTY_CACHE") == "1":  # hand cached blocks back: less memory for ncu to restore
                torch.cuda.empty_cache()
            if mode == "kineto":
                acts = [torch.profiler.ProfilerActivity.CUDA]
                acts += [torch.profiler.ProfilerActivity.CPU] if main_thread_only else []  # launch threads
                prof = torch.profiler.profile(activities=acts)
                prof.__enter__()
            else:
                torch.cuda.profiler.start()
            segments = torch.cuda.memory_snapshot()  # what ncu saves and restores around a multi-pass launch
            _mark("range-push", segments=len(segments), reserved_bytes=sum(x["total_size"] for x in segments))
            torch.cuda.nvtx.range_push(RANGE)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == PROFILE_STEP:
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            _mark("range-pop")
            if prof is not None:
                prof.__exit__(None, None, None)
            else:
                torch.cuda.profiler.stop()
    torch.cuda.synchronize()
    _mark("steps-done")
    if prof is not None and kernels_json:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "t.json"
            prof.export_chrome_trace(str(trace))
            events = json.loads(trace.read_text())["traceEvents"]
        kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["args"]["correlation"])
        if main_thread_only:  # what a thread-scoped NVTX push/pop range holds: no backward (autograd's own thread)
            # launches through the runtime (PyTorch's kernels) and the driver (cuBLAS nvjet, cuDNN: cuLaunchKernelEx)
            runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                       and "correlation" in e.get("args", {})]
            tids = {e["tid"] for e in runtime}
            main = threading.get_native_id()
            if main not in tids:  # the trace names threads otherwise: the thread of the step's first launch
                main = min(runtime, key=lambda e: e["ts"])["tid"]
            mine = {e["args"]["correlation"] for e in runtime if e["tid"] == main}
            kernels = [e for e in kernels if e["args"]["correlation"] in mine]
        names: list[str] = []
        index: dict[str, int] = {}
        rows = []
        t0 = min(e["ts"] for e in kernels)
        for e in kernels:
            a = e["args"]
            i = index.setdefault(e["name"], len(names))
            if i == len(names):
                names.append(e["name"])
            rows.append([i, *a["grid"], *a["block"], a.get("registers per thread", -1), a.get("shared memory", -1),
                         round(e["dur"] * 1000), round((e["ts"] - t0) * 1000), a["correlation"], a.get("stream", -1)])
        Path(kernels_json).write_text(json.dumps({
            "source": f"torch.profiler over step {PROFILE_STEP}, GPT-2 4 layers ({impl}), {torch.cuda.get_device_name()}",
            "columns": ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                        "shared_memory_bytes", "dur_ns", "start_ns", "correlation", "stream"],
            "names": names, "rows": rows, "model": impl}))


# --- the driver ---------------------------------------------------------------------------------------------------
def _timed(cmd: list[str], timeout: float) -> tuple[float, int | None, str]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return time.monotonic() - t0, p.returncode, (p.stdout + p.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        return time.monotonic() - t0, None, "timeout"


def _profile_from(kernels_json: Path):  # type: ignore[no-untyped-def]
    import numpy as np

    from dnnprof.model.profile import Profile
    from dnnprof.model.schema import empty_table

    doc = json.loads(kernels_json.read_text())
    rows = np.asarray(doc["rows"], dtype=np.int64)
    p = Profile()
    ids = np.asarray([p.intern(n) for n in doc["names"]], dtype=np.int32)
    t = empty_table("kernels", len(rows))
    for j, col in enumerate(doc["columns"]):
        t[col if col != "name" else "name_id"] = ids[rows[:, j]] if col == "name" else rows[:, j].astype(t[col].dtype)
    order = np.argsort(t["start_ns"], kind="stable")
    p.tables["kernels"] = {c: v[order] for c, v in t.items()}
    p.tables["kernels"]["step"][:] = PROFILE_STEP
    p.tables["kernels"]["rank"][:] = 0
    return p


def _ncu_run(name: str, cmd: list[str], log: Path, profile, timeout: float) -> dict:  # type: ignore[no-untyped-def]
    import numpy as np

    from dnnprof.analysis.bounds import compute_bounds
    from dnnprof.analysis.counters_join import join_counters
    from dnnprof.collect.ncu import run_ncu

    times = log.with_suffix(".times.jsonl")
    times.unlink(missing_ok=True)
    os.environ["BENCH_TIMES"] = str(times)
    t_start = time.time()
    try:
        res = run_ncu(cmd, log, timeout_s=timeout)
    finally:
        os.environ.pop("BENCH_TIMES", None)
    t_end = time.time()
    text = log.read_text(errors="replace") if log.is_file() else ""
    row = {"run": name, "status": res.status, "message": res.message, "wall_s": round(res.wall_s, 2),
           "profiled_launches": len(res.table) if res.table is not None else 0,
           "progress_lines": len(re.findall(r'==PROF== Profiling "', text)), "command": cmd, "log": str(log)}
    if times.is_file():  # seconds from ncu's start to each event of the profiled process, and to ncu's end
        marks = [json.loads(ln) for ln in times.read_text().splitlines() if ln.strip()]
        row["timeline_s"] = {**{m["event"]: round(m["t"] - t_start, 2) for m in marks},
                             "ncu-done": round(t_end - t_start, 2)}
        row["memory_at_step"] = next(({k: v for k, v in m.items() if k not in ("event", "t")} for m in marks
                                      if m["event"] == "range-push"), {})
    if res.table is not None:
        p = profile()
        j = join_counters(p, res.table, steps=[PROFILE_STEP])
        passes = res.table.metric("profiler__replayer_passes") if res.table.has("profiler__replayer_passes") else []
        if res.table.has("profiler__replayer_bytes_mem_backed_up"):
            backed = res.table.metric("profiler__replayer_bytes_mem_backed_up")
            row["backed_up_gb"] = {"median": round(float(np.median(backed)) / 1e9, 3),
                                   "max": round(float(np.max(backed)) / 1e9, 3)}
        row.update(coverage=round(j.coverage, 4), matched_launches=j.matched_kernels, total_launches=j.total_kernels,
                   ncu_signatures=len(j.groups), unmatched_ncu_launches=len(j.unmatched_ncu_rows),
                   passes=sorted({float(x) for x in passes}))
        try:
            b = compute_bounds(res.table.metrics)
            row.update(flops_precisions=sorted(b.flops_by_precision),
                       bound_classes={k: int((b.bound == k).sum()) for k in sorted(set(b.bound.tolist()))})
        except (KeyError, ValueError) as e:  # a metric set without the throughputs (pass-cost variants)
            row.update(bounds_error=str(e))
    print(f"[{name}] {row['status']} {row['wall_s']} s, {row['profiled_launches']} launches, "
          f"coverage {row.get('coverage')}, passes {row.get('passes')}, timeline {row.get('timeline_s')}, "
          f"backed up {row.get('backed_up_gb')}, memory {row.get('memory_at_step')}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["plain", "kineto"])
    ap.add_argument("--kernels-json")
    ap.add_argument("--thread-scope", action="store_true", help="the NVTX range holds only the main thread's launches "
                    "(ncu's default push/pop scope, as in the reference CSV of 185 kernels: forward, loss and optimizer, "
                    "no backward) instead of the whole process's")
    ap.add_argument("--quick", action="store_true", help="only dnnprof's default strategy; no all-kernels run, no "
                    "details fixture")
    ap.add_argument("--strategies", default="auto,first-per-config,first-invocation,name")
    ap.add_argument("--metrics", default="", help="comma-separated metrics instead of dnnprof's (to compare costs)")
    ap.add_argument("--filter-mode", default="exclude", choices=["exclude", "include"])
    ap.add_argument("--plain-runs", type=int, default=1, help="time the plain run this many times (the first "
                    "one on a fresh machine also pays for a cold disk cache)")
    ap.add_argument("--full-timeout", type=float, default=240.0, help="stop the all-kernels run after this long")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME|METRICS|EXTRA",
                    help="with --quick: also run dnnprof's default plan as NAME with METRICS (comma-separated; empty "
                    "= dnnprof's; 'dnnprof-w1,w2' = dnnprof's without the metrics containing w1 or w2; 'dnnprof+m1,m2' = dnnprof's and m1, m2) and EXTRA ncu options (space-separated, e.g. '--cache-control none'; 'env:NAME=VALUE' sets a variable for the "
                    "target, e.g. 'env:NCU_EMPTY_CACHE=1' empties PyTorch's cache before the step); repeatable")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.kernels_json, args.thread_scope)
        return

    import numpy as np

    from dnnprof.collect import ncu as N
    from dnnprof.ingest.ncu_csv import read_ncu_csv, read_ncu_report

    OUT.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    ncu = N.find_ncu()
    results: dict = {"runs": [], "env": {"ncu": ncu}}
    if ncu is None:
        sys.exit("ncu not found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute/*); set DNNPROF_NCU")
    results["env"]["ncu_version"] = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip()
    scope = "--nvtx-push-pop-scope" in N.ncu_help(ncu) and not args.thread_scope
    results["env"]["push_pop_scope_option"] = scope
    results["env"]["thread_scope"] = args.thread_scope

    for i in range(args.plain_runs):  # the first run of a fresh machine also reads torch from a cold disk cache
        times = OUT / f"plain{i}.times.jsonl"
        times.unlink(missing_ok=True)
        os.environ["BENCH_TIMES"] = str(times)
        t_start = time.time()
        wall, rc, tail = _timed([*me, "--worker", "plain"], 600)
        os.environ.pop("BENCH_TIMES", None)
        marks = [json.loads(ln) for ln in times.read_text().splitlines()] if times.is_file() else []
        timeline = {m["event"]: round(m["t"] - t_start, 2) for m in marks}
        timeline.update(next(({k: v for k, v in m.items() if k not in ("event", "t")} for m in marks
                              if m["event"] == "range-push"), {}))
        results["runs"].append({"run": "plain" if i == 0 else f"plain{i + 1}", "wall_s": round(wall, 2),
                                "returncode": rc, "tail": tail[-500:], "timeline_s": timeline})
        print(f"[plain] {wall:.1f} s rc={rc} timeline {timeline}", flush=True)
    kj = OUT / "kernels_step3.json"
    wall, rc, tail = _timed([*me, "--worker", "kineto", "--kernels-json", str(kj),
                             *(["--thread-scope"] if args.thread_scope else [])], 600)
    results["runs"].append({"run": "kineto", "wall_s": round(wall, 2), "returncode": rc, "tail": tail[-500:]})
    if not kj.is_file():
        sys.exit(f"kineto run failed: {tail}")

    def profile():  # type: ignore[no-untyped-def]
        return _profile_from(kj)

    import torch

    cc = "{}.{}".format(*torch.cuda.get_device_capability())
    results["env"].update(gpu=torch.cuda.get_device_name(), cc=cc, torch=torch.__version__,
                          model=json.loads(kj.read_text())["model"])
    seq = N.LaunchSequence.from_profile(profile(), step=PROFILE_STEP)
    sel = N.select_signatures(seq, N.DEFAULT_COVERAGE)
    results["step"] = {"launches": len(seq), "gpu_time_ns": int(seq.dur_ns.sum()),
                       "unique_signatures": sel.unique_signatures, "selected_signatures": len(sel.signatures),
                       "selected_coverage": round(sel.coverage, 4)}
    print(f"[step] {len(seq)} launches, {sel.unique_signatures} signatures, {len(sel.signatures)} cover "
          f"{100 * sel.coverage:.1f}%", flush=True)
    target = [*me, "--worker", "plain"]

    strategies = ["auto"] if args.quick else [s for s in args.strategies.split(",") if s]
    seen: set[str] = set()
    for strat in strategies:
        plan = N.plan_filters(seq, sel, strat, mode=args.filter_mode)
        if plan.strategy in seen:
            continue
        seen.add(plan.strategy)
        name = f"sel-{plan.strategy}"
        log = OUT / f"ncu_sel_{plan.strategy}.csv"
        cmd = N.build_ncu_command(ncu, target, log, nvtx_range=RANGE, plan=plan, compute_capability=cc,
                                  process_scope=scope)
        if args.metrics:
            cmd[cmd.index("--metrics") + 1] = args.metrics
        row = _ncu_run(name, cmd, log, profile, 600)
        row.update(strategy=plan.strategy, requested=strat, filter_mode=plan.mode,
                   predicted_launches=len(plan.profiled), options=plan.options(), kernels=plan.kernels,
                   predicted_coverage=round(plan.predicted_coverage, 4), predicted_missed=plan.missed_signatures,
                   launch_count=plan.launch_count)
        results["runs"].append(row)
        for v in args.variant:
            vname, vmetrics, vextra = ([*v.split("|"), "", ""])[:3]
            vlog = OUT / f"ncu_{vname}.csv"
            toks = vextra.split()
            venv = dict(t[4:].split("=", 1) for t in toks if t.startswith("env:"))  # env:NAME=VALUE for the target
            toks = [t for t in toks if not t.startswith("env:")]
            cache = toks[toks.index("--cache-control") + 1] if "--cache-control" in toks else "all"
            toks = [t for i, t in enumerate(toks) if "--cache-control" not in toks[max(0, i - 1):i + 1]]
            vcmd = N.build_ncu_command(ncu, target, vlog, nvtx_range=RANGE, plan=plan, compute_capability=cc,
                                       process_scope=scope, cache_control=cache, extra=toks)
            if vmetrics.startswith("dnnprof+"):  # dnnprof's list and these
                vcmd[vcmd.index("--metrics") + 1] += "," + vmetrics[len("dnnprof+"):]
            elif vmetrics.startswith("dnnprof-"):  # dnnprof's list without the metrics containing these words
                drop = vmetrics[len("dnnprof-"):].split(",")
                mine = vcmd[vcmd.index("--metrics") + 1].split(",")
                vcmd[vcmd.index("--metrics") + 1] = ",".join(m for m in mine if not any(d in m for d in drop))
            elif vmetrics:
                vcmd[vcmd.index("--metrics") + 1] = vmetrics
            saved = {k: os.environ.get(k) for k in venv}
            os.environ.update(venv)
            try:
                vrow = _ncu_run(vname, vcmd, vlog, profile, 600)
            finally:
                for k, old in saved.items():
                    if old is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = old
            vrow.update(strategy=plan.strategy, metrics=vmetrics or "dnnprof", extra=vextra)
            results["runs"].append(vrow)

    if not args.quick:
        log = OUT / "ncu_none.csv"
        cmd = N.build_ncu_command(ncu, target, log, nvtx_range=RANGE, plan=None, compute_capability=cc,
                                  process_scope=scope, extra=["--kernel-name", "regex:^$"])
        results["runs"].append(_ncu_run("none", cmd, log, profile, 600))
        log = OUT / "ncu_full.csv"
        cmd = N.build_ncu_command(ncu, target, log, nvtx_range=RANGE, plan=None, compute_capability=cc,
                                  process_scope=scope)
        results["runs"].append(_ncu_run("full", cmd, log, profile, args.full_timeout))
    if args.quick:
        _report(results, seq, sel, cc)
        return

    # details-page fixture and the .ncu-rep path
    rep = OUT / "details"
    base = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/"]
    base += ["--nvtx-push-pop-scope", "process"] if scope else []
    wall, rc, tail = _timed([*base, "--section", "SpeedOfLight", "--section", "LaunchStats", "--section", "Occupancy",
                             "--kernel-name-base", "demangled", "--kernel-name",
                             "regex:nvjet|gemm|layer_norm|softmax|sdpa|fused_dropout|elementwise",
                             "--launch-count", "8", "--kill", "yes", "-f", "-o", str(rep), *target], 600)
    det: dict = {"run": "details", "wall_s": round(wall, 2), "returncode": rc}
    if Path(f"{rep}.ncu-rep").is_file():
        for name, extra in (("ncu_details_labels.csv", []), ("ncu_details_names.csv", ["--print-metric-name", "name"]),
                            ("ncu_details_raw.csv", ["--page", "raw"])):
            out = subprocess.run([ncu, "--import", f"{rep}.ncu-rep", "--csv", *extra], capture_output=True,
                                 text=True, timeout=300).stdout
            (OUT / name).write_text(out)
            try:
                det[name] = {"launches": len(read_ncu_csv(OUT / name))}
            except ValueError as e:
                det[name] = {"error": str(e)}
        try:
            r = read_ncu_report(f"{rep}.ncu-rep")
            raw = read_ncu_csv(OUT / "ncu_details_raw.csv")
            det["ncu_report"] = {"launches": len(r), "duration_matches_csv": bool(np.allclose(
                r.metric("gpu__time_duration.sum"), raw.metric("gpu__time_duration.sum"), rtol=1e-6))}
        except ValueError as e:
            det["ncu_report"] = {"error": str(e)}
    else:
        det["tail"] = tail[-800:]
    results["runs"].append(det)

    _report(results, seq, sel, cc)


def _report(results: dict, seq, sel, cc: str) -> None:  # type: ignore[no-untyped-def]
    (OUT / "ncu_gpt2_counters.json").write_text(json.dumps(results, indent=1, default=str))
    plain = min(r["wall_s"] for r in results["runs"] if r["run"].startswith("plain"))
    print(f"\nGPU {results['env']['gpu']} (cc {cc}), {results['env']['ncu_version'].splitlines()[-1]}, model "
          f"{results['env']['model']}; step: {len(seq)} launches, {sel.unique_signatures} signatures, "
          f"{len(sel.signatures)} for {100 * sel.coverage:.1f}% of {seq.dur_ns.sum() / 1e6:.2f} ms GPU time")
    print(f"{'run':<36}{'status':<16}{'wall s':>8}{'x plain':>9}{'launches':>10}{'predicted':>11}{'coverage':>10}"
          f"{'passes':>8}")
    for r in results["runs"]:
        cov = r.get("coverage")
        passes = ",".join(f"{p:g}" for p in r.get("passes") or [])
        print(f"{r['run']:<36}{r.get('status', 'rc=' + str(r.get('returncode'))):<16}{r['wall_s']:>8.1f}"
              f"{r['wall_s'] / plain:>9.2f}{r.get('profiled_launches', ''):>10}{r.get('predicted_launches', ''):>11}"
              f"{'' if cov is None else f'{100 * cov:.1f}%':>10}{passes:>8}")
    met = [r["run"] for r in results["runs"] if r.get("coverage", 0) >= 0.95 and r["wall_s"] <= 25]
    print(f"target (>= 95% of GPU time in <= 25 s): {'met by ' + ', '.join(met) if met else 'not met'}")


if __name__ == "__main__":
    main()
