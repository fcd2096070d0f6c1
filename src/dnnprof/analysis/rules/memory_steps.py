"""Rules about device memory and iterations: ``memory-underused``, ``memory-near-limit``, ``unstable-steps``,
``no-steps``.

Memory comes from a run directory's ``memory`` block (the caching allocator's per-step peaks), else from samples in
the profile (``allocator_reserved_bytes``/``allocator_allocated_bytes`` from Kineto memory events, or NVML's
``memory_used_bytes``). Without any of them the memory rules stay quiet: a plain Kineto trace does not say.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.model.schema import API_KINDS
from dnnprof.model.units import ns_brief_text

#: ``memory-underused``: peak memory below this share of the device (DLProf fired at 2-7%; TBD showed
#: throughput rising with batch until memory is ~80% full) ...
MEM_UNDERUSED_MAX_PCT = 30.0
#: ... while the GPU is busy less than this share of the step.
MEM_UNDERUSED_MAX_BUSY_PCT = 90.0
#: The batch is scaled so that peak memory stays under this share of the device ...
MEM_TARGET_FRACTION = 0.8
#: ... and by at most this factor (DLProf suggested 4x).
MAX_BATCH_FACTOR = 4
#: ``memory-near-limit``: peak memory above this share of the device (TensorBoard plugin: 90%).
MEM_NEAR_LIMIT_PCT = 90.0
#: ``unstable-steps``: coefficient of variation of step time above this (trtexec warns at 1% for inference;
#: training steps vary more).
UNSTABLE_MAX_CV_PCT = 10.0
#: Fewest steps a coefficient of variation is computed from.
UNSTABLE_MIN_STEPS = 3

_SAMPLE_METRICS = ("allocator_reserved_bytes", "allocator_allocated_bytes", "memory_used_bytes")
#: Runtime calls that allocate or free device memory (slow, and synchronising, when the caching allocator is short).
_ALLOCATION_CALLS = frozenset({"cudaMalloc", "cudaFree", "cuMemAlloc_v2", "cuMemFree_v2", "cudaMallocAsync",
                               "cuMemCreate", "cuMemRelease"})


def _memory(ctx: Context) -> tuple[int, int, str] | None:
    """(peak bytes, device bytes, where the peak came from), or None when memory was not measured."""
    total = None
    m = ctx.doc.get("memory")
    if not isinstance(m, dict):
        m = ctx.run_setting("memory")  # recorded in the trace (dnnprof_run metadata)
    if isinstance(m, dict):
        total = m.get("device_total_bytes")
    if not total:
        total = ctx.doc.get("device", {}).get("memory_bytes") or (
            ctx.device.memory_bytes if ctx.device and ctx.device.memory_bytes > 0 else None)
    if not total:
        return None
    if isinstance(m, dict):
        for key in ("peak_reserved_bytes", "peak_allocated_bytes"):
            if isinstance(m.get(key), (int, float)) and m[key] > 0:
                return int(m[key]), int(total), f"caching allocator {key.removeprefix('peak_').removesuffix('_bytes')}"
    s = ctx.profile.tables["samples"]
    if s["metric_id"].size:
        mine = s["rank"] == ctx.rank
        for metric in _SAMPLE_METRICS:
            sel = mine & ctx.profile.names_where(s["metric_id"], lambda m, metric=metric: m == metric)
            if sel.any():
                return int(np.nanmax(s["value"][sel])), int(total), metric
    return None


@rule("memory-underused", group="memory")
def memory_underused(ctx: Context) -> Finding | None:
    """Most of the GPU's memory is unused while the GPU is not kept busy.

    Pattern: peak memory below ``MEM_UNDERUSED_MAX_PCT`` of the device and GPU busy below
    ``MEM_UNDERUSED_MAX_BUSY_PCT`` of the step.
    Algorithm: batch factor N = min(``MAX_BATCH_FACTOR``, ⌊``MEM_TARGET_FRACTION`` × device / peak⌋) (peak grows
    at most linearly with the batch); needs N ≥ 2.
    Fix: multiply the batch size by N (scale the learning rate, e.g. linearly with warm-up), or use the memory for
    a larger model/sequence.
    """
    mem = _memory(ctx)
    if mem is None or not ctx.window_ns:
        return None
    peak, total, source = mem
    used = pct(peak, total)
    busy = ctx.util.busy_pct
    if used >= MEM_UNDERUSED_MAX_PCT or busy >= MEM_UNDERUSED_MAX_BUSY_PCT:
        return None
    n = min(MAX_BATCH_FACTOR, math.floor(MEM_TARGET_FRACTION * total / max(peak, 1)))
    if n < 2:
        return None
    w = float(ctx.window_ns)
    b = float(ctx.util.total("busy_ns"))
    gain = 100.0 * (1.0 - max(w, n * b) / (n * w))
    return Finding(
        id="memory-underused",
        title=f"GPU memory underused: peak {used:.0f}% of the device, GPU busy {busy:.0f}%",
        summary=(f"peak {peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB ({source}); the batch could grow about "
                 f"{n}× and still fit in {MEM_TARGET_FRACTION:.0%} of memory"),
        recommendation=(f"Increase the batch size about {n}× (adjust the learning rate, e.g. linearly with warm-up) "
                        "so each step gives the GPU more work per launch; or spend the memory on a larger model or "
                        "longer sequences."),
        est_gain_pct=max(0.0, gain),
        how_estimated=(f"Per-sample time at {n}× the batch: 1 − max(step, {n} × busy) / ({n} × step), assuming GPU "
                       "work grows linearly with the batch and the idle time per step does not grow; an upper bound."),
        evidence={"peak_bytes": peak, "device_bytes": total, "peak_pct": round(used, 2), "source": source,
                  "busy_pct": round(busy, 1), "batch_factor": n},
    )


@rule("memory-near-limit", group="memory")
def memory_near_limit(ctx: Context) -> Finding | None:
    """Peak memory close to the device's capacity.

    Pattern: peak memory above ``MEM_NEAR_LIMIT_PCT`` of the device; often with ``cudaMalloc``/``cudaFree``
    inside steps (the caching allocator freeing its cache and retrying).
    Algorithm: peak / device from the run's memory block or samples; allocator calls inside the steps are counted
    as evidence.
    Fix: activation checkpointing (``torch.utils.checkpoint``), AMP (bf16 halves activations), a smaller
    micro-batch with gradient accumulation, ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` against
    fragmentation.
    """
    mem = _memory(ctx)
    if mem is None:
        return None
    peak, total, source = mem
    used = pct(peak, total)
    if used <= MEM_NEAR_LIMIT_PCT:
        return None
    rt = ctx.profile.tables["runtime"]
    in_steps = (rt["rank"] == ctx.rank) & ((rt["step"] >= 0) if ctx.has_steps else True)
    alloc = in_steps & ctx.profile.names_where(rt["name_id"], _ALLOCATION_CALLS.__contains__)
    alloc_ns = int(rt["dur_ns"][alloc].sum())
    return Finding(
        id="memory-near-limit",
        title=f"GPU memory near the limit: peak {used:.0f}% of the device",
        summary=(f"peak {peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB ({source}); "
                 f"{int(alloc.sum())} cudaMalloc/cudaFree calls inside the steps ({ns_brief_text(alloc_ns)})"),
        recommendation=("Make room before it fails: activation checkpointing (torch.utils.checkpoint), bf16 autocast, "
                        "a smaller micro-batch with gradient accumulation, and "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."),
        est_gain_pct=pct(alloc_ns, ctx.window_ns) if alloc_ns and ctx.window_ns else None,
        how_estimated=("No speedup is promised: the risk is an out-of-memory error. When the allocator calls "
                       "cudaMalloc/cudaFree inside steps (cache flushes and retries), their host time is the "
                       "estimate."),
        evidence={"peak_bytes": peak, "device_bytes": total, "peak_pct": round(used, 2), "source": source,
                  "allocator_calls_in_steps": int(alloc.sum()), "allocator_call_us": us(alloc_ns)},
        severity="medium" if not alloc_ns or pct(alloc_ns, ctx.window_ns) < 3 else "",
    )


@rule("unstable-steps", group="steps")
def unstable_steps(ctx: Context) -> Finding | None:
    """Step times vary a lot, so any single measurement misleads and something intermittent costs time.

    Pattern: coefficient of variation of the host-side step durations above ``UNSTABLE_MAX_CV_PCT`` over at least
    ``UNSTABLE_MIN_STEPS`` steps, every one of them longer than 0 (a step of 0 µs or less is a broken boundary and
    the rule stays quiet), and so is the GPU's cadence (start of one step's GPU work to the next one's, the last
    step's GPU busy time within a usual period) when every step has GPU work: a host that runs ahead of the GPU waits whenever the launch
    queue is full, so its step times jump while the GPU finishes an iteration every N µs; iterations are unstable
    only when both vary (a host stall the GPU waits for shows in both). When the host's CV is over twice the GPU's,
    the statistics are the GPU cadence's (the host's waits are the queue's, not the iterations').
    Algorithm: CV = std / mean of the step durations; the slowest step is compared with the median step (GPU busy
    and idle by cause) to say where the extra time went.
    Fix: exclude warm-up and compilation steps from measurement, make shapes static (pad/bucket sequence
    lengths), move periodic work (logging, checkpointing, evaluation) out of timed steps, lock clocks for
    benchmarks.
    """
    steps = ctx.profile.tables["steps"]
    sel = np.flatnonzero(steps["rank"] == ctx.rank)
    d = steps["dur_ns"][sel].astype(np.float64)
    # A step of 0 µs or less is a broken step boundary, not a fast step: no statistic is printed on top of it.
    if d.size < UNSTABLE_MIN_STEPS or (d <= 0).any():
        return None
    cv = 100.0 * d.std() / d.mean()
    if cv <= UNSTABLE_MAX_CV_PCT:
        return None
    host_cv, measured_on = cv, "host"
    gpu_start = steps["gpu_start_ns"][sel].astype(np.float64)
    gpu_end = steps["gpu_end_ns"][sel].astype(np.float64)
    # The GPU's pace: from each step's first GPU work to the next step's (the last step has no next one: it counts
    # only as a check that its own GPU work fits a usual period, else the GPU's pace says nothing of it).
    cadence = np.diff(gpu_start)
    gpu_cv = None
    if (gpu_start >= 0).all() and cadence.size >= UNSTABLE_MIN_STEPS - 1 and (cadence > 0).all():
        gpu_cv = 100.0 * cadence.std() / cadence.mean()
        last = next((x for x in ctx.util.steps if x.number == int(steps["number"][sel][-1])), None)
        last_work = last.busy_ns if last is not None else gpu_end[-1] - gpu_start[-1]  # its kernels' busy time
        last_fits = last_work <= float(np.median(cadence)) * (1 + UNSTABLE_MAX_CV_PCT / 100)
        if gpu_cv <= UNSTABLE_MAX_CV_PCT and last_fits:
            return None  # the host waits on a full launch queue now and then; the GPU's iterations are steady
        if gpu_cv < 0.5 * cv and last_fits:  # the host far noisier: it runs ahead, the GPU's pace is the steps'
            d, cv, measured_on = cadence, gpu_cv, "gpu_cadence"
    med = float(np.median(d))
    slow = int(np.argmax(d))  # a cadence interval k runs from step k's GPU start to step k+1's: step k's
    number = int(steps["number"][sel][slow])
    per_step = {s.number: s for s in ctx.util.steps}
    slow_st = per_step.get(number)
    typical = min(ctx.util.steps, key=lambda s: abs(s.host_ns - med), default=None)
    detail: dict[str, Any] = {}
    if slow_st is not None and typical is not None:
        detail = {"slowest_step": {"number": number, "host_us": us(slow_st.host_ns), "busy_us": us(slow_st.busy_ns),
                                   "idle_by_cause_us": {k: us(v) for k, v in slow_st.idle_by_cause_ns.items()}},
                  "median_step": {"number": typical.number, "host_us": us(typical.host_ns),
                                  "busy_us": us(typical.busy_ns),
                                  "idle_by_cause_us": {k: us(v) for k, v in typical.idle_by_cause_ns.items()}}}
    trend = np.corrcoef(np.arange(d.size), d)[0, 1] if d.size >= 3 and d.std() > 0 else 0.0
    return Finding(
        id="unstable-steps",
        title=(f"Unstable step time: CV {cv:.0f}% over {d.size} steps"
               + (" (GPU cadence: the host runs ahead of the GPU)" if measured_on == "gpu_cadence" else "")),
        summary=(f"steps take {ns_brief_text(d.min())}–{ns_brief_text(d.max())} (median {ns_brief_text(med)}); slowest: step {number}"
                 + ("; durations grow steadily" if trend > 0.9 else "")),
        recommendation=("Measure steady state only (skip warm-up/compilation steps), keep input shapes static (pad or "
                        "bucket sequence lengths), move logging/checkpointing/evaluation out of the timed steps, and "
                        "lock GPU clocks when benchmarking."),
        est_gain_pct=max(0.0, 100.0 * (d.mean() - med) / d.mean()),
        how_estimated=("(mean − median) / mean of the step durations: what is saved if every step ran like the median"
                       + (" (durations between the starts of consecutive steps' GPU work: the host's own step times "
                          "follow the launch queue, not the iterations)." if measured_on == "gpu_cadence" else ".")),
        evidence={"steps": int(d.size), "cv_pct": round(cv, 2), "durations_us": [us(x) for x in d.tolist()],
                  "measured_on": measured_on, "host_cv_pct": round(host_cv, 2),
                  "median_us": us(med), "mean_us": us(d.mean()), "trend_corr": round(float(trend), 3),
                  **({"gpu_cadence_cv_pct": round(gpu_cv, 2)} if gpu_cv is not None else {}), **detail},
    )


@rule("no-steps", group="steps")
def no_steps(ctx: Context) -> Finding | None:
    """No iteration boundary was found, so every number covers the whole trace, warm-up included.

    Pattern: no ``ProfilerStep#N`` ranges, no repeated ``Optimizer.step#`` ranges and no repeating launch pattern.
    Algorithm: the profile's steps table is empty after step inference (``analysis.steps``).
    Fix: call ``prof.step()`` at the end of each iteration with a ``torch.profiler.schedule``, or wrap each
    iteration in ``torch.profiler.record_function("ProfilerStep#<n>")``; ``dnnprof run`` marks steps itself.
    """
    if (ctx.profile.tables["steps"]["rank"] == ctx.rank).any() or not ctx.profile.has_gpu_activity:
        return None
    rt = ctx.profile.tables["runtime"]
    launches = int(((rt["rank"] == ctx.rank) & (rt["api_kind"] == API_KINDS.index("launch"))).sum())
    return Finding(
        id="no-steps",
        title="No training/inference steps found: the report covers the whole trace",
        summary=(f"no ProfilerStep#N ranges, optimizer steps or repeating launch pattern among {launches} launches; "
                 "percentages are of the whole GPU span, warm-up and one-off work included"),
        recommendation=("Mark iterations: use torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, "
                        "warmup=2, active=3)) and call prof.step() at the end of every iteration, or wrap each one in "
                        "torch.profiler.record_function(f'ProfilerStep#{i}'); `dnnprof run` does this for you."),
        est_gain_pct=None,
        how_estimated="Not a performance problem in itself: it limits what the other findings can say.",
        evidence={"launches": launches, "window_us": us(ctx.window_ns)},
    )
