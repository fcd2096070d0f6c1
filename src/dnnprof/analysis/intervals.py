"""Interval arithmetic on int64 nanosecond columns, vectorised."""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint intervals."""
    if starts.size == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    if bool((starts[1:] >= starts[:-1]).all()):  # sorted already (activity tables are): no order, no copies
        s, e = starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False)
    else:
        order = np.argsort(starts, kind="stable")
        s = starts[order].astype(np.int64)
        e = ends[order].astype(np.int64)
        del order
    run_end = np.maximum.accumulate(e)
    # A new merged interval starts where the start is beyond every earlier end.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    merged_s = s[idx]
    merged_e = run_end[np.append(idx[1:] - 1, s.size - 1)]
    return merged_s, merged_e


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi); empty ones dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def covered(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds of [lo, hi) covered by the union of the intervals (intervals may overlap)."""
    s, e = merge(*clip(starts, ends, lo, hi))
    return int((e - s).sum())


def covered_per_window(merged_s: np.ndarray, merged_e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Covered ns in each window [lo_i, hi_i) by already-merged (disjoint, sorted) intervals."""
    if merged_s.size == 0:
        return np.zeros(lo.shape, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(merged_e - merged_s)])

    def upto(t: np.ndarray) -> np.ndarray:
        # Covered length in (-inf, t).
        i = np.searchsorted(merged_s, t, side="right")  # intervals starting before t
        full = cum[i]
        last = np.clip(i - 1, 0, None)
        overhang = np.where(i > 0, np.maximum(merged_e[last] - t, 0), 0)
        return full - overhang

    return upto(hi) - upto(lo)


def gaps(merged_s: np.ndarray, merged_e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Uncovered sub-intervals of [lo, hi) between merged intervals.

    Only the merged intervals that can meet the window are looked at (found by binary search: merged intervals
    are sorted and disjoint, so their ends are sorted too), so a call per step costs the step, not the trace.
    """
    first = int(np.searchsorted(merged_e, lo, side="right"))  # the first that ends after lo
    stop = int(np.searchsorted(merged_s, hi, side="left"))  # past the last that starts before hi
    s, e = clip(merged_s[first:max(first, stop)], merged_e[first:max(first, stop)], lo, hi)
    gs = np.concatenate([[lo], e])
    ge = np.concatenate([s, [hi]])
    keep = ge > gs
    return gs[keep], ge[keep]
