"""The one place that knows how a trial is started and how its results are read back.

Two kinds of trial, each a separate process:

* ``probe`` — fits or not, and how fast, without a profiler. A workload runs in ``dnnprof.runs.sweep.probe``;
  a script runs as is, with ``collect/trial_hooks`` (started by ``collect/_boot/sitecustomize.py``) timing its
  steps and reading its peaks.
* ``profile`` — ``dnnprof profile WORKLOAD …`` or ``dnnprof run … -- SCRIPT``, treated as a black box: the point's
  kernels, phases, GPU busy %, NVML/GPM and memory come from the run directory's ``summary.json``.

Everything else in the sweep sees only point records (plain dicts, the ``points`` of ``sweep.json``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dnnprof.runs.sweep.spec as S
from dnnprof.collect.config import with_boot
from dnnprof.collect.trial_failure import classify_exit, classify_text, last_error_line
from dnnprof.runs.sweep.limits import address_space_limiter, host_total_bytes
from dnnprof.runs.sweep.stats import percentile
from dnnprof.runs.sweep.trial import Finished

#: Kernels kept per profiled point.
TOP_KERNELS = 10
#: ``dnnprof profile/run`` need two unprofiled steps before the window.
PROFILE_MIN_WARMUP = 2
#: GPM / NVML metrics copied onto a point (mean over its timed window).
SAMPLE_METRICS = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct",
                  "power_w", "sm_clock_mhz")


@dataclass(frozen=True)
class Plan:
    """One trial to run.

    Attributes:
        kind: ``probe`` or ``profile``.
        batch_size, precision, mode: the point.
        role: why it runs: ``search`` (auto batch search), ``grid`` (an explicit batch size), ``profile``.
    """

    kind: str
    batch_size: int
    precision: str
    mode: str
    role: str = "search"

    @property
    def id(self) -> str:
        """Stable name of the trial: its folder, and its key when a sweep resumes."""
        return f"{self.mode}-{self.precision}-b{self.batch_size}-{self.kind}"


def _env(spec: S.SweepSpec, plan: Plan, folder: Path, boot: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update({S.ENV_BATCH_SIZE: str(plan.batch_size), S.ENV_PRECISION: plan.precision, S.ENV_MODE: plan.mode,
                S.ENV_DEVICE: spec.device, S.ENV_STEPS: str(spec.steps),
                "DNNPROF_SWEEP_WARMUP_STEPS": str(spec.warmup_steps)})
    for key in ("DNNPROF_SWEEP_TRIAL", "DNNPROF_SWEEP_RESULT", "DNNPROF_SWEEP_MEMORY_LIMIT", "DNNPROF_SWEEP_RLIMIT_AS"):
        env.pop(key, None)
    if spec.memory_limit is not None:
        env["DNNPROF_SWEEP_MEMORY_LIMIT"] = spec.memory_limit.to_env()
        if spec.device == "cpu":
            # Under an address-space limit, glibc's per-thread arenas (64 MiB of address space each) and its
            # growing mmap threshold (freed memory kept mapped) make the usable memory lumpy and unpredictable.
            # One arena and a fixed threshold make address space track what the trial really holds.
            env.setdefault("MALLOC_ARENA_MAX", "1")
            env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    limit = cpu_limit_bytes(spec)
    if limit and plan.kind == "profile":
        env["DNNPROF_SWEEP_RLIMIT_AS"] = str(limit)
    if boot:
        env["DNNPROF_SWEEP_TRIAL"] = plan.id
        env["DNNPROF_SWEEP_RESULT"] = str(folder / "script.json")
        with_boot(env)
    return env


def cpu_limit_bytes(spec: S.SweepSpec) -> int | None:
    """The address-space limit of a CPU trial, or None (GPU sweeps limit the GPU, not the address space)."""
    if spec.memory_limit is None or spec.device != "cpu":
        return None
    return spec.memory_limit.resolve(host_total_bytes())


def command(spec: S.SweepSpec, plan: Plan, folder: Path) -> tuple[list[str], dict[str, str],
                                                                   Callable[[], None] | None]:
    """``(argv, env, preexec_fn)`` of a trial; its outputs go to ``folder``."""
    t = spec.target
    values = {"batch_size": plan.batch_size, "precision": plan.precision, "mode": plan.mode,
              "device": spec.device, "steps": spec.steps}
    limit = cpu_limit_bytes(spec)
    # Probes: the limit binds the trial process from its first instruction. Profile trials: only the processes
    # that import torch (collect/trial_hooks.py), so dnnprof's own parent process, which builds the profile, is
    # not limited.
    preexec = address_space_limiter(limit) if limit and plan.kind == "probe" else None
    py = sys.executable
    if plan.kind == "probe" and t.kind == "workload":
        argv = [py, "-m", "dnnprof.runs.sweep.probe", "--result", str(folder / "probe.json"),
                "--workload", t.name, "--batch-size", str(plan.batch_size), "--precision", plan.precision,
                "--mode", plan.mode, "--device", spec.device, "--warmup-steps", str(spec.warmup_steps),
                "--steps", str(spec.steps), "--min-time", str(spec.probe_min_time_s)]
        return argv, _env(spec, plan, folder, boot=False), preexec
    if plan.kind == "probe":
        return t.command(values), _env(spec, plan, folder, boot=True), preexec
    run_dir = str(folder / "run")
    if t.kind == "workload":
        argv = [py, "-m", "dnnprof", "profile", t.name, "--batch-size", str(plan.batch_size),
                "--precision", plan.precision, "--mode", plan.mode, "--device", spec.device,
                "--steps", str(spec.steps), "--warmup-steps", str(max(PROFILE_MIN_WARMUP, spec.warmup_steps)), "--out", run_dir,
                "--quiet"]
    else:
        argv = [py, "-m", "dnnprof", "run", "--steps", str(spec.steps),
                "--warmup-steps", str(max(PROFILE_MIN_WARMUP, spec.warmup_steps)), "--out", run_dir, "--quiet", "--"]
        argv += t.command(values)
        if spec.counters:
            argv.insert(argv.index("--"), "--counters")
    if spec.counters and t.kind == "workload":
        argv.append("--counters")
    return argv, _env(spec, plan, folder, boot=True), preexec


# --- reading results ----------------------------------------------------------------------------------------
def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def base_point(plan: Plan) -> dict[str, Any]:
    """A point record with every key ``sweep.json`` promises, unmeasured."""
    return {
        "id": plan.id, "kind": plan.kind, "role": plan.role, "batch_size": plan.batch_size,
        "precision": plan.precision, "mode": plan.mode, "status": "error", "message": "", "limited_by": None,
        "throughput_samples_per_s": None, "throughput_items_per_s": None, "throughput_unit": None,
        "step_time_ms": None, "step_time_p90_ms": None, "steps_timed": None,
        "gpu_busy_pct": None, "gpu_busy_source": None,
        "sm_active_pct": None, "sm_occupancy_pct": None, "tensor_active_pct": None, "dram_bw_util_pct": None,
        "peak_memory_bytes": None, "peak_allocated_bytes": None, "peak_reserved_bytes": None,
        "peak_rss_bytes": None, "peak_address_space_bytes": None, "memory_capacity_bytes": None,
        "memory_limit_bytes": None, "limit_resource_bytes": None,
        "wall_s": None, "phase_s": None, "returncode": None, "device": None, "run_dir": None,
    }


def read_point(spec: S.SweepSpec, plan: Plan, folder: Path, fin: Finished, sweep_dir: Path) -> dict[str, Any]:
    """The point record of a finished trial: what it measured, or why it failed."""
    p = base_point(plan)
    p.update(wall_s=round(fin.wall_s, 3), returncode=fin.returncode)
    if fin.start_error:
        p.update(status="error", limited_by="error", message=fin.start_error)
        return p
    limit = cpu_limit_bytes(spec)
    if plan.kind == "probe" and spec.target.kind == "workload":
        _from_probe(p, _load(folder / "probe.json"))
    elif plan.kind == "probe":
        _from_script(p, _load(folder / "script.json"), plan)
    else:
        _from_profile(p, folder, plan, sweep_dir)
        script = _load(folder / "script.json")
        if script and p["peak_reserved_bytes"] is None:
            _memory_from(p, script)
    if limit and p["memory_limit_bytes"] is None:
        p["memory_limit_bytes"] = limit
    if spec.device == "cpu" and limit:
        p["limit_resource_bytes"] = p["peak_address_space_bytes"]
        p["memory_capacity_bytes"] = limit
    measured = p.pop("_measured", False)
    explained = p.pop("_explained", False)  # the trial wrote down its own failure (probe JSON, script exception)
    failure = classify_exit(fin.returncode, fin.stderr_tail, timed_out=fin.timed_out, timeout_s=spec.timeout_s)
    if failure is not None and (fin.timed_out or not explained):
        p.update(status=failure.status, limited_by=failure.limited_by, message=failure.message)
    elif not explained and not measured:
        what = "the profile run left no summary.json" if plan.kind == "profile" else "the trial wrote no result"
        p.update(status="error", limited_by="error", message=last_error_line(fin.stderr_tail) or what)
    if p["status"] == "ok":
        p["limited_by"] = None
    return p


def _memory_from(p: dict[str, Any], doc: dict[str, Any]) -> None:
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes", "peak_address_space_bytes",
                "memory_capacity_bytes", "memory_limit_bytes"):
        if doc.get(key) is not None:
            p[key] = doc[key]
    if p["peak_reserved_bytes"] is not None:
        p["peak_memory_bytes"] = p["peak_reserved_bytes"]
        p["limit_resource_bytes"] = p["peak_allocated_bytes"]  # see probe._memory
    elif p["peak_rss_bytes"] is not None:
        p["peak_memory_bytes"] = p["peak_rss_bytes"]
    if doc.get("device"):
        p["device"] = doc["device"]


def _from_probe(p: dict[str, Any], doc: dict[str, Any] | None) -> None:
    if doc is None:
        return  # died before writing: the exit status and stderr tell
    p["status"] = doc.get("status", "error")
    p["message"] = doc.get("message", "")
    p["limited_by"] = doc.get("limited_by")
    p["_explained"] = True
    p["_measured"] = p["status"] == "ok"
    for key in ("throughput_samples_per_s", "throughput_items_per_s", "step_time_ms", "step_time_p90_ms",
                "steps_timed", "peak_memory_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes",
                "peak_address_space_bytes", "memory_capacity_bytes", "memory_limit_bytes", "limit_resource_bytes",
                "device"):
        if doc.get(key) is not None:
            p[key] = doc[key]
    p["throughput_unit"] = doc.get("unit")
    p["phase_s"] = doc.get("phase_s")
    nv = doc.get("nvml") or {}
    for key in ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"):
        p[key] = nv.get(key)
    if nv.get("gpu_util_pct") is not None:
        p["gpu_busy_pct"], p["gpu_busy_source"] = nv["gpu_util_pct"], "nvml"


def _from_script(p: dict[str, Any], doc: dict[str, Any] | None, plan: Plan) -> None:
    p["status"] = "ok"
    p["_measured"] = True  # a script's exit status decides whether it fitted; read_point checks it
    if doc is None:
        p["message"] = "nothing measured: the command never imported torch in a Python process"
        return
    _memory_from(p, doc)
    exc = doc.get("exception")
    if exc:
        p.update(status=exc["status"], limited_by=exc["limited_by"], message=f"{exc['message']}")
        p["_explained"] = True
        return
    times = doc.get("step_times_ms") or []
    if times:
        p["steps_timed"] = len(times)
        p["step_time_ms"] = round(float(percentile(times, 0.5) or 0.0), 4)
        p["step_time_p90_ms"] = round(float(percentile(times, 0.9) or 0.0), 4)
        window = doc.get("window_s") or 0.0
        if window > 0:
            p["throughput_samples_per_s"] = round(len(times) * plan.batch_size / window, 3)
            if doc.get("items") is not None:
                p["throughput_items_per_s"] = round(doc["items"] / window, 3)
    elif doc.get("torch_imported") and doc.get("steps_seen", 0) < 2:
        p["message"] = ("fewer than 2 steps seen after warm-up (optimizer steps, or DataLoader batches in a "
                        "script without an optimizer): no step time (call dnnprof.step() each iteration, or run "
                        "more steps)")


def find_summary(folder: Path) -> Path | None:
    """``summary.json`` of a profile trial's run directory (complete or ``.incomplete``)."""
    for name in ("run", "run.incomplete"):
        path = folder / name / "summary.json"
        if path.is_file():
            return path
    hits = sorted(folder.glob("*/summary.json"))
    return hits[0] if hits else None


def _from_profile(p: dict[str, Any], folder: Path, plan: Plan, sweep_dir: Path) -> None:
    path = find_summary(folder)
    doc = _load(path) if path is not None else None
    if path is None or doc is None:
        return  # read_point turns a missing summary into an error with the stderr line
    p["run_dir"] = os.path.relpath(path.parent, sweep_dir)
    p["status"] = "ok"
    p["_measured"] = True
    p.update(summary_metrics(doc, plan.batch_size))
    run = doc.get("run") or {}
    if run.get("complete") is False:
        p["message"] = f"profile incomplete (collector status {run.get('status')})"


def summary_metrics(doc: dict[str, Any], batch_size: int) -> dict[str, Any]:
    """What a point takes from a run's ``summary.json`` (``dnnprof.summary/1`` plus run extras)."""
    out: dict[str, Any] = {}
    t = doc.get("throughput") or {}
    if t.get("step_time_median_us") is not None:
        out["step_time_ms"] = round(t["step_time_median_us"] / 1000.0, 4)
    if t.get("step_time_p90_us") is not None:
        out["step_time_p90_ms"] = round(t["step_time_p90_us"] / 1000.0, 4)
    out["steps_timed"] = t.get("steps")
    if t.get("steps_per_s"):
        out["throughput_samples_per_s"] = round(t["steps_per_s"] * batch_size, 3)
    out["throughput_items_per_s"] = t.get("items_per_s")
    out["throughput_unit"] = t.get("unit")
    gpu = doc.get("gpu") or {}
    if gpu.get("busy_pct") is not None and gpu.get("has_activity", True):
        out["gpu_busy_pct"], out["gpu_busy_source"] = gpu["busy_pct"], "trace"
    out["tensor_core_pct"] = gpu.get("tensor_core_pct")
    metrics = (doc.get("samples") or {}).get("metrics") or {}
    out["samples"] = {k: metrics[k].get("mean") for k in SAMPLE_METRICS if k in metrics}
    for key in ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"):
        if key in metrics:
            out[key] = metrics[key].get("mean")
    mem = doc.get("memory") or {}
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        if mem.get(key) is not None:
            out[key] = mem[key]
    if mem.get("peak_reserved_bytes") is not None:
        out["peak_memory_bytes"] = mem["peak_reserved_bytes"]
    out["memory_breakdown"] = mem.get("breakdown")
    ph = doc.get("phases") or {}
    total = sum(v for v in ph.values() if isinstance(v, (int, float))) or 0.0
    out["phases_us"] = {k.removesuffix("_us"): v for k, v in ph.items()}
    out["phases_pct"] = {k.removesuffix("_us"): round(100.0 * v / total, 2) for k, v in ph.items()} if total else {}
    out["families"] = [{"family": f.get("family"), "pct": f.get("pct"), "total_us": f.get("total_us"),
                        "calls": f.get("calls")} for f in (doc.get("families") or [])]
    out["top_kernels"] = [_kernel(k) for k in (doc.get("kernels") or [])[:TOP_KERNELS]]
    if not gpu.get("has_activity", True) and doc.get("host_ops"):
        # A CPU-only run has no kernels: its operators (self time) play their part, each its own family.
        ops = doc["host_ops"]
        out["top_kernels"] = [{**_kernel({}), "name": o.get("name"), "short_name": o.get("name"), "family": "cpu op",
                               "pct": o.get("self_pct"), "total_us": o.get("self_us"), "calls": o.get("calls")}
                              for o in ops[:TOP_KERNELS]]
        out["families"] = [{"family": str(o.get("name")).removeprefix("aten::"), "pct": o.get("self_pct"),
                            "total_us": o.get("self_us"), "calls": o.get("calls")} for o in ops]
    out["layers"] = [{"name": r.get("name"), "pct": r.get("pct"), "total_us": r.get("total_us")}
                     for r in (doc.get("layers") or [])[:TOP_KERNELS]]
    out["kernel_us"] = gpu.get("kernel_us")
    out["device"] = {"kind": "cuda" if gpu.get("has_activity", True) else "cpu", **(doc.get("device") or {})}
    out["findings"] = [{"id": f.get("id"), "title": f.get("title"), "severity": f.get("severity")}
                       for f in (doc.get("findings") or [])[:5]]
    return out


def _kernel(k: dict[str, Any]) -> dict[str, Any]:
    occ, src = None, None
    for key, name in (("achieved_occupancy_pct", "ncu"), ("est_achieved_occupancy_pct", "kineto_estimate"),
                      ("theoretical_occupancy_pct", "theoretical")):
        if k.get(key) is not None:
            occ, src = k[key], name
            break
    return {"name": k.get("name"), "short_name": k.get("short_name") or k.get("name"), "family": k.get("family"),
            "layer": k.get("layer") or "", "phase": k.get("phase") or "", "pct": k.get("pct"),
            "total_us": k.get("total_us"), "calls": k.get("calls"), "tensor_core": k.get("tensor_core"),
            "precision": k.get("precision"), "occupancy_pct": occ, "occupancy_source": src,
            "theoretical_occupancy_pct": k.get("theoretical_occupancy_pct"),
            "occupancy_limiters": k.get("occupancy_limiters"), "bound": k.get("bound"),
            "sm_throughput_pct": k.get("sm_throughput_pct"), "memory_throughput_pct": k.get("memory_throughput_pct")}


__all__ = ["Plan", "base_point", "classify_text", "command", "find_summary", "read_point", "summary_metrics"]
