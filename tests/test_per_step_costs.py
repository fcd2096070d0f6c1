"""Work done once per step (idle gaps of a step) or once per optimizer call (the closure cut) looks only at the
rows that can meet that step or call: the same answers as scanning every row, whatever their number."""

from __future__ import annotations

import numpy as np
import pytest

from dnnprof.analysis.attribution import _optimizer_after_closure
from dnnprof.analysis.intervals import clip, gaps, merge


def _gaps_by_scan(ms: np.ndarray, me: np.ndarray, lo: int, hi: int) -> tuple[list[int], list[int]]:
    s, e = clip(ms, me, lo, hi)
    gs, ge = np.concatenate([[lo], e]), np.concatenate([s, [hi]])
    keep = ge > gs
    return gs[keep].tolist(), ge[keep].tolist()


@pytest.mark.parametrize("seed", range(30))
def test_gaps_of_a_window_match_a_scan_of_every_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    s = rng.integers(0, 1000, n)
    ms, me = merge(s, s + rng.integers(0, 40, n))
    for _ in range(40):
        lo = int(rng.integers(-50, 1050))
        hi = lo + int(rng.integers(0, 300))
        got = gaps(ms, me, lo, hi)
        assert (got[0].tolist(), got[1].tolist()) == _gaps_by_scan(ms, me, lo, hi)


def _cuts_by_scan(ops: dict[str, np.ndarray], parent: np.ndarray, own: np.ndarray,
                  backward_own: np.ndarray) -> tuple[list[bool], list[bool]]:
    """The closure cut as first written: every backward op tested against every optimizer range."""
    n = own.size
    root = np.full(n, -1)
    for i in range(n):  # nearest optimizer range around (or at) each op
        j = i
        while j >= 0 and not own[j]:
            j = parent[j]
        root[i] = j
    start, end, rank = ops["start_ns"], ops["start_ns"] + ops["dur_ns"], ops["rank"]
    cut = {}
    for r in sorted(set(root[root >= 0].tolist())):
        hit = [int(end[b]) for b in np.flatnonzero(backward_own)
               if start[r] <= start[b] < end[r] and rank[b] == rank[r]]
        cut[r] = max([int(start[r]), *hit])
    inside = [bool(root[i] >= 0 and start[i] >= cut[root[i]]) for i in range(n)]
    closure = [bool(i in cut and cut[i] > start[i]) for i in range(n)]
    return inside, closure


@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("block", [3, 1 << 20])
@pytest.mark.parametrize("seed", range(30))
def test_the_closure_cut_matches_a_scan_of_every_backward_op(seed: int, block: int, in_order: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the backward ops are looked at a few rows at a time or all at once, and whether the rows are in
    order of start or not."""
    from dnnprof.analysis import attribution

    monkeypatch.setattr(attribution, "_INHERIT_ROWS", block)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 80))
    span = [60, 2000][seed % 2]  # small spans: backward ops that start just as a range ends
    start = rng.integers(0, span, n)
    start = np.sort(start) if in_order else start
    dur = rng.integers(0, span // 5, n)
    parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)])
    own = rng.random(n) < 0.2
    backward_own = rng.random(n) < 0.3
    ops = {"start_ns": start, "dur_ns": dur, "rank": rng.integers(0, 3, n)}
    inside, closure = _optimizer_after_closure(ops, parent, own, backward_own)
    assert (inside.tolist(), closure.tolist()) == _cuts_by_scan(ops, parent, own, backward_own)
