"""Host-side operator time: total and self time per op name (torch.profiler ``key_averages`` style).

Self time = the op's duration minus the time of ops nested directly inside it on the same thread. Only
``cpu_op`` rows count (annotations and Python frames are containers, not work). Times are over the steps when the
profile has steps, else over the whole trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dnnprof.model.mapped_columns import release_pages_of
from dnnprof.model.profile import Profile
from dnnprof.model.schema import OP_CATEGORIES


@dataclass
class HostOpRow:
    name: str
    calls: int
    total_ns: int
    self_ns: int
    self_pct: float  # of all cpu_op self time


#: Ops whose time is added to their parents' at once by :func:`host_ops`.
_BLOCK_ROWS = 1 << 20


def host_ops(profile: Profile, rank: int = 0) -> list[HostOpRow]:
    """Every cpu_op name with calls, total and self time, sorted by self time."""
    ops = profile.tables["ops"]
    n = ops["start_ns"].size
    if n == 0:
        return []
    dur = np.asarray(ops["dur_ns"], dtype=np.int64)
    cpu_op = OP_CATEGORIES.index("cpu_op")
    in_steps = bool((profile.tables["steps"]["rank"] == rank).any())
    parent = ops["parent_row"]
    other = _time_from_other_blocks(parent, dur, n)
    # Calls, total and self time per name id (+1: an op without a name, -1, counts at 0), a block of rows at a
    # time: float64 sums of integer nanoseconds are exact, whatever the blocks.
    ids = ops["name_id"]
    width = int(ids.max()) + 2
    calls = np.zeros(width, dtype=np.int64)
    tot = np.zeros(width, dtype=np.float64)
    slf = np.zeros(width, dtype=np.float64)
    for a in range(0, n, _BLOCK_ROWS):
        b = min(a + _BLOCK_ROWS, n)
        child = _child_time(parent[a:b], dur[a:b], a, other)
        sel = (ops["rank"][a:b] == rank) & (ops["category"][a:b] == cpu_op)
        if in_steps:
            sel &= ops["step"][a:b] >= 0
        own_rows = np.flatnonzero(sel)
        r = own_rows + a
        k = ids[r].astype(np.int64) + 1
        own = dur[r]
        calls += np.bincount(k, minlength=width)
        tot += np.bincount(k, weights=own, minlength=width)
        slf += np.bincount(k, weights=np.maximum(own - child[own_rows].astype(np.int64), 0), minlength=width)
        release_pages_of(ops["rank"], ops["category"], ops["step"], ids, dur, parent)
    present = np.flatnonzero(calls)
    if present.size == 0:
        return []
    uniq, calls, tot, slf = present - 1, calls[present], tot[present], slf[present]
    grand = float(slf.sum()) or 1.0
    rows = [HostOpRow(profile.strings[int(u)], int(c), int(t), int(s), 100.0 * s / grand)
            for u, c, t, s in zip(uniq.tolist(), calls.tolist(), tot.tolist(), slf.tolist(), strict=True)]
    rows.sort(key=lambda r: -r.self_ns)
    return rows


def _time_from_other_blocks(parent: np.ndarray, dur: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ops with children in other blocks of :data:`_BLOCK_ROWS` rows than their own, and those children's time
    summed per op (sorted by row). A trace's ops come in order of start, parents first, so such an op was still
    running when a later block began: they are few (the ops open on each thread at a block's first start), and
    every op's children's time is the sum over its own block and these, without a column of every op."""
    rows, sums = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.float64)]
    for a in range(0, n, _BLOCK_ROWS):
        p = parent[a:a + _BLOCK_ROWS]
        out = np.flatnonzero((p >= 0) & ((p < a) | (p >= a + p.size)))
        if out.size:
            up, at = np.unique(p[out].astype(np.int64), return_inverse=True)
            rows.append(up)
            sums.append(np.bincount(at.reshape(-1), weights=dur[a + out].astype(np.float64), minlength=up.size))
        release_pages_of(parent, dur)
    up, at = np.unique(np.concatenate(rows), return_inverse=True)
    return up, np.bincount(at.reshape(-1), weights=np.concatenate(sums), minlength=up.size)


def _child_time(parent: np.ndarray, dur: np.ndarray, a: int, other: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The children's time of the block of rows from ``a`` whose ``parent`` and ``dur`` are given (float64, exact
    for integer nanoseconds): from children in the block, and from other blocks (:func:`_time_from_other_blocks`)."""
    m = parent.size
    inside = np.flatnonzero((parent >= a) & (parent < a + m))
    child = np.bincount(parent[inside].astype(np.int64) - a, weights=dur[inside].astype(np.float64),
                        minlength=m).astype(np.float64, copy=False)  # float64 even when nothing is counted
    rows, sums = other
    lo, hi = np.searchsorted(rows, [a, a + m])
    child[rows[lo:hi] - a] += sums[lo:hi]
    return child
