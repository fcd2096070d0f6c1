"""Op nesting (``nest``) and the innermost op at a time (``innermost_enclosing``) against the per-thread stack walk
they replace, on every real trace at hand and on adversarial tables; and their cost against the thread count."""

from __future__ import annotations

import bisect
import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest.kineto import read_kineto
from dnnprof.ingest.nesting import CROSSING_TOLERANCE_NS, innermost_enclosing, nest
from dnnprof.ingest.nsys_sqlite import read_nsys_sqlite
from dnnprof.model.schema import empty_table

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared"


def _is_trace(p: Path) -> bool:
    if p.suffix == ".sqlite":
        return True
    if not p.name.endswith((".json", ".json.gz")):
        return False
    with (gzip.open(p) if p.suffix == ".gz" else p.open("rb")) as f:
        return b'"traceEvents"' in f.read(1 << 16)


def _traces() -> list[Path]:
    found = sorted(p for p in DATA.rglob("*") if _is_trace(p))
    for folder in (SHARED / "foreign", SHARED / "traces"):
        if folder.is_dir():
            found += sorted(p for p in folder.rglob("*") if _is_trace(p))
    return found


# --- the reference: one thread at a time, one op at a time -----------------------------------------------------------
def nest_reference(tid: list[int], start: list[int], dur: list[int]) -> tuple[list[int], list[int]]:
    """The stack walk per thread over rows sorted by (start, -dur); then, in row order, an op that outlives its parent
    by more than the tolerance climbs until an ancestor holds its end."""
    parent: list[int] = []
    stacks: dict[int, list[int]] = {}
    end = [s + d for s, d in zip(start, dur, strict=True)]
    for i, (th, s) in enumerate(zip(tid, start, strict=True)):
        stack = stacks.setdefault(th, [])
        while stack and end[stack[-1]] <= s:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
    for i in range(len(parent)):
        while parent[i] >= 0 and end[i] > end[parent[i]] + CROSSING_TOLERANCE_NS:
            parent[i] = parent[parent[i]]
    depth: list[int] = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    return parent, depth


def innermost_reference(ops: dict[str, np.ndarray], tid: list[int], t: list[int]) -> list[int]:
    """Per time: the last op of its thread starting at or before it, then up at most 256 parents until one ends
    after it."""
    rows: dict[int, list[int]] = {}
    for r, th in enumerate(ops["tid"].tolist()):
        rows.setdefault(th, []).append(r)
    starts, ends = ops["start_ns"].tolist(), (ops["start_ns"] + ops["dur_ns"]).tolist()
    parent = ops["parent_row"].tolist()
    begins = {th: [starts[r] for r in mine] for th, mine in rows.items()}
    out = []
    for th, x in zip(tid, t, strict=True):
        mine = rows.get(th, [])
        i = bisect.bisect_right(begins.get(th, []), x) - 1
        c = mine[i] if i >= 0 else -1
        for _ in range(256):
            if c < 0 or ends[c] > x:
                break
            c = parent[c]
        out.append(c)
    return out


def _check(ops: dict[str, np.ndarray], queries: list[tuple[np.ndarray, np.ndarray]]) -> None:
    t = {k: np.array(v) for k, v in ops.items()}
    nest(t)
    parent, depth = nest_reference(t["tid"].tolist(), t["start_ns"].tolist(), t["dur_ns"].tolist())
    assert t["parent_row"].tolist() == parent
    assert t["depth"].tolist() == depth
    for tid, when in queries:
        got = innermost_enclosing(t, tid, when)
        assert got.dtype == np.int32
        assert got.tolist() == innermost_reference(t, tid.tolist(), when.tolist())


def _table(tid: np.ndarray, start: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
    order = np.lexsort((-dur, start))  # the readers' row order: by start, longer first
    t = empty_table("ops", start.size)
    t["tid"][:], t["start_ns"][:], t["dur_ns"][:] = tid[order], start[order], dur[order]
    return t


# --- every real trace ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", _traces(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_nesting_of_a_real_trace_matches_the_stack_walk(path: Path) -> None:
    profile = read_nsys_sqlite(path) if path.suffix == ".sqlite" else read_kineto(path)
    ops = profile.tables["ops"]
    queries = [(ops["tid"], ops["start_ns"]), (ops["tid"], ops["start_ns"] + ops["dur_ns"])]
    for table, col in (("runtime", "start_ns"), ("memory_events", "ts_ns")):
        if table in profile.tables:
            queries.append((profile.tables[table]["tid"], profile.tables[table][col]))
    _check({k: ops[k] for k in ("tid", "start_ns", "dur_ns", "parent_row", "depth")}, queries)


# --- adversarial tables ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(24))
def test_random_tables_on_many_threads_match_the_stack_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2000))
    threads = [1, 3, 50, n][seed % 4]  # one thread, a few, many, one op each
    scale = [1, 1000][seed % 2]
    start = rng.integers(0, [60, 5000, 10**6][seed % 3], n) * scale  # small spans: many equal starts
    dur = rng.integers(0, [80, 3000, 10**5][seed % 5 % 3], n) * scale
    dur[rng.random(n) < 0.1] = 0
    tid = rng.integers(0, threads, n)
    queries = rng.integers(0, threads + 2, 400), rng.integers(-10, int(start.max()) + 10**5, 400)
    _check(_table(tid, start, dur), [queries])


@pytest.mark.parametrize("spread", [1, 10**6, 2**58])
def test_innermost_op_at_times_far_outside_the_ops(spread: int) -> None:
    """Times before the first start and after the last, down to int64's ends, on ops whose starts are close (keys
    from the times themselves) or spread over most of int64 (keys from the ranks of the starts)."""
    start = np.array([-3, -3, 0, 2, 5, 9, 9, 12]) * spread
    dur = np.array([20, 4, 1, 3, 8, 0, 2, 1]) * spread
    big = np.iinfo(np.int64)
    when = np.array([big.min, -(2**62), -4 * spread, -3 * spread, -1, 0, 3 * spread, 9 * spread, 10**17, big.max])
    for threads in (1, 3):
        tid = np.arange(start.size) % threads
        _check(_table(tid, start, dur), [(np.repeat(np.arange(threads + 1), when.size),
                                          np.tile(when, threads + 1))])


@pytest.mark.parametrize("block", [1, 7, 400])
def test_innermost_op_looked_up_a_block_of_times_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Times are looked up in blocks (memory bounded by the block, not by the table): any block size gives the
    stack walk's answer."""
    from dnnprof.ingest import nesting

    monkeypatch.setattr(nesting, "_QUERY_ROWS", block)
    rng = np.random.default_rng(block)
    n = 600
    start, dur = rng.integers(0, 5000, n), rng.integers(0, 3000, n)
    tid = rng.integers(0, 4, n)
    queries = rng.integers(0, 6, 401), rng.integers(-10, 9000, 401)
    _check(_table(tid, start, dur), [queries])


@pytest.mark.parametrize("block", [1, 2, 1 << 17])
def test_ops_out_of_order_of_start_are_refused(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup searches the starts of every thread at once: ops in order on each thread but not across threads
    would give an outer op, so they are refused with a clear error."""
    from dnnprof.model import profile

    monkeypatch.setattr(profile, "_CHECK_ROWS", block)  # the order is checked a block at a time
    t = empty_table("ops", 3)
    t["tid"][:], t["start_ns"][:], t["dur_ns"][:] = [1, 2, 1], [0, 200, 10], [100, 50, 20]
    t["parent_row"][:] = [-1, -1, 0]
    with pytest.raises(ValueError, match="not in order of start"):
        innermost_enclosing(t, np.array([1]), np.array([20]))


def test_thread_keys_beyond_32_bits_and_a_shared_index() -> None:
    """Keys of 64 bits when threads × rows pass 2**31 (50,000 ops, each on its own thread, and a few threads of
    many ops), and one ThreadRows shared by several lookups: the stack walk's answers."""
    from dnnprof.ingest.nesting import ThreadRows

    rng = np.random.default_rng(5)
    n = 50_000
    start, dur = rng.integers(0, 10**6, n), rng.integers(0, 5000, n)
    tid = np.where(rng.random(n) < 0.9, np.arange(n) + 10, rng.integers(0, 3, n))
    t = _table(tid, start, dur)
    nest(t)
    shared = ThreadRows(t)
    assert shared.keys.dtype == np.int64
    for seed in range(3):
        q = np.random.default_rng(seed)
        picks = q.integers(0, n, 2000)
        tids, when = t["tid"][picks], t["start_ns"][picks] + q.integers(-10, 3000, picks.size)
        got = innermost_enclosing(t, tids, when, threads=shared)
        assert got.tolist() == innermost_enclosing(t, tids, when).tolist()
        assert got.tolist() == innermost_reference(t, tids.tolist(), when.tolist())


@pytest.mark.parametrize("block", [1, 3, 50])
@pytest.mark.parametrize("seed", range(12))
def test_ops_nested_a_block_of_rows_at_a_time(block: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big table is nested in blocks that start where a thread has nothing open (memory bounded by the block,
    not by the table): any block size gives the stack walk's answer, crossings and equal starts included."""
    from dnnprof.ingest import nesting

    monkeypatch.setattr(nesting, "_NEST_ROWS", block)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 1500))
    threads = [1, 2, 7, n][seed % 4]
    start = rng.integers(0, [40, 4000, 10**6][seed % 3], n) * [1, 1000][seed % 2]
    dur = rng.integers(0, [30, 400, 10**4][seed % 3], n) * [1, 1000][seed % 2]
    dur[rng.random(n) < 0.2] = 0
    tid = rng.integers(0, threads, n)
    t = _table(tid, start, dur)
    blocks = nesting._blocks(t, np.argsort(t["tid"], kind="stable"), np.unique(t["tid"]), block)
    assert blocks[0] == 0 and blocks[-1] == n and (np.diff(blocks) > 0).all()
    if seed % 3 == 2 and block < n:  # spread-out times leave the walk empty often: the table is cut
        assert blocks.size > 2
    _check(_table(tid, start, dur), [])


def test_the_stack_walk_fallback_on_some_threads_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread of overlapping, unnested ranges (the rounds do not settle) next to threads that nest plainly."""
    from dnnprof.ingest import nesting

    monkeypatch.setattr(nesting, "_POP_ROUNDS", 2)
    chain = np.arange(500)
    tree_start = np.repeat(np.arange(50) * 1000, 5) + np.tile([0, 10, 20, 30, 40], 50)
    tree_dur = np.tile([900, 500, 100, 10, 0], 50)
    tid = np.concatenate((np.full(500, 7), np.full(250, 3), np.full(250, 9)))
    _check(_table(tid, np.concatenate((chain, tree_start, tree_start)), np.concatenate((np.full(500, 10), tree_dur,
                                                                                       tree_dur))), [])


@pytest.mark.parametrize("threads", [1, 5, 3000])
def test_ranges_that_each_cross_a_long_chain_of_ancestors(threads: int) -> None:
    """Every op starts inside all earlier ones and ends after them: each crosses its whole chain of ancestors (the
    jump up the chain, not one step per ancestor)."""
    n = 3000
    start = np.arange(n) * 2 * CROSSING_TOLERANCE_NS
    _check(_table(np.arange(n) % threads, start, np.full(n, 10**9)), [(np.zeros(5, dtype=np.int64), start[:5])])


@pytest.mark.parametrize("threads", [1, 4])
def test_deep_nesting_equal_starts_and_zero_durations(threads: int) -> None:
    n = 2000
    tid = np.arange(n) % threads
    _check(_table(tid, np.zeros(n, dtype=np.int64), np.arange(n)), [(tid[:50], np.arange(50))])  # equal starts
    _check(_table(tid, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)), [(tid[:5], np.arange(5))])
    deep = np.arange(n) * 10
    _check(_table(tid, deep, 10**7 - 2 * deep), [(tid, deep + 5), (tid, 10**7 - deep)])  # each inside the last


def test_crossing_within_the_tolerance_stays_nested() -> None:
    tol = CROSSING_TOLERANCE_NS
    t = _table(np.array([1, 1, 1]), np.array([0, 10, 20]), np.array([100, 90 + tol, 81 + 2 * tol]))
    nest(t)
    assert t["parent_row"].tolist() == [-1, 0, -1]  # the second ends tol late: nested; the third crosses both
    _check(t, [])


# --- cost against the thread count -----------------------------------------------------------------------------------
def _best_s(f: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def test_cost_does_not_grow_with_the_number_of_threads() -> None:
    """20,000 nested ops on one thread, then each op tree on its own thread, then each op alone: a per-thread loop
    made the last two hundreds of times slower (5 s against 20 ms for nest)."""
    n = 20_000
    start = np.repeat(np.arange(n // 4) * 1000, 4) + np.tile([0, 10, 20, 30], n // 4)
    dur = np.tile([900, 500, 100, 10], n // 4)
    one = _table(np.zeros(n, dtype=np.int64), start, dur)
    trees = _table(np.repeat(np.arange(n // 4), 4), start, dur)
    alone = _table(np.arange(n), start, dur)
    times = {}
    for name, t in (("one", one), ("trees", trees), ("alone", alone)):
        times[name] = _best_s(lambda t=t: (nest(t), innermost_enclosing(t, t["tid"], t["start_ns"] + 1)))
    assert max(times["trees"], times["alone"]) < 5 * times["one"] + 0.05, times


@pytest.mark.parametrize("block", [1, 2, 5, 1 << 20])
def test_distinct_a_block_at_a_time_is_np_unique(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.ingest import nesting

    monkeypatch.setattr(nesting, "_DISTINCT_ROWS", block)
    rng = np.random.default_rng(block)
    for n in (0, 1, 2, 9, 300):
        a = rng.integers(-5, 5, n)
        assert nesting.distinct(a).tolist() == np.unique(a).tolist()
        assert nesting.distinct(np.sort(a)).tolist() == np.unique(a).tolist()
