"""The ranks of a multi-GPU profile side by side: which rank is slowest, and how much communication is exposed.

Per rank (its primary device, its steps — inferred when the trace has none):

* ``step_median_us`` — host-side step time;
* ``busy_pct`` — GPU busy share of the steps' GPU windows (as in the rank's own summary);
* ``compute_us_per_step`` — kernel time of everything but collectives (NCCL kernels, ``kernel_names.family``);
* ``nccl_us_per_step`` — collective kernel time (the union of their intervals);
* ``exposed_nccl_us_per_step`` — collective time no compute kernel of the same GPU overlaps: what communication
  costs the step. In data-parallel training a fast rank waits inside its all-reduce for the slowest one, so its
  collectives grow by the difference: the **straggler** is the rank with the most compute per step, not the one
  with the longest collectives.

``step_median_spread_pct`` = (slowest − fastest) / fastest step median.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.analysis.intervals import covered_per_window, merge
from dnnprof.analysis.kernel_names import family
from dnnprof.analysis.steps import with_steps
from dnnprof.analysis.utilization import utilization
from dnnprof.model.profile import Profile


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def kernel_times(p: Profile, rank: int, device: int) -> dict[str, Any]:
    """Compute, collective and exposed collective time per step of one rank's GPU, from a profile whose steps are
    already known (``with_steps``); also the rank's host step durations (ns) as ``host_ns``."""
    steps = p.tables["steps"]
    host = steps["dur_ns"][steps["rank"] == rank].astype(np.float64)
    n = max(host.size, 1)
    k = p.tables["kernels"]
    rows = np.flatnonzero((k["rank"] == rank) & (k["device"] == device) & ((k["step"] >= 0) if host.size else True))
    names = p.names(k["name_id"][rows]).tolist()
    fams: dict[str, str] = {}
    nccl = np.fromiter((fams.setdefault(x, family(x)) == "nccl" for x in names), dtype=bool, count=len(names))
    s = k["start_ns"][rows].astype(np.int64)
    e = s + k["dur_ns"][rows].astype(np.int64)
    ns, ne = merge(s[nccl], e[nccl])
    cs, ce = merge(s[~nccl], e[~nccl])
    nccl_ns = int((ne - ns).sum())
    overlapped = int(covered_per_window(cs, ce, ns, ne).sum()) if ns.size else 0
    return {"host_ns": host, "compute_us_per_step": _round(int((ce - cs).sum()) / 1000 / n),
            "nccl_us_per_step": _round(nccl_ns / 1000 / n),
            "exposed_nccl_us_per_step": _round((nccl_ns - overlapped) / 1000 / n)}


def rank_row(profile: Profile, rank: int) -> dict[str, Any]:
    """One rank's row of :func:`rank_overview`."""
    p = with_steps(profile, rank)
    u = utilization(p, rank=rank)
    times = kernel_times(p, rank, u.device)
    host = times.pop("host_ns")
    return {
        "rank": rank, "device": u.device, "steps": int(host.size),
        "step_median_us": _round(np.median(host) / 1000) if host.size else None,
        "busy_pct": _round(u.busy_pct, 2) if u.steps else None,
        **times,
    }


def rank_overview(profile: Profile) -> dict[str, Any] | None:
    """Every rank's row and who stands out (see the module docstring); None for a single-rank profile."""
    ranks = profile.ranks
    if len(ranks) < 2:
        return None
    rows = [rank_row(profile, r) for r in ranks]
    timed = [r for r in rows if r["step_median_us"] is not None]
    out: dict[str, Any] = {"count": len(ranks), "per_rank": rows, "slowest_rank": None, "fastest_rank": None,
                           "step_median_spread_pct": None, "straggler_rank": None}
    if timed:
        slow = max(timed, key=lambda r: r["step_median_us"])
        fast = min(timed, key=lambda r: r["step_median_us"])
        out.update(slowest_rank=slow["rank"], fastest_rank=fast["rank"],
                   step_median_spread_pct=_round(100.0 * (slow["step_median_us"] - fast["step_median_us"])
                                                 / fast["step_median_us"], 2) if fast["step_median_us"] else None)
    computed = [r for r in rows if r["compute_us_per_step"]]
    if computed:
        out["straggler_rank"] = max(computed, key=lambda r: r["compute_us_per_step"])["rank"]
    return out
