"""``--counters``: a second run of the same command under Nsight Compute, for the counters of one steady step.

Counters cannot be read while the profiler's CUPTI session runs, and ncu replays every kernel it profiles, so they
come from a separate, short run: the collector (mode ``counters``: no profiler, no sampler) wraps step ``K`` — the
middle step of the timed window of the first run — in an NVTX push/pop range ``dnnprof.counters`` and ends the
process after it. The ncu driver (``collect.ncu``) chooses the kernels that cover most of that step's GPU time
from the first run's launches, runs ncu with the matching filters, and the CSV is joined onto the profile's kernels
by the caller's ``join`` (the analysis layer owns the matching).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.collect.config import CONFIG_FILE, CollectorConfig

COUNTERS_RANGE = "dnnprof.counters"
COUNTERS_DIR = "counters"
#: ncu replays kernels many times; a generous limit for one step of a large model.
TIMEOUT_S = 900.0


def counters_pass(run_dir: Path, command: list[str], config: CollectorConfig, profile: Any, timed_steps: list[int],
                  env_for: Callable[[Path], dict[str, str]],
                  join: Callable[[Any, Any], Any] | None) -> dict[str, Any]:
    """Run the command under ncu for one timed step and join the counters into ``profile``; never raises."""
    from dnnprof.collect.ncu import LaunchSequence, collect_counters

    if not timed_steps:
        return {"status": "skipped", "message": "no timed steps to take counters for"}
    step = int(timed_steps[len(timed_steps) // 2])
    seq = LaunchSequence.from_profile(profile, step=step)
    if not len(seq):
        return {"status": "skipped", "message": f"step {step} launched no kernels (no GPU work to count)"}
    sub = run_dir / COUNTERS_DIR
    sub.mkdir(exist_ok=True)
    cfg = dataclasses.replace(config, mode="counters", counters_step=step, nvml=False, host_sampling=False,
                              stop_after_profile=True, counters=False)
    (sub / CONFIG_FILE).write_text(cfg.to_json())
    dev = profile.devices[0] if profile.devices else None
    cc = dev.compute_capability if dev is not None and dev.compute_capability else None
    result, _plan = collect_counters(command, seq, sub / "ncu.csv", nvtx_range=COUNTERS_RANGE,
                                     compute_capability=cc, env=env_for(sub), timeout_s=TIMEOUT_S)
    out: dict[str, Any] = {"status": result.status, "message": result.message, "step": step,
                           "log": f"{COUNTERS_DIR}/ncu.csv", "wall_s": round(result.wall_s, 2)}
    if result.ok and result.table is not None and join is not None:
        j = join(profile, result.table)
        covered = getattr(j, "covered_ns", None)
        total = getattr(j, "total_ns", None)
        out["matched_kernels"] = getattr(j, "matched_kernels", None)
        out["covered_gpu_time_pct"] = round(100.0 * covered / total, 2) if covered is not None and total else None
    return out
