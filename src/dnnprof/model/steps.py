"""Assigning rows to iterations: one function used by every step source (markers, optimizer, launch pattern)."""

from __future__ import annotations

import numpy as np

from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.profile import Profile
from dnnprof.model.schema import STEP_SOURCES, empty_table

_GPU_TABLES = ("kernels", "memcpy", "memset")
#: Host rows placed in steps at a time.
_BLOCK_ROWS = 1 << 20


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

    Host rows (ops, runtime calls, memory events) belong to the window they start in. GPU rows with a launch record
    belong to the step of the call that launched them (by ``launch_row``).

    GPU-side windows are built from that launched work alone and are positive, disjoint, ordered and inside the GPU
    span by construction: a step's window runs from its first GPU activity to the next step's first GPU activity
    (so GPU idle time between steps is charged to the step before it, and work of a step that still runs when the
    next step's work starts, on another stream, counts in the next window), the last one to the end of the last
    GPU activity of any step. A step whose first activity is not after the previous step's has no window of its own
    (``gpu_start_ns = -1``). GPU rows without a launch record (their call was not captured) belong to the window
    their GPU start falls in, -1 outside every window; only a trace without any launched GPU work in a step (GPU
    activity alone) places its GPU rows by the host window their start falls in.
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
        step, when, ranks = t["step"], t[time], t["rank"]
        for lo in range(0, step.size, _BLOCK_ROWS):  # a block at a time: temporaries of a block, not of the table
            sel = ranks[lo:lo + _BLOCK_ROWS] == rank
            step[lo:lo + _BLOCK_ROWS][sel] = _in_windows(when[lo:lo + _BLOCK_ROWS][sel], starts, ends, nums)
            release_pages_of(step, when, ranks)  # a big trace's mapped columns: a block's pages at a time
    gpu_start, gpu_end = _gpu_windows(profile, rank, starts, ends, nums)

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


def _positions(values: np.ndarray, sorted_nums: np.ndarray, by_num: np.ndarray) -> np.ndarray:
    """Position in the step numbers of each value (the last, where a number repeats); -1 for none."""
    if sorted_nums.size == 0:
        return np.full(values.size, -1, dtype=np.int64)
    at = np.searchsorted(sorted_nums, values, side="right") - 1
    safe = np.maximum(at, 0)
    return np.where((at >= 0) & (sorted_nums[safe] == values), by_num[safe], -1).astype(np.int64)


def _gpu_windows(profile: Profile, rank: int, starts: np.ndarray, ends: np.ndarray,
                 nums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Set the ``step`` of the rank's GPU rows; return each step's GPU window (``-1, -1`` for none), in step
    order (see :func:`assign_steps`)."""
    runtime_step = profile.tables["runtime"]["step"]
    rows: dict[str, np.ndarray] = {}
    launched: dict[str, np.ndarray] = {}
    for table in _GPU_TABLES:
        t = profile.tables[table]
        sel = np.flatnonzero(t["rank"] == rank)
        rows[table] = sel
        launch = t["launch_row"][sel]
        if runtime_step.size == 0:  # a trace without runtime calls (GPU activity only)
            launch = np.full(sel.size, -1, dtype=launch.dtype)
        step = np.where(launch >= 0, runtime_step[np.clip(launch, 0, max(runtime_step.size - 1, 0))]
                        if runtime_step.size else -1, -1).astype(np.int32)
        t["step"][sel] = step
        launched[table] = launch >= 0
        release_pages()  # a big trace's mapped columns (model.mapped_columns): one table's pages at a time
    by_launch = any(bool((profile.tables[tb]["step"][rows[tb]][launched[tb]] >= 0).any()) for tb in _GPU_TABLES)
    if not by_launch:  # no launched GPU work in any step: GPU clock and host clock are one, place by host windows
        for table in _GPU_TABLES:
            t = profile.tables[table]
            t["step"][rows[table]] = _in_windows(t["start_ns"][rows[table]], starts, ends, nums)
            launched[table] = np.ones(rows[table].size, dtype=bool)

    n = starts.size
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    # Step number → position in ``nums`` (the last position where a number repeats, as a dict built in order
    # would say), by a search in the numbers' stable order rather than a lookup per row.
    by_num = np.argsort(nums, kind="stable")
    sorted_nums = nums[by_num]
    for table in _GPU_TABLES:
        t = profile.tables[table]
        r = rows[table][launched[table]]
        step = t["step"][r]
        ok = step >= 0
        if not ok.any():
            continue
        pos = _positions(step[ok], sorted_nums, by_num)
        s = t["start_ns"][r][ok]
        e = s + t["dur_ns"][r][ok]
        good = pos >= 0
        np.minimum.at(first, pos[good], s[good])
        np.maximum.at(last, pos[good], e[good])
        release_pages()

    gpu_start = np.full(n, -1, dtype=np.int64)
    gpu_end = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(last >= 0)
    if idx.size:
        lo = np.maximum.accumulate(first[idx])
        hi = np.append(lo[1:], max(int(last[idx].max()), int(lo[-1])))
        real = hi > lo
        gpu_start[idx[real]] = lo[real]
        gpu_end[idx[real]] = hi[real]

    # GPU rows without a launch record: by GPU time, into the windows just built.
    win = np.flatnonzero(gpu_start >= 0)
    for table in _GPU_TABLES:
        t = profile.tables[table]
        r = rows[table][~launched[table]]
        if r.size:
            t["step"][r] = _in_windows(t["start_ns"][r], gpu_start[win], gpu_end[win], nums[win])
    return gpu_start, gpu_end
