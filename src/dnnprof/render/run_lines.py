"""The lines ``dnnprof run`` and ``dnnprof profile`` print when a run ends, from its summary and meta."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Below this GPU busy share the report names the Python lines that took the host's time.
HOST_BOUND_BUSY_PCT = 70.0
#: A rate over the steps' summed time this far (relative) from the per-median-step rate is printed beside it.
WALL_RATE_DIFF = 0.10


def warmup_hint(overhead: dict[str, Any]) -> str:
    """A line when the unprofiled steps before the windows and after them differ a lot: the run was still warming
    up (clocks, allocator, autotuning) or changed pace, so the dilation and the window's times are not steady."""
    from dnnprof.analysis.rules.context import UNSTEADY_BASELINE_RATIO  # the findings' threshold too

    before = (overhead.get("baseline_before") or {}).get("median_us")
    after = (overhead.get("baseline_after") or {}).get("median_us")
    if not before or not after or max(before, after) / min(before, after) <= UNSTEADY_BASELINE_RATIO:
        return ""
    trend = "still warming up" if before > after else "slowing down"
    return (f"unprofiled steps took {before / 1000:.2f} ms before the window and {after / 1000:.2f} ms after it: "
            f"the run was {trend}, so the window's times may not be steady (raise --warmup-steps)")


def throughput_line(t: dict[str, Any]) -> str:
    """The step time and throughput of the profiled and the unprofiled steps, from ``summary.throughput``.

    Each rate sits beside the median step time it is computed from; when the steps' summed time gives a rate more
    than ``WALL_RATE_DIFF`` away (a stalled step among them), that one is printed too, said to include the stalls.
    """
    unit = t.get("unit") or "items/s"

    def wall(rate: float | None, wall_rate: float | None, steps: int) -> str:
        if not rate or not wall_rate or abs(wall_rate - rate) <= WALL_RATE_DIFF * rate:
            return ""
        return f"{wall_rate:.1f} {unit} over all {steps} steps, slow ones included"

    line = f"{t['steps']} steps profiled, step time median {t['step_time_median_us'] / 1000:.2f} ms"
    if t.get("items_per_s") is not None:
        line += f", {t['items_per_s']:.1f} {unit}"
        extra = wall(t["items_per_s"], t.get("wall_items_per_s"), t["steps"])
        line += f" ({extra})" if extra else ""
    if t.get("unprofiled_step_time_median_us"):
        line += f" (unprofiled: median {t['unprofiled_step_time_median_us'] / 1000:.2f} ms"
        if t.get("unprofiled_items_per_s") is not None:
            line += f", {t['unprofiled_items_per_s']:.1f} {unit}"
            extra = wall(t["unprofiled_items_per_s"], t.get("unprofiled_wall_items_per_s"),
                         t.get("unprofiled_steps") or 0)
            line += f"; {extra}" if extra else ""
        line += ")"
    return line


def run_lines(result: Any, quiet: bool = False) -> list[str]:
    """What ``dnnprof run``/``profile`` say when a run ends (one message a line, not yet cleaned): the collector's
    messages, then, unless ``quiet``, where the run went, the step time and what the capture cost."""
    out: list[str] = list(result.messages)
    say = out.append
    if quiet:
        return out
    s = result.summary or {}
    t = s.get("throughput") or {}
    o = s.get("overhead") or {}
    if t.get("step_time_median_us") is not None:
        line = throughput_line(t)
        if o.get("dilation") is not None:
            line += f", profiler dilation {o['dilation']:.3f}x vs {o['baseline']['count']} unprofiled steps"
        say(line)
        hint = warmup_hint(o)
        if hint:
            say(hint)
    note = (s.get("samples") or {}).get("note")
    if note:
        say(f"NVML: {note}")
    gpu = s.get("gpu") or {}
    busy = gpu.get("busy_pct") if gpu.get("has_activity") else None
    hot = ((s.get("host_hotspots") or {}).get("top_user_lines") or [])[:3]
    if hot and (busy is None or busy < HOST_BOUND_BUSY_PCT):
        where = ", ".join(f"{Path(h['file']).name}:{h['line']} {h['function']} ({h['pct']:.0f}%)" for h in hot)
        say(f"host time{f' (GPU busy only {busy}%)' if busy is not None else ''} went to: {where}")
    dist = (result.meta.get("environment") or {}).get("distributed") or {}
    if result.meta.get("profiled_ranks"):
        listed = ",".join(str(r) for r in result.meta["profiled_ranks"])
        say(f"profiled ranks {listed} of {dist.get('world_size') or '?'}, each in rank<N>/ of the run directory "
            f"(this summary: rank {result.meta.get('summary_rank')}; dnnprof analyze RUN --rank N for another)")
    elif dist.get("rank") is not None:
        say(f"profiled rank {dist['rank']} of {dist.get('world_size') or '?'} (the other ranks ran unprofiled; "
            "DNNPROF_PROFILE_RANK=N picks another)")
    att = (result.meta.get("capture") or {}).get("attribution") or {}
    if att.get("matched_kernels_pct") is not None:
        say(f"attribution: {att['matched_kernels_pct']}% of timed kernels matched to ops/layers")
    state = "complete" if result.complete else "INCOMPLETE"
    say(f"run directory ({state}): {result.run_dir}")
    if result.profile_dir is not None:
        say(f"report: dnnprof analyze {result.run_dir}")
    return out
