"""Nesting of host ranges on each thread: parent and depth of every op, innermost op enclosing a time.

Both follow a stack walked per thread over ops sorted by (start, -duration): pop the ops that ended at or
before the next op's start; the top left is its parent. :func:`nest` gets the same answer with arrays (a Python
loop over 100k ops costs tens of milliseconds) and walks the stack only for threads whose ranges overlap
without nesting.

A range that starts inside an op but ends more than :data:`CROSSING_TOLERANCE_NS` after it is not that op's child:
it crosses it. Its parent is the nearest op further up that holds its end too. The case that matters: a step
marker opened inside another range and closed inside the next one (``ProfilerStep#N+1`` opened by an optimizer
step post-hook, which runs inside ``Optimizer.step#…``): nested under the optimizer, the whole next step's forward
would inherit the optimizer phase. Other traces show the same with ops whose clocks disagree (``aten::mm`` starting
before ``aten::t`` ended, on its own).
"""

from __future__ import annotations

import itertools

import numpy as np

#: How far a child may outlive the op it starts in and still be its child (timestamp rounding, clock jitter).
CROSSING_TOLERANCE_NS = 1_000


def nest(t: dict[str, np.ndarray]) -> None:
    """parent_row/depth per thread; rows are sorted by (start, -dur) so parents come before children.

    The result is that of a stack walked per thread in row order: pop every op on top that ended at or before
    the next op's start, the top left is its parent, the stack's size its depth. An op whose child outlives it
    (clock jitter) stays open until the child closes. Computed with arrays: see :func:`_pop_steps`.
    """
    n = t["start_ns"].size
    order = np.argsort(t["tid"], kind="stable")  # rows grouped by thread, in row order within a thread
    breaks = [0, *(np.flatnonzero(np.diff(t["tid"][order])) + 1).tolist(), n]
    starts = t["start_ns"][order]
    ends = starts + t["dur_ns"][order]
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    for a, b in itertools.pairwise(breaks):
        parent[a:b], depth[a:b] = _uncross(*_nest_thread(starts[a:b], ends[a:b]), ends[a:b])
    parent = np.where(parent >= 0, order[np.maximum(parent + np.repeat(breaks[:-1], np.diff(breaks)), 0)], -1)
    t["parent_row"][order] = parent
    t["depth"][order] = depth


def _uncross(parent: np.ndarray, depth: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-parent every op that outlives its parent by more than the tolerance onto the nearest ancestor that holds
    its end (-1 when none); depths follow. Parents come before children, so ancestors are settled first."""
    crossing = np.flatnonzero((parent >= 0) & (e > e[np.maximum(parent, 0)] + CROSSING_TOLERANCE_NS))
    if crossing.size == 0:
        return parent, depth
    parent = parent.copy()
    for k in crossing.tolist():  # few: a handful of step markers, or ops with clocks out of step
        p = int(parent[k])
        while p >= 0 and e[k] > e[p] + CROSSING_TOLERANCE_NS:
            p = int(parent[p])
        parent[k] = p
    return parent, _depths(parent)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of every op, by pointer jumping (O(n log depth))."""
    hops = (parent >= 0).astype(np.int64)
    up = parent.astype(np.int64)
    while True:
        live = np.flatnonzero(up >= 0)
        if live.size == 0:
            return hops
        nxt = up[live]
        hops[live] = hops[live] + hops[nxt]  # a root adds 0; an op whose pointer already reached the top, its depth
        up[live] = up[nxt]


def _nest_thread(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, depth) of one thread's ops in order, as local indexes (-1: no parent)."""
    m = s.size
    pops = _pop_steps(s, e, _POP_ROUNDS)
    if pops is None:
        return _walk_thread(s.tolist(), e.tolist())
    idx = np.arange(m)
    # On the stack at step k: every j < k not yet popped (pops[j] > k).
    depth = idx - np.searchsorted(np.sort(pops), idx, side="right")
    # The parent is the last earlier op one level up: everything pushed after it, while it was open, is deeper.
    keys = np.sort(depth * (m + 1) + idx)
    want = (depth - 1) * (m + 1) + idx
    at = np.searchsorted(keys, want, side="left") - 1
    parent = np.where(depth > 0, keys[np.maximum(at, 0)] - (depth - 1) * (m + 1), -1)
    return parent, depth


#: Rounds of :func:`_pop_steps` before falling back to the stack walk (real traces converge in one or two;
#: chains of overlapping, unnested ranges would need one round per link).
_POP_ROUNDS = 8


def _pop_steps(s: np.ndarray, e: np.ndarray, rounds: int) -> np.ndarray | None:
    """For each op j, the step at which the stack walk pops it (m when never); None when not settled in
    ``rounds`` rounds.

    j is popped at the first step k > j whose start reaches the latest end among ops j..k-1 (those still above
    j keep it open). Found by raising a lower bound: first k with s[k] >= e[j], then with s[k] >= max(e[j:k]),
    until the bound no longer moves (no clock jitter: one round).
    """
    m = s.size
    idx = np.arange(m)
    pops = np.maximum(np.searchsorted(s, e, side="left"), idx + 1)
    levels = [e]  # sparse table: levels[l][i] = max(e[i:i + 2**l])
    while (1 << len(levels)) <= m:
        prev, w = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-w], prev[w:]))
    for _ in range(rounds):
        hi = np.minimum(pops, m)
        lv = np.floor(np.log2(hi - idx)).astype(np.int64)  # spans are >= 1
        reach = np.empty(m, dtype=e.dtype)
        for level in np.unique(lv, return_index=True)[0].tolist():
            sel = np.flatnonzero(lv == level)
            table = levels[level]
            reach[sel] = np.maximum(table[sel], table[hi[sel] - (1 << level)])
        moved = np.maximum(np.searchsorted(s, reach, side="left"), pops)
        if np.array_equal(moved, pops):
            return pops
        pops = moved
    return None


def _walk_thread(starts: list[int], ends: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The stack walk itself, for one thread (the fallback of :func:`_nest_thread`)."""
    parent = [-1] * len(starts)
    depth = [0] * len(starts)
    open_rows: list[int] = []  # the enclosing ops still open, outermost first
    for k, s in enumerate(starts):
        while open_rows and ends[open_rows[-1]] <= s:
            open_rows.pop()
        # A child that outlives its parent (clock jitter) is still nested if it starts inside it.
        if open_rows:
            parent[k] = open_rows[-1]
            depth[k] = len(open_rows)
        open_rows.append(k)
    return np.array(parent, dtype=np.int64), np.array(depth, dtype=np.int64)


def innermost_enclosing(ops: dict[str, np.ndarray], tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row of the innermost op on the same thread whose [start, end) holds each time, -1 when none."""
    out = np.full(t.shape, -1, dtype=np.int32)
    if ops["start_ns"].size == 0 or t.size == 0:
        return out
    starts, ends, parent = ops["start_ns"], ops["start_ns"] + ops["dur_ns"], ops["parent_row"]
    for th in distinct(tid):
        rows = np.flatnonzero(ops["tid"] == th)
        if rows.size == 0:
            continue
        q = np.flatnonzero(tid == th)
        i = np.searchsorted(starts[rows], t[q], side="right") - 1
        cand = np.where(i >= 0, rows[np.clip(i, 0, None)], -1)
        for _ in range(256):  # walk up the nesting until the candidate encloses the time
            bad = (cand >= 0) & (ends[np.clip(cand, 0, None)] <= t[q])
            if not bad.any():
                break
            cand = np.where(bad, parent[np.clip(cand, 0, None)], cand)
        out[q] = cand
    return out


def distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values: np.unique without its first-call import of numpy.ma (~20 ms)."""
    v = np.sort(a)
    return v[np.concatenate(([True], v[1:] != v[:-1]))] if v.size else v
