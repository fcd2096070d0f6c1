"""TBD-style run metrics from the collector's results: throughput, step times, overhead, samples, memory.

Step times here are host-side intervals between boundaries (what a user's training loop experiences; in steady
state they equal the GPU's pace). "Baseline" steps ran with no profiler at all (the second half of the warm-up and
a few steps after the windows), so ``dilation = profiled median / baseline median`` is the capture's cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

#: GPM and NVML metrics reported in the summary, in this order (others follow alphabetically).
KEY_METRICS = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct",
               "power_w", "sm_clock_mhz", "memory_used_bytes", "temperature_c")


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1000.0, 3)


def step_durations(col: dict[str, Any]) -> dict[int, int]:
    """Host-side duration (ns) of every completed step, by step index."""
    starts, ends = col.get("step_start_ns", []), col.get("step_end_ns", [])
    return {i: int(e - s) for i, (s, e) in enumerate(zip(starts, ends, strict=False))}


def _window(col: dict[str, Any], kind: str) -> range:
    for w in col.get("windows", []):
        if w["kind"] == kind and w.get("first_step") is not None and w.get("last_step") is not None:
            return range(int(w["first_step"]), int(w["last_step"]) + 1)
    return range(0)


def timed_window(col: dict[str, Any]) -> range:
    """The steps whose times the profile reports (timing window, else the single full/cpu window)."""
    for kind in ("timing", "full", "cpu"):
        r = _window(col, kind)
        if r:  # not len(r): a garbled window can be wider than an index can count
            return r
    return range(0)


def steps_in(steps: range, recorded: Iterable[int]) -> list[int]:
    """The ``recorded`` steps that lie in ``steps``, in order.

    The ranges come from collector.json (the plan, a window's first and last step); a garbled one can span 2**63
    steps. Walking the recorded steps and asking the range (O(1) per step) costs what the run recorded, never what
    the file claims.
    """
    return sorted(i for i in recorded if i in steps)


def _plan_range(col: dict[str, Any], key: str) -> range:
    return range(*(col.get("plan") or {}).get(key, [0, 0]))


def _stats(values: list[int]) -> dict[str, float | None]:
    if not values:
        return {"median_us": None, "p90_us": None, "mean_us": None, "count": 0}
    a = np.asarray(values, dtype=np.float64)
    return {"median_us": _us(float(np.median(a))), "p90_us": _us(float(np.percentile(a, 90))),
            "mean_us": _us(float(a.mean())), "count": int(a.size)}


def overhead(col: dict[str, Any]) -> dict[str, Any]:
    """Step times with and without the profiler, and their ratio."""
    dur = step_durations(col)
    pre, post = _plan_range(col, "pre_baseline"), _plan_range(col, "post_baseline")
    attrib = _window(col, "attribution")
    if not attrib and _window(col, "timing"):
        attrib = _window(col, "full")  # --full on a GPU: the full-detail window joined onto the timed one
    base_steps = baseline_steps(col)
    base = [dur[i] for i in base_steps]
    timed = [dur[i] for i in steps_in(timed_window(col), dur)]
    att = [dur[i] for i in steps_in(attrib, dur)]
    b, t, a = _stats(base), _stats(timed), _stats(att)
    gaps = boundary_gaps(col)
    ratio = (t["median_us"] / b["median_us"]) if b["median_us"] and t["median_us"] else None
    aratio = (a["median_us"] / b["median_us"]) if b["median_us"] and a["median_us"] else None
    return {
        "baseline_steps": base_steps,
        "baseline": b,
        "profiled": t,
        "attribution": a,
        "dilation": None if ratio is None else round(ratio, 4),
        "attribution_dilation": None if aratio is None else round(aratio, 4),
        # Before and after the windows separately: a profiler that left a cost behind would show here.
        "baseline_before": _stats([dur[i] for i in steps_in(pre, dur)]),
        "baseline_after": _stats([dur[i] for i in steps_in(post, dur)]),
        # dnnprof's own work at each boundary (between steps, outside the step times above).
        "boundary_gap_timed": _stats([gaps[i] for i in steps_in(timed_window(col), gaps)]),
        "boundary_gap_baseline": _stats([gaps[i] for i in steps_in(pre, gaps) + steps_in(post, gaps)]),
    }


def boundary_gaps(col: dict[str, Any]) -> dict[int, int]:
    """Time (ns) dnnprof spent at the boundary that ended each step (end of step i to start of step i+1)."""
    starts, ends = col.get("step_start_ns", []), col.get("step_end_ns", [])
    return {i: int(starts[i + 1] - ends[i]) for i in range(min(len(ends), len(starts) - 1))}


def baseline_steps(col: dict[str, Any]) -> list[int]:
    """The unprofiled steps of the plan (before and after the windows) that completed."""
    dur = step_durations(col)
    return steps_in(_plan_range(col, "pre_baseline"), dur) + steps_in(_plan_range(col, "post_baseline"), dur)


def _items(col: dict[str, Any], steps: list[int], workload: dict[str, Any] | None) -> list[float]:
    """Items of each of ``steps``: what ``dnnprof.step(items=…)`` or the DataLoader reported, else the workload's
    nominal count; shorter than ``steps`` when some step's count is unknown."""
    items = col.get("step_items", [])
    known = [items[i] for i in steps if i < len(items) and items[i] is not None]
    if workload and workload.get("items_per_step") and len(known) < len(steps):
        return [float(workload["items_per_step"])] * len(steps)
    return known


def _per_step(items: list[float]) -> float | int | None:
    if not items:
        return None
    return items[0] if len(set(items)) == 1 else round(float(np.mean(items)), 3)


def rates(durations_ns: list[int], items: list[float]) -> dict[str, float | None]:
    """Throughput of a set of steps, two ways.

    ``items_per_s`` / ``steps_per_s`` go with the median step time the report prints beside them: items per step
    over the median step, so one stalled step (a 2 s checkpoint among 170 ms steps) does not drag the figure
    away from the step time it sits next to. ``wall_items_per_s`` / ``wall_steps_per_s`` are all the items over
    the steps' summed time, stalls included. Items are None unless every step's count is known.
    """
    if not durations_ns:
        return {"steps_per_s": None, "items_per_s": None, "wall_steps_per_s": None, "wall_items_per_s": None}
    med, total = float(np.median(durations_ns)), float(sum(durations_ns))
    known = len(items) == len(durations_ns)
    per_step = float(np.mean(items)) if known and items else None
    return {
        "steps_per_s": round(1e9 / med, 4) if med > 0 else None,
        "items_per_s": round(per_step * 1e9 / med, 3) if per_step is not None and med > 0 else None,
        "wall_steps_per_s": round(len(durations_ns) * 1e9 / total, 4) if total > 0 else None,
        "wall_items_per_s": round(sum(items) * 1e9 / total, 3) if known and total > 0 else None,
    }


def throughput(col: dict[str, Any], workload: dict[str, Any] | None) -> dict[str, Any]:
    """Items per second over the timed steps (items from the workload or from ``dnnprof.step(items=…)``), and the
    same over the unprofiled baseline steps of the run (``unprofiled_*``: what the job does without dnnprof, read
    from few steps; None when there are none). Rates are per median step (see :func:`rates`); the ``wall_*`` ones
    include every stall."""
    dur = step_durations(col)
    steps = steps_in(timed_window(col), dur)
    per_step = _items(col, steps, workload)
    unit = (workload or {}).get("unit") or ("samples/s" if per_step else None)
    s = _stats([dur[i] for i in steps])
    r = rates([dur[i] for i in steps], per_step)
    out: dict[str, Any] = {
        "steps": len(steps),
        "step_time_median_us": s["median_us"],
        "step_time_p90_us": s["p90_us"],
        "step_time_mean_us": s["mean_us"],
        "steps_per_s": r["steps_per_s"],
        "unit": unit or ("items/s" if per_step else None),
        "items_per_step": _per_step(per_step),
        "items_per_s": r["items_per_s"],
        "measured_on": "host-side step intervals of the timed window",
        "items_from": ("workload" if workload and workload.get("items_per_step") else
                       ("dnnprof.step(items=…) or DataLoader batches" if per_step else None)),
        "wall_steps_per_s": r["wall_steps_per_s"],
        "wall_items_per_s": r["wall_items_per_s"],
    }
    base = baseline_steps(col)
    b = _stats([dur[i] for i in base])
    rb = rates([dur[i] for i in base], _items(col, base, workload))
    out["unprofiled_steps"] = len(base)
    out["unprofiled_step_time_median_us"] = b["median_us"]
    out["unprofiled_items_per_s"] = rb["items_per_s"]
    out["unprofiled_wall_items_per_s"] = rb["wall_items_per_s"]
    if not per_step:
        out["note"] = ("items per step unknown (no DataLoader batches seen): pass dnnprof.step(items=N) in the "
                       "script for items/s")
    return out


def samples_summary(col: dict[str, Any], columns: dict[str, Any] | None) -> dict[str, Any]:
    """Mean/median/p90/max of every sampled metric over the timed steps (wall-clock window)."""
    status = col.get("nvml")
    out: dict[str, Any] = {"status": status or {"nvml": "not sampled"}, "window": "timed steps", "metrics": {}}
    if not columns or not columns.get("ts_ns"):
        return out
    steps = steps_in(timed_window(col), range(len(col.get("step_end_ns", []))))
    if not steps:
        return out
    lo, hi = col["step_start_ns"][steps[0]], col["step_end_ns"][steps[-1]]
    ts = np.asarray(columns["ts_ns"], dtype=np.int64)
    metric = np.asarray(columns["metric"], dtype=np.int64)
    value = np.asarray(columns["value"], dtype=np.float64)
    inside = (ts >= lo) & (ts <= hi)
    names = columns["metrics"]
    order = [m for m in KEY_METRICS if m in names] + sorted(m for m in names if m not in KEY_METRICS)
    st = status if isinstance(status, dict) else {}
    reach = int(1e9 * (float(st.get("period_s") or 0.05) + float(st.get("gpm_window_s") or 0.11)))
    nearest = []
    for name in order:
        of_metric = metric == names.index(name)
        v = value[inside & of_metric]
        if v.size:
            out["metrics"][name] = {"mean": round(float(v.mean()), 3), "median": round(float(np.median(v)), 3),
                                    "p90": round(float(np.percentile(v, 90)), 3), "max": round(float(v.max()), 3),
                                    "n": int(v.size)}
            continue
        # Steps shorter than the sampling period: no sample inside, so the one closest to the window's middle
        # (NVML averages over its own trailing window, GPM values are stamped at their window's midpoint).
        cand = np.flatnonzero(of_metric & (ts >= lo - reach) & (ts <= hi + reach))
        if cand.size:
            i = cand[np.argmin(np.abs(ts[cand] - (lo + hi) // 2))]
            x = round(float(value[i]), 3)
            off_ms = (int(ts[i]) - hi if ts[i] > hi else int(ts[i]) - lo) / 1e6
            out["metrics"][name] = {"mean": x, "median": x, "p90": x, "max": x, "n": 1,
                                    "outside_window_ms": round(off_ms, 1)}
            nearest.append(name)
    if nearest:
        out["note"] = (f"the timed steps took {(hi - lo) / 1e6:.1f} ms, less than the sampling needs: "
                       f"{', '.join(nearest)} from the sample nearest to them ('outside_window_ms': how far outside; "
                       "run more steps for a mean over the steps)")
    return out


def memory_summary(col: dict[str, Any]) -> dict[str, Any]:
    mem = col.get("memory") or {}
    out = summarize_memory(mem.get("per_step") or {}, mem.get("static"), mem.get("device_total_bytes"),
                           timed_window(col))
    if mem.get("device") is None:
        out["note"] = "no CUDA device in use: no allocator statistics"
    return out


def run_extras(col: dict[str, Any], samples: dict[str, Any] | None) -> dict[str, Any]:
    """The keys dnnprof adds to ``summarize()``'s document in a run's summary.json."""
    return {
        "throughput": throughput(col, col.get("workload")),
        "samples": samples_summary(col, samples),
        "memory": memory_summary(col),
        "overhead": overhead(col),
        "host_hotspots": col.get("host_hotspots"),
    }


def summarize_memory(per_step: dict[str, list[int]], static: dict[str, int] | None,
                     device_total_bytes: int | None, window: Iterable[int]) -> dict[str, Any]:
    """The ``memory`` block of summary.json from per-step peaks (restricted to the steps in ``window``)."""
    wanted = window if isinstance(window, range) else set(window)  # a range answers 'in' without being listed
    steps = per_step.get("step", [])
    alloc = [a for s, a in zip(steps, per_step.get("peak_allocated_bytes", []), strict=False) if s in wanted]
    reserved = [r for s, r in zip(steps, per_step.get("peak_reserved_bytes", []), strict=False) if s in wanted]
    out: dict[str, Any] = {
        "device_total_bytes": device_total_bytes,
        # A step whose peak was not read is null in the list (collector.json allows it): the peak is of the others.
        "peak_allocated_bytes": max((a for a in alloc if a is not None), default=None),
        "peak_reserved_bytes": max((r for r in reserved if r is not None), default=None),
        "per_step": {"step": [s for s in steps if s in wanted], "peak_allocated_bytes": alloc,
                     "peak_reserved_bytes": reserved},
    }
    if static:
        out["breakdown"] = dict(static)
        peak = out["peak_allocated_bytes"]
        if peak is not None:
            used = sum(v for v in static.values() if v is not None)
            out["breakdown"]["activations_other_bytes"] = max(0, peak - used)
    return out
