"""One probe trial: build a workload at one batch size, step it, measure, write a JSON result, exit.

Run by the sweep as ``python -m dnnprof.runs.sweep.probe --result FILE --workload NAME ...`` in a process of its
own, so an out-of-memory or a crash here never touches the sweep. No profiler runs: step times and throughput
are what the job gets without dnnprof. On a GPU, NVML (and GPM on Hopper) is sampled during the timed window.

Exit status: 0 for ``ok`` and ``skipped`` (the device cannot run the precision), 3 for a failure that was caught
and written down. Anything else (killed, aborted) leaves no result and the sweep reads the exit status.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dnnprof.collect.environment import cpu_name
from dnnprof.collect.limits import MemoryLimit, apply_cuda_limit, host_memory_peaks
from dnnprof.collect.trial_failure import Failure, classify_exception
from dnnprof.runs.sweep.stats import percentile

FORMAT = "dnnprof.sweep.probe/1"
#: A probe never runs more timed steps than this, however short they are.
MAX_STEPS = 500


def _nvml_start(torch: Any) -> Any:
    """An NVML sampler on the current GPU, started; None when NVML is not there."""
    try:
        from dnnprof.collect.nvml import Nvml
        from dnnprof.collect.sampler import NvmlSampler
    except ImportError:
        return None
    nvml = Nvml()
    if not nvml.open():
        return None
    dev = int(torch.cuda.current_device())
    uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
    handle = nvml.handle(index=None if uuid else dev, uuid=str(uuid) if uuid else None)
    if handle is None:
        return None
    sampler = NvmlSampler(nvml, [(dev, handle)], period_s=0.02)
    sampler.start()
    return sampler


def _nvml_means(sampler: Any) -> dict[str, Any]:
    """Mean of every sampled metric over the timed window (``{metric: mean}``) plus the sampler's status."""
    if sampler is None:
        return {"status": "NVML not available"}
    sampler.stop()
    cols = sampler.columns()
    sums: dict[str, list[float]] = {}
    for m, v in zip(cols["metric"], cols["value"], strict=False):
        sums.setdefault(cols["metrics"][m], []).append(float(v))
    out: dict[str, Any] = {name: round(sum(v) / len(v), 3) for name, v in sums.items() if v}
    status = sampler.status()
    out["status"] = status.get("nvml", "")
    out["gpm"] = next(iter(status.get("gpm", {}).values()), "")
    return out


def _device_info(torch: Any, device: str) -> dict[str, Any]:
    if device != "cuda" or not torch.cuda.is_available():
        return {"kind": "cpu", "name": cpu_name(), "memory_bytes": _host_ram(), "cores": os.cpu_count()}
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"kind": "cuda", "name": p.name, "memory_bytes": int(p.total_memory),
            "compute_capability": f"{p.major}.{p.minor}", "sm_count": int(p.multi_processor_count)}


def _host_ram() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _memory(torch: Any, device: str, limit_bytes: int | None) -> dict[str, Any]:
    out: dict[str, Any] = dict(host_memory_peaks())
    if device == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        out["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        free, _total = torch.cuda.mem_get_info()
        capacity = int(free) + int(torch.cuda.memory_reserved())
        out["memory_capacity_bytes"] = min(capacity, limit_bytes) if limit_bytes else capacity
        out["peak_memory_bytes"] = out["peak_reserved_bytes"]
        # The edge is where allocated memory meets the capacity: on a failed cudaMalloc the caching allocator
        # frees its cache and retries, so what it had reserved beyond the allocated peak does not count.
        out["limit_resource_bytes"] = out["peak_allocated_bytes"]
    else:
        out["peak_memory_bytes"] = out.get("peak_rss_bytes")
        out["limit_resource_bytes"] = out.get("peak_address_space_bytes")
        out["memory_capacity_bytes"] = limit_bytes
    out["memory_limit_bytes"] = limit_bytes
    return out


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    """Build, warm up, time; every failure becomes a result instead of an exception."""
    res: dict[str, Any] = {"format": FORMAT, "status": "ok", "message": "", "limited_by": None,
                           "batch_size": args.batch_size, "phase": "import"}
    phases = res["phase_s"] = {}  # where the trial's time goes: seconds per phase, in order
    clock = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases[res["phase"]] = round(now - clock[0], 3)
        clock[0] = now
        res["phase"] = name

    try:
        import torch
    except MemoryError:
        return {**res, "status": "oom", "limited_by": "host_memory",
                "message": "MemoryError while importing torch: the memory limit is below what torch itself needs"}
    except ImportError as e:
        return {**res, "status": "error", "limited_by": "error", "message": f"torch is not installed: {e}"}
    limit = MemoryLimit.from_env(args.memory_limit) if args.memory_limit else None
    limit_bytes = None
    wl = None
    sampler = None
    try:
        phase("setup")
        if args.device == "cuda" and torch.cuda.is_available():
            limit_bytes = apply_cuda_limit(torch, limit)
        elif limit is not None:
            limit_bytes = limit.resolve(_host_ram() or 0)
        res["device"] = _device_info(torch, args.device)
        from dnnprof.workloads import UnsupportedConfig, build

        phase("build")
        try:
            wl = build(args.workload, batch_size=args.batch_size, precision=args.precision, mode=args.mode,
                       device=args.device)
        except UnsupportedConfig as e:
            return {**res, "status": "skipped", "message": str(e), "limited_by": "unsupported"}
        res["unit"] = wl.spec.unit
        res["items_per_step"] = wl.items_per_step
        phase("warmup")
        for _ in range(args.warmup_steps):
            wl.step()
        wl.synchronize()
        phase("measure")
        sampler = _nvml_start(torch) if args.device == "cuda" else None
        res.update(_timed(torch, wl, args))
        phase("done")
    except Exception as e:  # noqa: BLE001 - every failure of the trial is its result (OOM, CUDA error, bug)
        f = classify_exception(e)
        res.update(status=f.status, limited_by=f.limited_by, message=f.message, error_type=type(e).__name__)
        phase(res["phase"])  # the failing phase keeps its name; its time is what it took to fail
    finally:
        if sampler is not None:
            res["nvml"] = _nvml_means(sampler)
        if wl is not None:
            wl.close()
        del wl
        gc.collect()
    try:
        res.update(_memory(torch, args.device, limit_bytes))
    except RuntimeError as e:  # a sticky CUDA error (illegal address, device lost) poisons every later CUDA call
        res["memory_error"] = str(e)[:400]
    return res


def _timed(torch: Any, wl: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run at least ``steps`` steps and ``min_time`` seconds; step times from CUDA events on a GPU."""
    cuda = args.device == "cuda"
    marks: list[Any] = []
    host: list[float] = [time.perf_counter()]
    items0 = wl.items_processed
    if cuda:
        marks.append(torch.cuda.Event(enable_timing=True))
        marks[-1].record()
    n = 0
    t0 = host[0]
    while n < args.steps or (time.perf_counter() - t0 < args.min_time and n < MAX_STEPS):
        wl.step()
        n += 1
        if cuda:
            marks.append(torch.cuda.Event(enable_timing=True))
            marks[-1].record()
        host.append(time.perf_counter())
    wl.synchronize()
    window_s = time.perf_counter() - t0
    if cuda:
        times_ms = [a.elapsed_time(b) for a, b in itertools.pairwise(marks)]
    else:
        times_ms = [1000.0 * (b - a) for a, b in itertools.pairwise(host)]
    items = wl.items_processed - items0
    return {
        "steps_timed": n,
        "window_s": round(window_s, 6),
        "step_times_ms": [round(t, 4) for t in times_ms],
        "step_time_ms": round(statistics.median(times_ms), 4),
        "step_time_p90_ms": round(percentile(times_ms, 0.9) or 0.0, 4),
        "samples": n * args.batch_size,
        "items": items,
        "throughput_samples_per_s": round(n * args.batch_size / window_s, 3),
        "throughput_items_per_s": round(items / window_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dnnprof.runs.sweep.probe")
    ap.add_argument("--result", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--mode", default="train")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.0)
    ap.add_argument("--memory-limit", default=os.environ.get("DNNPROF_SWEEP_MEMORY_LIMIT") or None)
    args = ap.parse_args(argv)
    res = run_probe(args)
    path = Path(args.result)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(path)
    if res["status"] not in ("ok", "skipped"):
        print(f"dnnprof probe: {res['status']} at batch {args.batch_size}: {res['message']}", file=sys.stderr)
        return 3
    return 0


def _exit_now(code: int) -> None:
    """End the probe without the interpreter's teardown: the result is on disk, the DataLoader workers are
    stopped, and destroying a CUDA context that held most of the GPU's memory costs a second or more per trial."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


__all__ = ["FORMAT", "Failure", "main", "run_probe"]

if __name__ == "__main__":
    _exit_now(main())
