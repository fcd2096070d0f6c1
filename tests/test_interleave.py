"""Activities of several tables put in order of start by insertion (no order of every row): the same rows in the
same order as a stable sort of their concatenation, and the same busy time."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.analysis.intervals import interleave, merge, merge_runs, union_ns
from dnnprof.analysis.utilization import gpu_activity, primary_device, utilization
from dnnprof.ingest.kineto import read_kineto


def _runs(rng: np.random.Generator, sorted_runs: bool) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    out = []
    for _ in range(int(rng.integers(1, 5))):
        n = int(rng.integers(0, 40))
        s = rng.integers(0, 30, n)  # few distinct starts: ties within and across runs
        if sorted_runs:
            s = np.sort(s)
        e = s + rng.integers(-3, 10, n)  # a negative length too: order among ties then matters to merge
        out.append((s, e, np.arange(n) + 1000 * len(out)))  # the third column tells the rows apart
    return out


@pytest.mark.parametrize("seed", range(40))
def test_interleaved_runs_are_the_stable_sort_of_their_concatenation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    runs = _runs(rng, sorted_runs=True)
    cat = [np.concatenate([r[i] for r in runs]) for i in range(3)]
    order = np.argsort(cat[0], kind="stable")
    got = interleave(runs)
    assert got is not None
    assert [c.tolist() for c in got] == [c[order].tolist() for c in cat]
    assert [a.tolist() for a in merge_runs([(s, e) for s, e, _ in runs])] == [a.tolist() for a in merge(cat[0], cat[1])]


@pytest.mark.parametrize("seed", range(20))
def test_runs_out_of_order_are_sorted_as_before(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    runs = _runs(rng, sorted_runs=False)
    cat = [np.concatenate([r[i] for r in runs]) for i in range(2)]
    if any(r[0].size > 1 and (np.diff(r[0]) < 0).any() for r in runs):
        assert interleave(runs) is None
    assert [a.tolist() for a in merge_runs([(s, e) for s, e, _ in runs])] == [a.tolist() for a in merge(*cat)]


@pytest.mark.parametrize("seed", range(20))
def test_interleave_consuming_its_runs_gives_the_same_columns(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    runs = _runs(rng, sorted_runs=True)
    want = interleave(runs)
    given = list(runs)
    got = interleave(given, consume=True)
    assert given == []  # the caller's list is emptied: the columns are freed as they are merged
    assert want is not None and got is not None and [c.tolist() for c in got] == [c.tolist() for c in want]
    unsorted = _runs(np.random.default_rng(seed), sorted_runs=False)
    if any(r[0].size > 1 and (np.diff(r[0]) < 0).any() for r in unsorted):
        kept = list(unsorted)
        assert interleave(kept, consume=True) is None and len(kept) == len(unsorted)  # left for the sort


def test_interleave_widens_as_concatenate_does() -> None:
    got = interleave([(np.array([1, 5], dtype=np.int32),), (np.array([2**40], dtype=np.int64),)])
    assert got is not None and got[0].dtype == np.int64 and got[0].tolist() == [1, 5, 2**40]
    assert interleave([]) == []


def _by_sort(profile, rank: int, device: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The activity columns as first written: every table's rows concatenated, then a stable sort."""
    rt_start = profile.tables["runtime"]["start_ns"]
    cols: list[list[np.ndarray]] = [[], [], []]
    for table in ("kernels", "memcpy", "memset"):
        t = profile.tables[table]
        rows = np.flatnonzero((t["rank"] == rank) & (t["device"] == device))
        s = t["start_ns"][rows].astype(np.int64)
        lr = t["launch_row"][rows]
        cols[0].append(s)
        cols[1].append(s + t["dur_ns"][rows])
        cols[2].append(np.where(lr >= 0, rt_start[np.clip(lr, 0, None)], -1))
    cat = [np.concatenate(c) for c in cols]
    order = np.argsort(cat[0], kind="stable")
    return [c[order].tolist() for c in cat]


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=["deepspeech", "gpt2"])
def test_gpu_activity_on_recorded_traces_is_the_sorted_concatenation(path) -> None:  # type: ignore[no-untyped-def]
    p = read_kineto(path)
    device = primary_device(p)
    assert p.rows("memcpy") + p.rows("memset") > 0 and p.rows("kernels") > 1000
    got = gpu_activity(p, 0, device)
    assert [c.tolist() for c in got] == _by_sort(p, 0, device)
    assert all(c.dtype == np.int64 for c in got)


def test_gpu_activity_of_one_rank_among_two() -> None:
    """Rows of another rank among the kernels: the rank's rows are picked (an index column), not every row."""
    p = read_kineto(DEEPSPEECH)
    device = primary_device(p)
    k = p.tables["kernels"]
    k["rank"] = np.where(np.arange(k["rank"].size) % 3 == 0, 1, k["rank"]).astype(k["rank"].dtype)
    got = gpu_activity(p, 0, device)
    assert [c.tolist() for c in got] == _by_sort(p, 0, device)
    other = gpu_activity(p, 1, device)
    assert [c.tolist() for c in other] == _by_sort(p, 1, device)
    assert other[0].size == (k["rank"] == 1).sum() and got[0].size + other[0].size == sum(
        p.rows(t) for t in ("kernels", "memcpy", "memset"))


def test_gpu_activity_of_every_row_is_a_copy() -> None:
    """Every row of the table is the rank's: the columns are copies, never views a caller could write through."""
    p = read_kineto(GPT2)
    device = primary_device(p)
    start = p.tables["kernels"]["start_ns"].copy()
    p.tables["memcpy"] = {c: v[:0] for c, v in p.tables["memcpy"].items()}
    p.tables["memset"] = {c: v[:0] for c, v in p.tables["memset"].items()}
    got = gpu_activity(p, 0, device)
    assert got[0].tolist() == start.tolist()
    got[0][:] = -5
    assert p.tables["kernels"]["start_ns"].tolist() == start.tolist()


def test_gpu_activity_with_kernels_out_of_order() -> None:
    """A profile whose kernel rows are not in order of start (built elsewhere than the reader): the sort."""
    p = read_kineto(DEEPSPEECH)
    device = primary_device(p)
    before = utilization(p, 0, device)
    k = p.tables["kernels"]
    flip = np.arange(k["start_ns"].size)[::-1]
    p.tables["kernels"] = {c: v[flip] for c, v in k.items()}
    got = gpu_activity(p, 0, device)
    assert [c.tolist() for c in got] == _by_sort(p, 0, device)
    after = utilization(p, 0, device)
    assert [(s.kernel_ns, s.memcpy_ns, s.memset_ns, s.idle_ns) for s in after.steps] == \
        [(s.kernel_ns, s.memcpy_ns, s.memset_ns, s.idle_ns) for s in before.steps]


@pytest.mark.parametrize("block", [1, 7, 1 << 18])
def test_launch_times_a_block_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch's runtime call start, looked up a few launches at a time: the whole column's answer."""
    from dnnprof.analysis import utilization as mod

    p = read_kineto(DEEPSPEECH)
    rt_start, lr = p.tables["runtime"]["start_ns"], p.tables["kernels"]["launch_row"]
    monkeypatch.setattr(mod, "_LAUNCH_ROWS", block)
    want = np.where(lr >= 0, rt_start[np.clip(lr, 0, None)], -1)
    assert (lr >= 0).any() and mod._launch_times(rt_start, lr).tolist() == want.tolist()
    assert mod._launch_times(np.empty(0, np.int64), np.array([-1, 3])).tolist() == [-1, -1]


def _merge_by_positions(s: np.ndarray, e: np.ndarray) -> tuple[list[int], list[int]]:
    """The union as first written: a stable sort, then the positions of each new interval."""
    order = np.argsort(s, kind="stable")
    s, e = s[order].astype(np.int64), e[order].astype(np.int64)
    run_end = np.maximum.accumulate(e)
    idx = np.flatnonzero(np.concatenate([[True], s[1:] > run_end[:-1]]))
    return s[idx].tolist(), run_end[np.append(idx[1:] - 1, s.size - 1)].tolist()


@pytest.mark.parametrize("seed", range(30))
def test_merge_spending_the_ends_gives_the_union_and_writes_only_its_own(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(1, 50))
    s = rng.integers(0, 60, n)
    if seed % 2:
        s = np.sort(s)
    e = s + rng.integers(-3, 15, n)
    want = _merge_by_positions(s, e)
    assert [a.tolist() for a in merge(s, e)] == list(want)
    ends = e.astype(np.int64)  # the caller's own
    kept = ends.copy()
    got = merge(s, ends, spend_ends=True)
    assert [a.tolist() for a in got] == list(want)
    if seed % 2 == 0 and (np.diff(s) < 0).any():
        assert ends.tolist() == kept.tolist()  # out of order: the sorted copy is spent, not the caller's
    table = np.stack([s, e.astype(np.int64)])  # a view: never written
    before = table.copy()
    assert [a.tolist() for a in merge(s, table[1], spend_ends=True)] == list(want)
    assert np.array_equal(table, before)


@pytest.mark.parametrize("seed", range(30))
def test_union_a_block_at_a_time_is_the_length_of_merge(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    s = np.sort(rng.integers(0, 300, n)).astype(np.int64)  # ties, and intervals that span blocks
    e = s + rng.integers(0, 60, n)
    ms, me = merge(s.copy(), e.copy())
    for block in (1, 2, 5, 100):
        blocks = [(s[a:a + block].copy(), e[a:a + block].copy()) for a in range(0, n, block)]
        assert union_ns(blocks) == int((me - ms).sum())
    if n > 2 and s[0] < s[-1]:
        late = s.copy()
        late[-1] = s[0] - 1  # the last block starts before the one before it ended its starts
        assert union_ns([(late[a:a + 2].copy(), e[a:a + 2].copy()) for a in range(0, n, 2)]) is None


def test_busy_time_of_kernels_out_of_order_is_the_whole_union(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel table not in order of start (not from a reader) falls back to one merge of every row; in order,
    blocks of any size give the same busy time."""
    from dnnprof.analysis.rules import context as context_module
    from dnnprof.analysis.rules.context import Context
    from dnnprof.analysis.summary import analyse

    profile = read_kineto(GPT2)
    ctx = Context(analyse(profile), None)
    rows = list(ctx.kernels)
    want = ctx.busy_ns(rows)
    monkeypatch.setattr(context_module, "_BLOCK_ROWS", 7)
    assert ctx.busy_ns(rows) == want
    k = profile.tables["kernels"]
    idx = np.sort(np.concatenate([r.rows for r in rows]))
    if ctx.has_steps:
        idx = idx[k["step"][idx] >= 0]
    k["start_ns"][idx[[0, -1]]] = k["start_ns"][idx[[-1, 0]]]  # the first and last kernel swap starts
    answers: list[int | None] = []
    monkeypatch.setattr(context_module, "union_ns", lambda blocks: answers.append(union_ns(blocks)) or answers[-1])
    s, e = merge(k["start_ns"][idx].astype(np.int64), (k["start_ns"][idx] + k["dur_ns"][idx]).astype(np.int64))
    assert ctx.busy_ns(rows) == int((e - s).sum())
    assert answers == [None]  # the blocks were out of order: the whole union was taken
