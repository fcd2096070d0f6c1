"""Joining the attribution window onto the timing window: one canonical profile from two cheap captures.

The timing window records CUDA activity and user ranges, no ops (kernels, copies, runtime calls); the attribution
window, right after it, records CPU ops and module ranges as well (1.2–1.4x). The kernels of a training step
repeat almost exactly from step to step (same launches, same order, same grid and block), so every timed kernel
is matched to the kernel launched at the same place of a reference attribution step, and takes its launching op
(``op_row``). Within a step, launches are ordered by CUPTI correlation id (launch order on the host); sequences
that differ (an extra kernel, a different algorithm) are aligned by a longest common subsequence on (name, grid,
block) (``match_sequences``), so only launches that agree on all of those are matched. The fraction matched is recorded in the profile's meta.

The merged profile keeps the timing window's GPU rows, runtime calls, steps and its own few ops (the user ranges
it records: ``ProfilerStep#N``, the script's ``record_function`` ranges), and appends the attribution window's ops
(rebased to the same trace clock) with ``step = -1``: they describe the typical step; they were not timed. The
memory events of a full-detail window (allocations and frees) are appended the same way, linked to the appended ops.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import numpy as np

from dnnprof.model.profile import Profile

_ID_COLUMNS = ("name_id", "module_id", "stack_id", "input_dims_id")
#: Columns of ``ops`` that hold row numbers of ``ops``.
_OP_LINKS = ("parent_row", "fwd_row")
#: Below this share of matched launches a timed step is compared with the other attribution steps too.
GOOD_MATCH = 0.9


def _remap(src: Profile, dst: Profile) -> np.ndarray:
    """``lut[i]`` = id in ``dst.strings`` of ``src.strings[i]`` (the last slot maps -1 to -1)."""
    return np.array([dst.intern(s) for s in src.strings] + [-1], dtype=np.int32)


def _keys(p: Profile, table: str, rows: np.ndarray) -> list[tuple[Any, ...]]:
    t = p.tables[table]
    names = p.names(t["name_id"][rows]).tolist()
    if table == "kernels":
        cols = [t[c][rows].tolist() for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")]
        return list(zip(names, *cols, strict=True))
    if table == "memcpy":
        return list(zip(names, t["kind"][rows].tolist(), t["bytes"][rows].tolist(), strict=True))
    if table == "memset":
        return list(zip(names, t["bytes"][rows].tolist(), strict=True))
    return [(n,) for n in names]


def _step_rows(p: Profile, table: str, step: int) -> np.ndarray:
    t = p.tables[table]
    rows = np.flatnonzero(t["step"] == step)
    order = np.lexsort((t["start_ns"][rows], t["correlation"][rows]))
    return rows[order]


def match_sequences(a: list[Any], b: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(ia, ib)`` with ``a[ia[j]] == b[ib[j]]``, in order: the alignment of two launch sequences.

    Equal sequences match position by position. Otherwise the common prefix and suffix are matched as they are and
    the middle is aligned by a longest common subsequence: ``difflib`` for short middles, Myers' O((N+M)·D) diff
    for long ones that differ in few places (a training step's 23,000 runtime calls with a handful moved: difflib,
    quadratic on sequences of a few repeated names, took minutes there), and a greedy resynchronising walk when
    they differ in too many places for that.
    """
    if len(a) == len(b) and a == b:
        idx = np.arange(len(a), dtype=np.int64)
        return idx, idx
    code: dict[Any, int] = {}
    ca = np.fromiter((code.setdefault(x, len(code)) for x in a), dtype=np.int64, count=len(a))
    cb = np.fromiter((code.setdefault(x, len(code)) for x in b), dtype=np.int64, count=len(b))
    n = min(ca.size, cb.size)
    diff = np.flatnonzero(ca[:n] != cb[:n])
    pre = int(diff[0]) if diff.size else n
    tail = np.flatnonzero(ca[ca.size - n:][::-1] != cb[cb.size - n:][::-1])
    suf = min(int(tail[0]) if tail.size else n, n - pre)
    ma, mb = ca[pre:ca.size - suf], cb[pre:cb.size - suf]
    if ma.size * mb.size <= DIFFLIB_CELLS:
        ia, ib = _difflib(ma.tolist(), mb.tolist())
    else:
        found = _myers(ma, mb, MYERS_MAX_EDITS)
        ia, ib = found if found is not None else _greedy(ma, mb)
    head = np.arange(pre, dtype=np.int64)
    ia = np.concatenate([head, np.asarray(ia, dtype=np.int64) + pre, np.arange(ca.size - suf, ca.size)])
    ib = np.concatenate([head, np.asarray(ib, dtype=np.int64) + pre, np.arange(cb.size - suf, cb.size)])
    return ia.astype(np.int64), ib.astype(np.int64)


#: Middles up to this many cells (len(a) x len(b)) are aligned by difflib.
DIFFLIB_CELLS = 1_000_000
#: Myers' diff gives up beyond this many insertions + deletions (its work grows with the count).
MYERS_MAX_EDITS = 500
#: How far the greedy walk looks ahead for the next common launch.
GREEDY_LOOKAHEAD = 64


def _difflib(a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    ia: list[int] = []
    ib: list[int] = []
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        ia.extend(range(blk.a, blk.a + blk.size))
        ib.extend(range(blk.b, blk.b + blk.size))
    return ia, ib


def _slide(a: np.ndarray, b: np.ndarray, x: int, y: int) -> int:
    """How many elements ``a[x:]`` and ``b[y:]`` share from their start."""
    run, step = 0, 16
    while x + run < a.size and y + run < b.size:
        m = min(step, a.size - x - run, b.size - y - run)
        neq = np.flatnonzero(a[x + run:x + run + m] != b[y + run:y + run + m])
        if neq.size:
            return run + int(neq[0])
        run += m
        step *= 4
    return run


def _myers(a: np.ndarray, b: np.ndarray, max_edits: int) -> tuple[list[int], list[int]] | None:
    """A longest common subsequence of ``a`` and ``b`` by Myers' greedy diff; None past ``max_edits`` edits."""
    n, m = int(a.size), int(b.size)
    off = max_edits + 1
    v = [0] * (2 * off + 1)
    trace: list[list[int]] = []
    for d in range(max_edits + 1):
        trace.append(v[off - d - 1:off + d + 2])  # the reach of diagonals -d-1 .. d+1 before this round
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]
            else:
                x = v[off + k - 1] + 1
            y = x - k
            if x < n and y < m:
                x += _slide(a, b, x, y)
            v[off + k] = x
            if x >= n and x - k >= m:
                return _backtrack(trace, n, m, d)
    return None


def _backtrack(trace: list[list[int]], n: int, m: int, d_end: int) -> tuple[list[int], list[int]]:
    ia: list[int] = []
    ib: list[int] = []
    x, y = n, m
    for d in range(d_end, 0, -1):
        row = trace[d]  # row[j] is the reach of diagonal j - d - 1
        k = x - y

        def reach(kk: int, row: list[int] = row, d: int = d) -> int:
            return row[kk + d + 1]

        prev_k = k + 1 if (k == -d or (k != d and reach(k - 1) < reach(k + 1))) else k - 1
        prev_x = reach(prev_k)
        prev_y = prev_x - prev_k
        start_x = prev_x if prev_k == k + 1 else prev_x + 1  # after the insertion or deletion
        while x > start_x and y > start_x - k:  # the snake: matches
            x, y = x - 1, y - 1
            ia.append(x)
            ib.append(y)
        x, y = prev_x, prev_y
    while x > 0 and y > 0:  # d = 0: the leading snake
        x, y = x - 1, y - 1
        ia.append(x)
        ib.append(y)
    return ia[::-1], ib[::-1]


def _greedy(a: np.ndarray, b: np.ndarray) -> tuple[list[int], list[int]]:
    """Walk both sequences; at a mismatch skip to the nearest place (within the lookahead) where they agree."""
    al, bl = a.tolist(), b.tolist()
    ia: list[int] = []
    ib: list[int] = []
    i = j = 0
    while i < len(al) and j < len(bl):
        if al[i] == bl[j]:
            ia.append(i)
            ib.append(j)
            i, j = i + 1, j + 1
            continue
        for k in range(1, GREEDY_LOOKAHEAD + 1):
            if i + k < len(al) and al[i + k] == bl[j]:
                i += k
                break
            if j + k < len(bl) and al[i] == bl[j + k]:
                j += k
                break
        else:
            i, j = i + 1, j + 1
    return ia, ib


def _match_step(timing: Profile, attrib: Profile, t_step: int, a_step: int, table: str) -> tuple[np.ndarray, ...]:
    ra = _step_rows(timing, table, t_step)
    rb = _step_rows(attrib, table, a_step)
    ia, ib = match_sequences(_keys(timing, table, ra), _keys(attrib, table, rb))
    return ra, ra[ia], rb[ib]


def _append_ops(timing: Profile, attrib: Profile) -> Callable[[np.ndarray], np.ndarray]:
    """Append ``attrib``'s ops to ``timing``'s (kept ordered by start, every row link kept valid).

    Returns the map from an op row of ``attrib`` to its row in the merged table (-1 stays -1).
    """
    lut = _remap(attrib, timing)
    shift = _shift(timing, attrib)
    own = timing.tables["ops"]
    n_own = int(own["start_ns"].size)
    add = {c: v.copy() for c, v in attrib.tables["ops"].items()}
    for c in _ID_COLUMNS:
        add[c] = lut[np.where(add[c] < 0, len(lut) - 1, add[c])]
    add["start_ns"] += shift
    add["step"][:] = -1
    for c in _OP_LINKS:
        add[c] = np.where(add[c] >= 0, add[c] + n_own, -1).astype(add[c].dtype)
    merged = {c: np.concatenate([own[c], add[c]]) for c in own}
    order = np.argsort(merged["start_ns"], kind="stable")
    new_row = np.empty(order.size + 1, dtype=np.int32)
    new_row[order] = np.arange(order.size, dtype=np.int32)
    new_row[-1] = -1  # index -1 (no op) maps to -1

    def moved(rows: np.ndarray) -> np.ndarray:
        return new_row[np.where(rows >= 0, rows, -1)]

    merged = {c: v[order] for c, v in merged.items()}
    for c in _OP_LINKS:
        merged[c] = moved(merged[c]).astype(merged[c].dtype)
    timing.tables["ops"] = merged
    for table in ("kernels", "memcpy", "memset", "runtime", "memory_events", "collectives"):
        t = timing.tables[table]
        t["op_row"] = moved(t["op_row"]).astype(t["op_row"].dtype)
    return lambda rows: moved(np.where(rows >= 0, rows + n_own, -1))


def _shift(timing: Profile, attrib: Profile) -> int:
    """What to add to a time of ``attrib`` to put it on ``timing``'s trace clock, ns."""
    return int(attrib.meta.get("base_time_ns", 0)) - int(timing.meta.get("base_time_ns", 0))


def _append_memory_events(timing: Profile, attrib: Profile,
                          op_of: Callable[[np.ndarray], np.ndarray] | None) -> int:
    """Append ``attrib``'s memory events to ``timing``'s, on its clock, ``step = -1``, ``op_row`` through ``op_of``
    (-1 when the ops were not appended); returns how many."""
    add = {c: v.copy() for c, v in attrib.tables["memory_events"].items()}
    n = int(add["ts_ns"].size)
    if n == 0:
        return 0
    add["ts_ns"] += _shift(timing, attrib)
    add["step"][:] = -1
    add["op_row"] = (op_of(add["op_row"]) if op_of is not None else np.full(n, -1)).astype(add["op_row"].dtype)
    own = timing.tables["memory_events"]
    merged = {c: np.concatenate([own[c], add[c]]) for c in own}
    order = np.argsort(merged["ts_ns"], kind="stable")
    timing.tables["memory_events"] = {c: v[order] for c, v in merged.items()}
    return n


def _append_collectives(timing: Profile, attrib: Profile, op_of: Callable[[np.ndarray], np.ndarray],
                        timed: np.ndarray, ref: np.ndarray) -> None:
    """Give the timed kernels the collective descriptions of the attribution kernels they were matched to
    (``timed[i]`` ↔ ``ref[i]``; a timing window may record its NCCL kernels without them), and append the
    attribution's collective ops (on their appended rows)."""
    src = attrib.tables["collectives"]
    own = timing.tables["collectives"]
    lut = _remap(attrib, timing)
    at = {r: i for i, r in enumerate(src["kernel_row"].tolist()) if r >= 0}
    described = set(own["kernel_row"].tolist())
    pairs = [(t, at[r]) for t, r in zip(timed.tolist(), ref.tolist(), strict=True) if r in at and t not in described]
    take = np.array([i for _, i in pairs] + np.flatnonzero(src["op_row"] >= 0).tolist(), dtype=np.int64)
    if not take.size:
        return
    add = {c: v[take].copy() for c, v in src.items()}
    for c in ("name_id", "pg_name_id", "pg_desc_id", "pg_ranks_id", "dtype_id"):
        add[c] = lut[np.where(add[c] < 0, len(lut) - 1, add[c])]
    add["kernel_row"][:len(pairs)] = [t for t, _ in pairs]
    add["op_row"] = op_of(add["op_row"]).astype(add["op_row"].dtype)
    timing.tables["collectives"] = {c: np.concatenate([own[c], add[c].astype(own[c].dtype)]) for c in own}


def join_attribution(timing: Profile, attrib: Profile) -> dict[str, Any]:
    """Give ``timing`` the ops of ``attrib`` and point its kernels/copies/runtime calls at them, in place.

    Both profiles must have steps. Returns the join statistics (also stored in ``timing.meta["attribution"]``).
    """
    t_steps = timing.tables["steps"]["number"].tolist()
    a_steps = attrib.tables["steps"]["number"].tolist()
    stats: dict[str, Any] = {"method": "launch-order join (correlation order within a step; name, grid, block)",
                             "timed_steps": t_steps, "attribution_steps": a_steps}
    if not t_steps or not a_steps:
        stats.update(matched_kernels_pct=0.0, note="no steps to join")
        stats["memory_events"] = _append_memory_events(timing, attrib, None)
        timing.meta["attribution"] = stats
        return stats

    # 1. The attribution ops, on the timing profile's strings and clock, after the timing window's own ops, and
    # the window's memory events.
    op_of = _append_ops(timing, attrib)
    stats["memory_events"] = _append_memory_events(timing, attrib, op_of)

    # 2. The reference attribution step: the one that best matches the last timed step (later wins ties).
    def score(a_step: int) -> int:
        return int(_match_step(timing, attrib, t_steps[-1], a_step, "kernels")[1].size)

    reference = max(reversed(a_steps), key=score)
    lut = _remap(attrib, timing)
    per_step: list[dict[str, Any]] = []
    timed_kernels: list[np.ndarray] = []
    ref_kernels: list[np.ndarray] = []
    totals = {"kernels": [0, 0], "memcpy": [0, 0], "memset": [0, 0], "runtime": [0, 0]}
    for s in t_steps:
        ref = reference
        matched = _match_step(timing, attrib, s, ref, "kernels")
        n = max(matched[0].size, 1)
        if matched[1].size / n < GOOD_MATCH and len(a_steps) > 1:
            ref = max(reversed(a_steps), key=lambda a, s=s: _match_step(timing, attrib, s, a, "kernels")[1].size)
        row: dict[str, Any] = {"step": s, "reference_step": ref}
        for table in ("kernels", "memcpy", "memset", "runtime"):
            rows, ta, tb = _match_step(timing, attrib, s, ref, table)
            timing.tables[table]["op_row"][ta] = op_of(attrib.tables[table]["op_row"][tb])
            if "module_id" in timing.tables[table]:  # a graph-replayed kernel's own layer (ingest.graph_replays)
                own = attrib.tables[table]["module_id"][tb]
                has = own >= 0
                timing.tables[table]["module_id"][ta[has]] = lut[own[has]]
            totals[table][0] += int(ta.size)
            totals[table][1] += int(rows.size)
            if table == "kernels":
                timed_kernels.append(ta)
                ref_kernels.append(tb)
                row["kernels"] = int(rows.size)
                row["matched_pct"] = round(100.0 * ta.size / rows.size, 2) if rows.size else None
        per_step.append(row)
    _append_collectives(timing, attrib, op_of, np.concatenate(timed_kernels), np.concatenate(ref_kernels))
    for table, (m, n) in totals.items():
        stats[f"matched_{table}_pct"] = round(100.0 * m / n, 2) if n else None
        stats[f"{table}_in_timed_steps"] = n
    stats["reference_step"] = reference
    stats["per_step"] = per_step
    timing.meta["attribution"] = stats
    return stats
