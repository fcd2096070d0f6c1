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
    # Each op's children's time, a block of rows at a time (a big trace's temporaries are a block's, not the
    # table's); summed in row order in float64, as np.bincount would.
    child = np.zeros(n, dtype=np.float64)
    for a in range(0, n, _BLOCK_ROWS):
        p = parent[a:a + _BLOCK_ROWS]
        keep = p >= 0
        np.add.at(child, p[keep], dur[a:a + _BLOCK_ROWS][keep].astype(np.float64))
        release_pages_of(parent, dur)  # a big trace's mapped columns: a block's pages at a time
    # Calls, total and self time per name id (+1: an op without a name, -1, counts at 0), a block of rows at a
    # time: float64 sums of integer nanoseconds are exact, whatever the blocks.
    ids = ops["name_id"]
    width = int(ids.max()) + 2
    calls = np.zeros(width, dtype=np.int64)
    tot = np.zeros(width, dtype=np.float64)
    slf = np.zeros(width, dtype=np.float64)
    for a in range(0, n, _BLOCK_ROWS):
        b = a + _BLOCK_ROWS
        sel = (ops["rank"][a:b] == rank) & (ops["category"][a:b] == cpu_op)
        if in_steps:
            sel &= ops["step"][a:b] >= 0
        r = np.flatnonzero(sel) + a
        k = ids[r].astype(np.int64) + 1
        own = dur[r]
        calls += np.bincount(k, minlength=width)
        tot += np.bincount(k, weights=own, minlength=width)
        slf += np.bincount(k, weights=np.maximum(own - child[r].astype(np.int64), 0), minlength=width)
        release_pages_of(ops["rank"], ops["category"], ops["step"], ids, dur)
    del child
    present = np.flatnonzero(calls)
    if present.size == 0:
        return []
    uniq, calls, tot, slf = present - 1, calls[present], tot[present], slf[present]
    grand = float(slf.sum()) or 1.0
    rows = [HostOpRow(profile.strings[int(u)], int(c), int(t), int(s), 100.0 * s / grand)
            for u, c, t, s in zip(uniq.tolist(), calls.tolist(), tot.tolist(), slf.tolist(), strict=True)]
    rows.sort(key=lambda r: -r.self_ns)
    return rows
