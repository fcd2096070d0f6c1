"""Interval arithmetic on int64 nanosecond columns, vectorised."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray, spend_ends: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint intervals.

    ``spend_ends``: ``ends`` is the caller's own int64 array, no longer needed: the running end is written into it
    rather than into a new column (a big trace's kernels are millions)."""
    if starts.size == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    if bool((starts[1:] >= starts[:-1]).all()):  # sorted already (activity tables are): no order, no copies
        s, e = starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False)
        own = spend_ends and e is ends and ends.base is None and ends.flags.writeable
    else:
        order = np.argsort(starts, kind="stable")
        s = starts[order].astype(np.int64)
        e = ends[order].astype(np.int64)
        del order
        own = True  # a copy of this call's
    run_end = np.maximum.accumulate(e, out=e if own else None)
    # A new merged interval starts where the start is beyond every earlier end; the one before it ends there.
    # Masks, not positions: a byte a row rather than eight.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    merged_s = s[new]
    last = np.empty(s.size, dtype=bool)
    last[:-1] = new[1:]
    last[-1] = True
    del new
    return merged_s, run_end[last]


def union_ns(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> int | None:
    """Length of the union of [start, end) intervals given a block at a time in order of start (each block in
    order, none starting before the previous block's last start): ``merge``'s total, with the memory of one block.
    The blocks' columns of ends may be written over. None when a block breaks that order (the caller merges the
    whole then)."""
    total, carried, last = 0, None, None  # carried: the last merged interval so far, which the next block may extend
    for s, e in blocks:
        if s.size == 0:
            continue
        if (last is not None and s[0] < last) or not bool((s[1:] >= s[:-1]).all()):
            return None
        last = s[-1]
        if carried is not None:
            s, e = np.concatenate(([carried[0]], s)), np.concatenate(([carried[1]], e))
        ms, me = merge(s, e, spend_ends=True)
        total += int((me[:-1] - ms[:-1]).sum())
        carried = (ms[-1], me[-1])
    return total + (int(carried[1] - carried[0]) if carried is not None else 0)


def merge_runs(runs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``merge`` of the union of several sets of intervals (starts, ends): the same answer as ``merge`` of their
    concatenation, without its sort when each set is in order of start (a big trace's kernels are millions)."""
    together = interleave(runs)
    if together is None:
        return merge(np.concatenate([s for s, _ in runs]), np.concatenate([e for _, e in runs]))
    return merge(together[0], together[1])


def interleave(runs: Sequence[Sequence[np.ndarray]], consume: bool = False) -> list[np.ndarray] | None:
    """The columns of several runs of rows put in order of the first column, as a stable sort of their
    concatenation orders them (ties: the earlier run's rows first, each run's in its order); None when a run is not
    in order of its first column. Each later run is inserted into the rows before it: besides the columns, the
    memory is one column at a time, not an order of every row.

    ``consume``: ``runs`` is a list the caller gives up (emptied here, once the runs are found in order), so that
    each column is freed as soon as its rows are merged, not held to the end."""
    for cols in runs:
        key = cols[0]
        if key.size > 1 and not bool((key[1:] >= key[:-1]).all()):
            return None
    if not runs:
        return []
    dtypes = [np.result_type(*(cols[i] for cols in runs)) for i in range(len(runs[0]))]  # as concatenate's
    rest = list(runs)
    if consume:
        runs.clear()  # type: ignore[attr-defined]
    out = [np.asarray(c, dtype=d) for c, d in zip(rest.pop(0), dtypes, strict=True)]
    while rest:
        cols = list(rest.pop(0))
        if cols[0].size == 0:
            continue
        at = np.searchsorted(out[0], cols[0], side="right")  # after the equal keys of the rows before
        for i in range(len(cols)):
            out[i] = np.insert(out[i], at, cols[i])
            cols[i] = None  # type: ignore[call-overload]
    return out


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
