"""``fwdbwd`` flow points, kept as columns while a trace is read, and paired at the end into the forward op of
every backward op.

torch.profiler links each autograd node to the forward op that created it with a flow: a start point ('s') inside
the forward op and an end point ('f') inside the backward one, both carrying the flow's id. A trace of a long
training run holds millions of them, so they are kept as a few numpy columns per chunk of events, never as Python
objects (a tuple per point costs about 150 bytes; the columns 25).

The pairing is that of a dict per phase filled in file order: for each id the last usable start and the last
usable end; a point whose time is NaN or beyond int64 nanoseconds is unusable and ignored. Pairs are applied in
the file order of their end points, so when two flows end in the same backward op the later one decides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Timestamps are clipped to ±2**62 ns (146 years) before conversion (a float beyond int64 would cast to garbage);
#: a flow point beyond it is unusable.
NS_LIMIT = float(2**62)


class FlowPoints:
    """Usable ``fwdbwd`` flow points in file order: per chunk, (is start, id, thread, time in ns) columns."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(p[0].size for p in self._parts)

    def add(self, is_start: list[bool], ids: list[Any], tids: np.ndarray, ts_us: list[float]) -> None:
        """One chunk's points, in file order: ``ids`` ints, strings or None; ``tids`` int64 thread ids (-1 where
        the thread names no number); times in microseconds."""
        if not is_start:
            return
        ns = np.array(ts_us, dtype=np.float64) * 1000.0
        usable = (ns >= -NS_LIMIT) & (ns <= NS_LIMIT)  # NaN fails both
        keep = None if usable.all() else np.flatnonzero(usable)
        ns_i = np.rint(ns).astype(np.int64) if keep is None else np.rint(ns[keep]).astype(np.int64)
        start = np.array(is_start, dtype=bool)
        key = _int_ids(ids)
        if keep is not None:
            start, tids, key = start[keep], tids[keep], key[keep]
        self._parts.append((start, key, tids, ns_i))

    def extend(self, later: FlowPoints) -> None:
        """Append the points of ``later``, which follow these in the file."""
        self._parts.extend(later._parts)

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(forward thread, forward time ns, backward thread, backward time ns) of every id with both a start and
        an end, in the file order of the end points; the points are forgotten."""
        parts, self._parts = self._parts, []
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty, empty
        # one column at a time, each chunk's part of it dropped once joined: the points are millions
        cols = [list(c) for c in zip(*parts, strict=True)]
        del parts
        start = _joined(cols[0])
        keys = cols[1]
        if any(k.dtype == object for k in keys):  # ids that are not all int64: numbered as a dict keys them
            codes: dict[Any, int] = {}
            key = np.fromiter((codes.setdefault(v, len(codes)) for k in keys for v in k.tolist()), dtype=np.int64,
                              count=start.size)
            keys.clear()
        else:
            key = _joined(keys)
        s_rows = np.flatnonzero(start)
        e_rows = np.flatnonzero(~start)
        del start
        s_key, s_last = _last_of_each(key[s_rows], s_rows)
        e_key, e_last = _last_of_each(key[e_rows], e_rows)
        del key, s_rows, e_rows
        tid = _joined(cols[2])
        ns = _joined(cols[3])
        del cols
        _, i_s, i_e = np.intersect1d(s_key, e_key, assume_unique=True, return_indices=True)
        fwd, bwd = s_last[i_s], e_last[i_e]
        by_end = np.argsort(bwd, kind="stable")
        fwd, bwd = fwd[by_end], bwd[by_end]
        return tid[fwd], ns[fwd], tid[bwd], ns[bwd]


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts joined end to end; the list is emptied, so that the parts are freed once joined."""
    out = np.concatenate(parts)
    parts.clear()
    return out


def _int_ids(ids: list[Any]) -> np.ndarray:
    """int64 ids when every id is an int64 (the usual case), else the ids themselves as an object column."""
    if all(v.__class__ is int for v in ids):
        try:
            return np.array(ids, dtype=np.int64)
        except OverflowError:
            pass
    out = np.empty(len(ids), dtype=object)
    out[:] = ids
    return out


def _last_of_each(key: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys ascending, the row of the last point of each)."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    last = np.concatenate((k[1:] != k[:-1], [True])) if k.size else np.empty(0, dtype=bool)
    return k[last], rows[order[last]]
