"""Host-side operator time: total and self time per op name (torch.profiler ``key_averages`` style).

Self time = the op's duration minus the time of ops nested directly inside it on the same thread. Only
``cpu_op`` rows count (annotations and Python frames are containers, not work). Times are over the steps when the
profile has steps, else over the whole trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    sel = (ops["rank"] == rank) & (ops["category"] == OP_CATEGORIES.index("cpu_op"))
    if (profile.tables["steps"]["rank"] == rank).any():
        sel &= ops["step"] >= 0
    idx = np.flatnonzero(sel)
    del sel
    if idx.size == 0:
        return []
    parent = ops["parent_row"]
    # Each op's children's time, a block of rows at a time (a big trace's temporaries are a block's, not the
    # table's); summed in row order in float64, as np.bincount would.
    child = np.zeros(n, dtype=np.float64)
    for a in range(0, n, _BLOCK_ROWS):
        p = parent[a:a + _BLOCK_ROWS]
        keep = p >= 0
        np.add.at(child, p[keep], dur[a:a + _BLOCK_ROWS][keep].astype(np.float64))
    own = dur[idx]
    self_time = np.maximum(own - child[idx].astype(np.int64), 0)  # only the selected ops' children's time
    del child
    uniq, inv = np.unique(ops["name_id"][idx], return_inverse=True)
    del idx
    calls = np.bincount(inv)
    tot = np.bincount(inv, weights=own)
    slf = np.bincount(inv, weights=self_time)
    grand = float(slf.sum()) or 1.0
    rows = [HostOpRow(profile.strings[int(u)], int(c), int(t), int(s), 100.0 * s / grand)
            for u, c, t, s in zip(uniq.tolist(), calls.tolist(), tot.tolist(), slf.tolist(), strict=True)]
    rows.sort(key=lambda r: -r.self_ns)
    return rows
