"""Assigning rows to iterations: one function used by every step source (markers, optimizer, launch pattern)."""

from __future__ import annotations

import numpy as np

from dnnprof.model.profile import Profile
from dnnprof.model.schema import STEP_SOURCES, empty_table

_GPU_TABLES = ("kernels", "memcpy", "memset")


def _in_windows(t: np.ndarray, starts: np.ndarray, ends: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Step number of each time in ``t`` (windows sorted and disjoint), -1 outside."""
    if starts.size == 0 or t.size == 0:
        return np.full(t.shape, -1, dtype=np.int32)
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    return np.where(ok, numbers[np.clip(i, 0, None)], -1).astype(np.int32)


def assign_steps(
    profile: Profile,
    starts_ns: np.ndarray,
    ends_ns: np.ndarray,
    source: str,
    numbers: np.ndarray | None = None,
    name_ids: np.ndarray | None = None,
    rank: int = 0,
) -> None:
    """Fill ``steps`` and every ``step`` column from host-side step windows, in place.

    Host rows (ops, runtime calls, memory events) belong to the window they start in. GPU rows belong to the step of the call
    that launched them (by ``launch_row``), or, without a launch record, to the window their start falls in.
    The GPU-side window of a step runs from its first GPU activity to the next step's first GPU activity (or to
    its own last GPU end for the last step), so GPU idle time between steps is charged to the step before it.
    """
    order = np.argsort(starts_ns, kind="stable")
    starts = np.asarray(starts_ns, dtype=np.int64)[order]
    ends = np.asarray(ends_ns, dtype=np.int64)[order]
    nums = (np.arange(starts.size, dtype=np.int32) if numbers is None
            else np.asarray(numbers, dtype=np.int32)[order])
    names = (np.full(starts.size, -1, dtype=np.int32) if name_ids is None
             else np.asarray(name_ids, dtype=np.int32)[order])
    # Overlapping windows (nested markers) would make membership ambiguous: clip each to the next start.
    if starts.size > 1:
        ends = np.minimum(ends, np.append(starts[1:], ends[-1]))

    for table, time in (("ops", "start_ns"), ("runtime", "start_ns"), ("memory_events", "ts_ns")):
        t = profile.tables[table]
        if t["step"].size:
            sel = t["rank"] == rank
            t["step"][sel] = _in_windows(t[time][sel], starts, ends, nums)
    runtime_step = profile.tables["runtime"]["step"]
    gpu_first = np.full(starts.size, np.iinfo(np.int64).max, dtype=np.int64)
    gpu_last = np.full(starts.size, -1, dtype=np.int64)
    sorter = np.argsort(nums, kind="stable")
    sorted_nums = nums[sorter]
    for table in _GPU_TABLES:
        t = profile.tables[table]
        sel = np.flatnonzero(t["rank"] == rank)
        if sel.size == 0:
            continue
        launch = t["launch_row"][sel]
        if runtime_step.size == 0:  # a trace without runtime calls (GPU activity only)
            launch = np.full(sel.size, -1, dtype=launch.dtype)
        by_launch = np.where(launch >= 0, runtime_step[np.clip(launch, 0, max(runtime_step.size - 1, 0))]
                             if runtime_step.size else -1, -1)
        by_time = _in_windows(t["start_ns"][sel], starts, ends, nums)
        step = np.where(launch >= 0, by_launch, by_time).astype(np.int32)
        t["step"][sel] = step
        if nums.size:
            j = np.clip(np.searchsorted(sorted_nums, step), 0, nums.size - 1)
            valid = (step >= 0) & (sorted_nums[j] == step)
            pos = sorter[j[valid]]
            start = t["start_ns"][sel][valid]
            np.minimum.at(gpu_first, pos, start)
            np.maximum.at(gpu_last, pos, start + t["dur_ns"][sel][valid])
    has_gpu = gpu_last >= 0
    gpu_start = np.where(has_gpu, gpu_first, -1)
    gpu_end = gpu_last.copy()
    for i in range(starts.size - 1):
        if has_gpu[i]:
            nxt = np.flatnonzero(has_gpu[i + 1:])
            if nxt.size:
                gpu_end[i] = max(gpu_last[i], gpu_first[i + 1 + nxt[0]])

    steps = empty_table("steps", starts.size)
    steps["rank"][:] = rank
    steps["number"][:] = nums
    steps["name_id"][:] = names
    steps["source"][:] = STEP_SOURCES.index(source)
    steps["start_ns"][:] = starts
    steps["dur_ns"][:] = ends - starts
    steps["gpu_start_ns"][:] = gpu_start
    steps["gpu_end_ns"][:] = gpu_end
    old = profile.tables["steps"]
    keep = old["rank"] != rank
    profile.tables["steps"] = {c: np.concatenate([old[c][keep], steps[c]]) for c in steps}
