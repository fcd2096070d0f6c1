"""Is each kind of profiler window valid, and what does it cost? One fresh process per scenario.

Run on the GPU machine (dnnprof from this checkout on PYTHONPATH, transformers present):
    OUT=out python benchmarks/gpu/timing_window_probe.py                 # ~2 min on an H100 (7 fresh processes)
    OUT=out python benchmarks/gpu/timing_window_probe.py --only timing,none
    python benchmarks/gpu/timing_window_probe.py --smoke                  # CPU check of this harness

Workload: GPT-2 124M, batch 8 x 512, bf16 autocast, fused AdamW, ``loss.item()`` every step (``overhead_gpt2.py``).
Each scenario runs in its own process: 6 unprofiled steps, a window of 10 steps opened and closed the way the
collector does it (``dnnprof.collect.windows.Window``, ``ProfilerStep#N`` ranges), the trace exported, then 10
unprofiled steps. Reported: median step before / inside / after the window (the first step after the stop pays
the CUPTI teardown and is shown apart), stop and export seconds, and whether the trace has GPU times (kernels with
a non-zero duration): PyTorch 2.11's CUDA-only sessions export ``ts = dur = 0`` for every GPU event.

Scenarios: ``none``; ``cuda_only`` (torch.profiler, CUDA activity alone, saved right after it stops);
``timing`` (dnnprof's timing window: CUDA + user ranges, no ops); ``timing_nvml20`` / ``timing_nvml50`` (plus the
NVML/GPM sampler every 20 / 50 ms); ``timing_stack`` (plus the host stack sampler, 10 ms); ``full_nostack``
(CPU ops, shapes, memory events, module ranges: ``--full`` without Python stacks). With ``--only``, also:
``timing_samplers`` (stack + NVML 20 ms), ``kernels_only`` (GPU activity without runtime-call records, where this
PyTorch accepts activity filters), ``attribution``, ``full``.
Writes $OUT/timing_window_probe.json and prints a table last.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("none", "cuda_only", "timing", "timing_nvml20", "timing_nvml50", "timing_stack", "full_nostack")
#: Run only when named with --only.
EXTRA = ("timing_samplers", "kernels_only", "attribution", "full")
WARM, WINDOW, AFTER = 6, 10, 10


def _trace_check(path: Path) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X"]
    kern = [e for e in ev if e.get("cat") == "kernel"]
    return {"kernels": len(kern), "kernels_with_time": sum(1 for e in kern if e.get("dur", 0) > 0),
            "runtime": sum(1 for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")),
            "cpu_ops": sum(1 for e in ev if e.get("cat") == "cpu_op"),
            "user_ranges": sum(1 for e in ev if e.get("cat") == "user_annotation"),
            "bytes": path.stat().st_size}


def _session(torch: Any, scenario: str, out: Path) -> tuple[Any, Any, Any]:
    """(start, per-step hook, stop-and-export) callables for one scenario."""
    from dnnprof.collect.windows import Window

    cuda = torch.cuda.is_available()
    state: dict[str, Any] = {}
    if scenario in ("timing", "timing_samplers", "timing_nvml20", "timing_nvml50", "timing_stack", "attribution",
                    "full", "full_nostack"):
        kind = "timing" if scenario.startswith("timing") else {"full_nostack": "attribution"}.get(scenario, scenario)

        def start(k: int) -> None:
            w = Window(torch, kind, k, cuda=cuda)
            if scenario == "full_nostack":  # what --full would be without Python stacks
                orig = torch.profiler.profile

                def profile(**kw: Any) -> Any:
                    return orig(**{**kw, "record_shapes": True, "profile_memory": True})

                torch.profiler.profile = profile
                try:
                    w.start()
                finally:
                    torch.profiler.profile = orig
            else:
                w.start()
            w.open_step(k)
            state["w"] = w
            if scenario != "timing" and scenario.startswith("timing"):
                state["samplers"] = _samplers(torch, scenario)

        def step(k: int) -> None:
            state["w"].close_step()
            state["w"].open_step(k)

        def stop() -> dict[str, Any]:
            t = time.perf_counter()
            state["w"].stop()
            stop_s = time.perf_counter() - t
            for s in state.get("samplers", []):
                s.stop()
            state["w"].export(out)
            w = state["w"]
            return {"stop_s": round(stop_s, 3), "export_s": w.export_s, "op_scopes": w.scopes,
                    **_trace_check(out / f"{w.kind}.json.gz")}

        return start, step, stop
    if scenario in ("cuda_only", "kernels_only"):
        pa = torch.profiler.ProfilerActivity

        def start(k: int) -> None:
            if scenario == "cuda_only":
                acts: list[Any] = [pa.CUDA if cuda else pa.CPU]
            else:
                from torch.profiler import profiler as tp

                if not hasattr(tp, "_parse_activities"):
                    raise NotImplementedError(f"torch {torch.__version__} takes no activity filters")
                acts = [pa.CPU, {pa.CUDA: ["CONCURRENT_KERNEL", "GPU_MEMCPY", "GPU_MEMSET"]}]
            state["p"] = torch.profiler.profile(activities=acts)
            state["p"].start()

        def stop() -> dict[str, Any]:
            t = time.perf_counter()
            state["p"].stop()
            stop_s = time.perf_counter() - t
            path = out / f"{scenario}.json.gz"
            t = time.perf_counter()
            state["p"].export_chrome_trace(str(path))
            return {"stop_s": round(stop_s, 3), "export_s": round(time.perf_counter() - t, 3), **_trace_check(path)}

        return start, lambda k: None, stop
    return (lambda k: None), (lambda k: None), (lambda: {})


def _samplers(torch: Any, scenario: str) -> list[Any]:
    """The host stack sampler (10 ms) and/or the NVML/GPM sampler (20 or 50 ms), as the scenario names."""
    from dnnprof.collect.nvml import Nvml
    from dnnprof.collect.sampler import NvmlSampler
    from dnnprof.collect.stacks import StackSampler

    out: list[Any] = [StackSampler()] if scenario in ("timing_samplers", "timing_stack") else []
    nvml = Nvml()
    if "stack" not in scenario and torch.cuda.is_available() and nvml.open():
        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        h = nvml.handle(index=None if os.environ.get("CUDA_VISIBLE_DEVICES") else 0, uuid=str(uuid) if uuid else None)
        if h is not None:
            out.append(NvmlSampler(nvml, [(0, h)], period_s=0.02 if scenario != "timing_nvml50" else 0.05))
    for s in out:
        s.start()
    return out


def child(scenario: str, out: Path, smoke: bool) -> dict[str, Any]:
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from capture_costs_gpt2 import build

    step = build(smoke)
    start, hook, stop = _session(torch, scenario, out)
    times: list[int] = []
    info: dict[str, Any] = {}
    last = time.perf_counter_ns()
    for i in range(WARM + WINDOW + AFTER):
        if i == WARM:
            try:
                start(i)
            except NotImplementedError as e:
                return {"scenario": scenario, "skipped": str(e)}
        elif WARM < i < WARM + WINDOW:
            hook(i)
        elif i == WARM + WINDOW:
            info = stop()
        last = time.perf_counter_ns()
        step()
        now = time.perf_counter_ns()
        times.append(now - last)
    ms = [t / 1e6 for t in times]
    return {"scenario": scenario, "before_ms": statistics.median(ms[2:WARM]),
            "inside_ms": statistics.median(ms[WARM:WARM + WINDOW]), "first_after_ms": ms[WARM + WINDOW],
            "after_ms": statistics.median(ms[WARM + WINDOW + 1:]), "steps_ms": [round(x, 2) for x in ms], **info}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", default="")
    p.add_argument("--only", default="")
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    if a.child:
        tmp = out / f"probe_{a.child}"
        tmp.mkdir(exist_ok=True)
        print("RESULT " + json.dumps(child(a.child, tmp, a.smoke)))
        return
    rows = []
    for name in [s for s in (*SCENARIOS, *EXTRA) if (s in a.only.split(",") if a.only else s in SCENARIOS)]:
        cmd = [sys.executable, __file__, "--child", name, *(["--smoke"] if a.smoke else [])]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with contextlib.suppress(subprocess.TimeoutExpired):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
            got = [ln[7:] for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            rows.append(json.loads(got[-1]) if got else {"scenario": name, "error": r.stderr[-1500:]})
            continue
        rows.append({"scenario": name, "error": "timed out"})
    import torch

    doc = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "rows": rows}
    (out / "timing_window_probe.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{doc['gpu']} torch {doc['torch']}: median ms/step (x = inside / before)")
    print(f"{'scenario':<17}{'before':>8}{'inside':>8}{'x':>7}{'1st aft':>8}{'after':>8}{'stop s':>7}{'exp s':>7}"
          f"{'kern':>7}{'timed':>7}{'rt':>7}{'ops':>7}")
    for r in rows:
        if "before_ms" not in r:
            print(f"{r['scenario']:<17} {r.get('skipped') or r.get('error', '').splitlines()[-1:]}")
            continue
        print(f"{r['scenario']:<17}{r['before_ms']:8.2f}{r['inside_ms']:8.2f}{r['inside_ms'] / r['before_ms']:7.3f}"
              f"{r['first_after_ms']:8.1f}{r['after_ms']:8.2f}{r.get('stop_s', 0):7.2f}{r.get('export_s', 0):7.2f}"
              f"{r.get('kernels', 0):7d}{r.get('kernels_with_time', 0):7d}{r.get('runtime', 0):7d}"
              f"{r.get('cpu_ops', 0):7d}")


if __name__ == "__main__":
    main()
