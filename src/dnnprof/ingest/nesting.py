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

from typing import Any

import numpy as np

from dnnprof.ingest.row_groups import rows_by_group
from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.profile import in_order

#: How far a child may outlive the op it starts in and still be its child (timestamp rounding, clock jitter).
CROSSING_TOLERANCE_NS = 1_000


def nest(t: dict[str, np.ndarray]) -> None:
    """parent_row/depth per thread; rows are sorted by (start, -dur) so parents come before children.

    The result is that of a stack walked per thread in row order: pop every op on top that ended at or before
    the next op's start, the top left is its parent, the stack's size its depth. An op whose child outlives it
    (clock jitter) stays open until the child closes. Computed with arrays for every thread at once (rows grouped
    by thread, times replaced by thread-keyed ranks so one sorted array serves all threads): the cost does not
    depend on how the ops spread over threads. See :func:`_pop_steps`.

    A big table is nested a block of rows at a time, and every pass over it goes a block at a time too: besides
    the table, the memory is a 32-bit column of positions and one of depths, and a block's temporaries.
    """
    n = t["start_ns"].size
    if n == 0:
        return
    rows32 = np.int32 if n < 2**31 else np.int64
    order, _, threads = _by_thread(t["tid"])  # rows grouped by thread, in row order within one
    depth = np.empty(n, dtype=rows32)  # by row; the table's column is narrower
    blocks = _blocks(t, order, threads, _NEST_ROWS)
    for a, b in zip(blocks[:-1].tolist(), blocks[1:].tolist(), strict=True):
        o = order[a:b]
        s, e, thread = _grouped(t, o, threads)
        local = thread - thread[0]  # 0, 1, … ascending: the longest thread of the block is a bincount
        p, d = _nest_threads(s, e, local, int(np.bincount(local).max()))
        del s, e, thread, local
        t["parent_row"][o] = np.where(p >= 0, o[np.maximum(p, 0)], -1)
        depth[o] = d
        del p, d
        release_pages()
    del order
    _uncross(t, depth)
    release_pages()
    t["depth"][:] = depth


#: Rows nested at once by :func:`nest`: whole top-level stretches of a thread are taken together up to about this
#: many rows (the array method's temporaries are a few dozen columns of the rows it is given); the passes over the
#: whole table go this many rows at a time.
_NEST_ROWS = 1 << 18


def _grouped(t: dict[str, np.ndarray], o: np.ndarray, threads: np.ndarray) -> tuple[np.ndarray, ...]:
    """Start, end and thread number (index into ``threads``) of the rows ``o``."""
    s = t["start_ns"][o]
    return s, s + t["dur_ns"][o], np.searchsorted(threads, t["tid"][o])


def _blocks(t: dict[str, np.ndarray], order: np.ndarray, threads: np.ndarray, rows: int) -> np.ndarray:
    """Positions that split the rows ``order`` (grouped by thread) into blocks of about ``rows`` that nest
    independently: each block starts where its thread's stack walk has nothing open (every earlier op of the thread
    ended at or before that start), so the walk gives the same answer on the block alone. One block when there
    are few rows, or when the times do not allow the thread-keyed comparison below without overflow."""
    n = order.size
    whole = np.array([0, n], dtype=np.int64)
    if n <= rows:
        return whole
    start, dur = t["start_ns"], t["dur_ns"]
    hi = np.iinfo(np.int64).min
    for a in range(0, n, rows):
        s = start[a:a + rows]
        e = s + dur[a:a + rows]
        if (e < s).any():  # a negative duration, or an end beyond int64
            return whole
        hi = max(hi, int(e.max()))
        release_pages_of(start, dur)  # a big trace's mapped columns: a block's pages at a time
    lo = int(start.min())
    span = hi - lo + 1
    if threads.size * span >= 2**62:
        return whole
    cuts = [0]
    latest = np.iinfo(np.int64).min  # the latest end so far, keyed by thread
    bucket = 0  # the stretch of ``rows`` positions of the last cut
    for a in range(0, n, rows):
        s, e, thread = _grouped(t, order[a:a + rows], threads)
        base = thread.astype(np.int64) * span  # times from ``lo`` lie in [0, span): thread keys never overlap
        reach = np.maximum.accumulate(base + (e - lo))
        before = np.concatenate(([latest], reach[:-1]))
        np.maximum(before, latest, out=before)
        free = np.flatnonzero(base + (s - lo) >= before) + a  # an earlier thread's keys all lie below these starts
        latest = max(latest, int(reach[-1]))
        del s, e, thread, base, reach, before
        release_pages_of(start, dur, t["tid"])
        stretch = free // rows
        first = np.flatnonzero(np.diff(stretch, prepend=bucket))  # the first free position of each new stretch
        cuts += free[first].tolist()
        if stretch.size:
            bucket = int(stretch[-1])
    cuts = [c for c in cuts if c > 0]
    return np.array([0, *cuts, n], dtype=np.int64)


def _uncross(t: dict[str, np.ndarray], depth: np.ndarray) -> None:
    """Re-parent every op that outlives its parent by more than the tolerance onto the nearest ancestor that holds
    its end (-1 when none); depths follow.

    The nearest ancestor on the original chain: climbing through an ancestor already re-parented skips only ops
    that ended even earlier, which the climber outlives too.
    """
    parent, start, dur = t["parent_row"], t["start_ns"], t["dur_ns"]
    n = parent.size

    def end(rows: np.ndarray) -> np.ndarray:
        return start[rows] + dur[rows]

    found = []
    for a in range(0, n, _NEST_ROWS):
        p = parent[a:a + _NEST_ROWS]
        e = start[a:a + _NEST_ROWS] + dur[a:a + _NEST_ROWS]
        found.append(np.flatnonzero((p >= 0) & (e > end(np.maximum(p, 0)) + CROSSING_TOLERANCE_NS)) + a)
        release_pages_of(parent, start, dur)  # a big trace's mapped columns: a block's pages at a time
    crossing = np.concatenate(found)
    if crossing.size == 0:
        return
    holder = parent[crossing].astype(np.int64)
    crossing_end = end(crossing)
    live = np.arange(crossing.size)
    for _ in range(_CLIMB_ROUNDS):  # a handful of step markers, or ops with clocks out of step: one or two rounds
        h = holder[live]
        live = live[(h >= 0) & (crossing_end[live] > end(np.maximum(h, 0)) + CROSSING_TOLERANCE_NS)]
        if live.size == 0:
            break
        holder[live] = parent[holder[live]]
    else:  # ranges that each outlive a long chain of ancestors: jump up the chain instead of stepping
        holder[live] = _first_up(parent, start + dur + CROSSING_TOLERANCE_NS, holder[live], crossing_end[live])
    parent[crossing] = holder
    _depths(parent, depth, int(crossing.min()))


#: Steps up the ancestors before :func:`_uncross` switches to :func:`_first_up`.
_CLIMB_ROUNDS = 16


def _first_up(parent: np.ndarray, value: np.ndarray, start: np.ndarray, least: np.ndarray) -> np.ndarray:
    """For each start node, the first node on its chain of ancestors (itself included) whose value is at least
    ``least`` (-1 when none), by binary lifting: O(n log depth)."""
    n = parent.size
    up = [np.append(np.where(parent >= 0, parent, n), n)]  # up[l][v]: the 2**l-th ancestor (n: above the root)
    top = [np.append(value, np.iinfo(np.int64).min)]  # top[l][v]: max value over v and its next 2**l - 1 ancestors
    while len(up) < 64 and not (up[-1][:n] == n).all():
        up.append(up[-1][up[-1]])
        top.append(np.maximum(top[-1], top[-1][up[-2]]))
    v = np.where(start >= 0, start, n)
    for level in range(len(up) - 1, -1, -1):  # jump over every block that holds no value high enough
        low = top[level][v] < least
        v = np.where(low, up[level][v], v)
    return np.where(v < n, v, -1)


def _depths(parent: np.ndarray, depth: np.ndarray, first: int) -> None:
    """``depth`` of every row from ``first`` on, from ``parent``: a parent's row comes before its child's, so a
    block of rows at a time, each by pointer jumping from the depths of the rows before it (O(n log depth))."""
    for a in range(first, parent.size, _NEST_ROWS):
        p = parent[a:a + _NEST_ROWS].astype(np.int64)
        hops = (p >= 0).astype(np.int64)
        before = np.flatnonzero((p >= 0) & (p < a))
        hops[before] += depth[p[before]]  # final already
        up = np.where(p >= a, p - a, -1)
        del p, before
        while True:
            live = np.flatnonzero(up >= 0)
            if live.size == 0:
                break
            nxt = up[live]
            hops[live] = hops[live] + hops[nxt]  # a root adds 0; a row whose pointer already reached the top, its depth
            up[live] = up[nxt]
        depth[a:a + hops.size] = hops


def _nest_threads(s: np.ndarray, e: np.ndarray, thread: np.ndarray, longest: int) -> tuple[np.ndarray, np.ndarray]:
    """(parent, depth) of ops grouped by thread (``thread`` ascending), positions as indexes (-1: no parent)."""
    m = s.size
    # Times as ranks keyed by thread: key order within a thread is time order, and every key of a thread lies
    # below every key of the next, so one searchsorted answers "first op of this thread starting at or after".
    ranks = distinct(np.concatenate((s, e)))
    width = ranks.size + 1
    rank_dtype = np.int32 if width < 2**31 else np.int64
    rs = np.searchsorted(ranks, s).astype(rank_dtype)
    re = np.searchsorted(ranks, e).astype(rank_dtype)
    base = thread.astype(np.int64) * width
    pops, stuck = _pop_steps(base + rs, base, re, longest, _POP_ROUNDS)
    idx = np.arange(m)
    # On the stack at step k: every j < k of its thread not yet popped (pops[j] > k); ops of earlier threads are all
    # popped by k (pops never pass the thread's end), so counting over all threads gives the same depth.
    depth = idx - np.searchsorted(np.sort(pops), idx, side="right")
    # The parent is the last earlier op one level up: everything pushed after it, while it was open, is deeper.
    keys = np.sort(depth * (m + 1) + idx)
    want = (depth - 1) * (m + 1) + idx
    at = np.searchsorted(keys, want, side="left") - 1
    parent = np.where(depth > 0, keys[np.maximum(at, 0)] - (depth - 1) * (m + 1), -1)
    if stuck.size:  # threads whose rounds did not settle: the stack walk, over their ops only
        walk = np.zeros(int(thread[-1]) + 1, dtype=bool)
        walk[thread[stuck]] = True
        rows = np.flatnonzero(walk[thread])
        p, d = _walk_threads(s[rows].tolist(), e[rows].tolist(), thread[rows].tolist())
        parent[rows] = np.where(p >= 0, rows[np.maximum(p, 0)], -1)
        depth[rows] = d
    return parent, depth


#: Rounds of :func:`_pop_steps` before a thread falls back to the stack walk (real traces converge in one or two;
#: chains of overlapping, unnested ranges would need one round per link).
_POP_ROUNDS = 8


def _pop_steps(ks: np.ndarray, base: np.ndarray, re: np.ndarray, longest: int,
               rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """For each op j, the position at which the stack walk of its thread pops it (its thread's end when never),
    and the ops not settled in ``rounds`` rounds.

    j is popped at the first step k > j whose start reaches the latest end among ops j..k-1 (those still above
    j keep it open). Found by raising a lower bound: first k with s[k] >= e[j], then with s[k] >= max(e[j:k]),
    until the bound no longer moves (no clock jitter: one round). ``ks`` are the starts' keys (thread base + rank),
    ``re`` the ends' ranks; a bound never passes the end of j's thread, whose keys are all lower than the next's.
    """
    m = ks.size
    idx = np.arange(m)
    pops = np.maximum(np.searchsorted(ks, base + re, side="left"), idx + 1)
    levels = [re]  # sparse table: levels[l][i] = max(re[i:i + 2**l]); spans stay within a thread
    while (1 << len(levels)) <= longest:
        prev, w = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-w], prev[w:]))
    live = idx
    for _ in range(rounds):
        if live.size == 0:
            break
        hi = pops[live]
        lv = np.floor(np.log2(hi - live)).astype(np.int64)  # spans are >= 1
        reach = np.empty(live.size, dtype=re.dtype)
        for level in np.unique(lv, return_index=True)[0].tolist():
            sel = np.flatnonzero(lv == level)
            table = levels[level]
            reach[sel] = np.maximum(table[live[sel]], table[hi[sel] - (1 << level)])
        moved = np.maximum(np.searchsorted(ks, base[live] + reach, side="left"), hi)
        still = moved != hi
        pops[live] = moved
        live = live[still]  # an op whose bound did not move is settled: its next round would compute the same
    return pops, live


def _walk_threads(starts: list[int], ends: list[int], thread: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The stack walk itself, over ops grouped by thread (the fallback of :func:`_nest_threads`)."""
    parent = [-1] * len(starts)
    depth = [0] * len(starts)
    open_rows: list[int] = []  # the enclosing ops still open, outermost first
    current = None
    for k, s in enumerate(starts):
        if thread[k] != current:
            current, open_rows = thread[k], []
        while open_rows and ends[open_rows[-1]] <= s:
            open_rows.pop()
        # A child that outlives its parent (clock jitter) is still nested if it starts inside it.
        if open_rows:
            parent[k] = open_rows[-1]
            depth[k] = len(open_rows)
        open_rows.append(k)
    return np.array(parent, dtype=np.int64), np.array(depth, dtype=np.int64)


def _by_thread(tid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, ends, threads): the rows grouped by thread (threads in id order), in row order within one, without a
    sort of every row (:func:`~dnnprof.ingest.row_groups.rows_by_group`); where each thread's rows end; the
    distinct thread ids. A big trace's mapped column is read a block at a time."""
    threads = distinct(tid)

    def codes(lo: int, hi: int) -> np.ndarray:
        out = np.searchsorted(threads, tid[lo:hi])
        release_pages_of(tid)
        return out

    rows, ends = rows_by_group(tid.size, threads.size, codes, _QUERY_ROWS)
    return rows, ends, threads


class ThreadRows:
    """The rows of an ops table grouped by thread, as one ascending column of keys ``k * (rows + 1) + row`` for the
    row's thread ``threads[k]`` (threads in id order, rows in order within each): "the last row of a thread at or
    before a row" is one search of it. Made once per table and shared by its lookups (:func:`innermost_enclosing`);
    4 bytes a row when the keys fit in 32 bits, else 8."""

    def __init__(self, ops: dict[str, np.ndarray]) -> None:
        if not in_order(ops["start_ns"]):  # the lookups search the starts of every thread at once
            raise ValueError("ops not in order of start: sort them as the readers do (by start, the longer first)")
        n = ops["tid"].size
        rows, ends, self.threads = _by_thread(ops["tid"])
        self.width = n + 1
        self.keys = rows.astype(np.int32 if self.threads.size * self.width < 2**31 else np.int64, copy=False)
        for lo in range(0, n, _QUERY_ROWS):  # each position's thread, a block at a time
            at = np.arange(lo, min(lo + _QUERY_ROWS, n))
            self.keys[lo:lo + at.size] += np.searchsorted(ends, at, side="right") * self.width


def innermost_enclosing(ops: dict[str, np.ndarray], tid: np.ndarray, t: np.ndarray, pool: Any = None,
                        threads: ThreadRows | None = None) -> np.ndarray:
    """Row of the innermost op on the same thread whose [start, end) holds each time, -1 when none.

    ``ops`` must be in the readers' order (by start, the longer first: :func:`nest`'s order). Per time: the last op
    of any thread starting at or before it (a search of the starts), then the last op of its own thread at or
    before that row (a search of the thread's rows, from ``threads``: made here when not given), then up the
    parents until one ends after the time. With a ``pool`` (a :class:`concurrent.futures.Executor` of threads),
    smaller blocks of times are looked up side by side.
    """
    out = np.full(t.shape, -1, dtype=np.int32)
    if ops["start_ns"].size == 0 or t.size == 0:
        return out
    groups = ThreadRows(ops) if threads is None else threads
    starts, parent = ops["start_ns"], ops["parent_row"]

    def block(lo: int, hi: int, threaded: bool) -> None:
        out[lo:hi] = _innermost(tid[lo:hi], t[lo:hi], groups, ops, parent)
        if threaded:  # the columns this block read, not the other threads' working pages
            release_pages_of(tid, t, starts, parent, ops["dur_ns"])
        else:
            release_pages()

    rows = _QUERY_ROWS if pool is None else _POOL_QUERY_ROWS
    blocks = [(lo, lo + rows) for lo in range(0, t.size, rows)]  # temporaries of a block, not of t
    if pool is None or len(blocks) < 2:
        for lo, hi in blocks:
            block(lo, hi, False)
    else:
        for f in [pool.submit(block, lo, hi, True) for lo, hi in blocks]:
            f.result()
        release_pages()
    return out


#: Times looked up at once by :func:`innermost_enclosing` (a dozen temporaries of this many rows), and rows
#: grouped by thread at once.
_QUERY_ROWS = 1 << 17
#: The same, per thread, when several threads look them up (few temporaries each: see kineto_tables' blocks).
_POOL_QUERY_ROWS = 1 << 14


def _innermost(tid: np.ndarray, t: np.ndarray, groups: ThreadRows, ops: dict[str, np.ndarray],
               parent: np.ndarray) -> np.ndarray:
    out = np.full(t.shape, -1, dtype=np.int32)
    threads = groups.threads
    at = np.minimum(np.searchsorted(threads, tid), threads.size - 1)
    starts, durs = ops["start_ns"], ops["dur_ns"]
    last = np.searchsorted(starts, t, side="right") - 1  # the last op of any thread starting at or before each time
    q = np.flatnonzero((threads[at] == tid) & (last >= 0))  # times on a thread that has ops, after the first start
    if q.size == 0:
        return out
    first = at[q].astype(groups.keys.dtype) * groups.width  # the key of the thread's row 0
    # Its last row at or before the one found; the query in the keys' type (fits: they cover every thread's rows),
    # else numpy would search a converted copy of all the keys.
    i = np.searchsorted(groups.keys, (first + last[q]).astype(groups.keys.dtype), side="right") - 1
    cand = groups.keys[np.maximum(i, 0)] - first
    cand[i < 0] = -1
    ok = cand >= 0  # negative: the key found is another thread's (none of this thread's rows is at or before it)
    q, cand = q[ok], cand[ok]
    tq = t[q]
    live = np.arange(q.size)
    for _ in range(256):  # walk up the nesting until the candidate encloses the time
        c = cand[live]
        live = live[starts[c] + durs[c] <= tq[live]]
        if live.size == 0:
            break
        cand[live] = parent[cand[live]]
        live = live[cand[live] >= 0]
    out[q] = cand
    return out


def distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values: np.unique without its first-call import of numpy.ma (~20 ms), and without a sort of
    values already in order (a reader's ops, by start). A big column goes a block at a time: no sorted copy of it
    (a trace's thread ids: tens of millions of rows, a few distinct values)."""
    if a.size > _DISTINCT_ROWS:
        parts = [_distinct(a[i:i + _DISTINCT_ROWS]) for i in range(0, a.size, _DISTINCT_ROWS)]
        release_pages_of(a)
        return _distinct(np.concatenate(parts))
    return _distinct(a)


def _distinct(a: np.ndarray) -> np.ndarray:
    v = a if bool((a[1:] >= a[:-1]).all()) else np.sort(a)
    return v[np.concatenate(([True], v[1:] != v[:-1]))] if v.size else v


#: Rows :func:`distinct` sorts at once.
_DISTINCT_ROWS = 1 << 20
