"""The ranks of a multi-GPU profile side by side: which rank is slowest, and how much communication is exposed.

Per rank (its primary device, its steps — inferred when the trace has none):

* ``step_median_us`` — host-side step time;
* ``busy_pct`` — GPU busy share of the steps' GPU windows (as in the rank's own summary);
* ``compute_us_per_step`` — kernel time of everything but collectives (NCCL kernels, ``kernel_names.family``);
* ``nccl_us_per_step`` — collective kernel time (the union of their intervals);
* ``exposed_nccl_us_per_step`` — collective time no compute kernel of the same GPU overlaps: what communication
  costs the step.

The **straggler** is the rank the others wait for. A collective ends on every rank together, when the last rank
has joined it, so a rank that joins early spins inside its collective kernels until then: the rank with the
*shortest* collectives joined last. Its lateness, ``straggler_wait_us_per_step``, is the median over the other ranks
of (their collective time − its collective time) per step; it counts when it reaches ``STRAGGLER_MIN_WAIT_PCT`` of
the median step. The cause is its GPU when it also computes longer than the others
(``straggler_compute_excess_us_per_step`` > 0, a share of the wait), else its host (data loading, Python, a sync, an
unbalanced input). Without collectives, a rank whose compute per step exceeds the others' by
``STRAGGLER_MIN_SPREAD_PCT`` of the largest is reported instead (``straggler_basis``: ``collectives`` or ``compute``).
Recorded on two H100s (``tests/data/ddp_h100``): DDP training where rank 1 sleeps 15 ms on the host before its
backward pass; rank 0's all-reduce then takes 32.7 ms per step against rank 1's 0.25 ms, while their compute is
3.1 and 2.8 ms — the rank with the most compute is not the one the others wait for.

``step_median_spread_pct`` = (slowest − fastest) / fastest step median.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.analysis.intervals import covered_per_window, merge
from dnnprof.analysis.steps import with_steps
from dnnprof.analysis.utilization import collective_mask, utilization
from dnnprof.model.profile import Profile

#: The others wait for one rank inside their collectives for at least this share of the median step.
STRAGGLER_MIN_WAIT_PCT = 5.0
#: Without collectives: the ranks' compute per step differs by at least this share of the largest.
STRAGGLER_MIN_SPREAD_PCT = 10.0


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
    nccl = collective_mask(p, rows)
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
    return overview_of_rows([rank_row(profile, r) for r in ranks])


def overview_of_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`rank_overview` from every rank's :func:`rank_row` (in rank order), however they were computed: the
    reduce of an analysis spread over processes reads these rows only."""
    ranks = [r["rank"] for r in rows]
    timed = [r for r in rows if r["step_median_us"] is not None]
    out: dict[str, Any] = {"count": len(ranks), "per_rank": rows, "slowest_rank": None, "fastest_rank": None,
                           "step_median_spread_pct": None, "straggler_rank": None}
    if timed:
        slow = max(timed, key=lambda r: r["step_median_us"])
        fast = min(timed, key=lambda r: r["step_median_us"])
        out.update(slowest_rank=slow["rank"], fastest_rank=fast["rank"],
                   step_median_spread_pct=_round(100.0 * (slow["step_median_us"] - fast["step_median_us"])
                                                 / fast["step_median_us"], 2) if fast["step_median_us"] else None)
    out.update(straggler(rows))
    return out


def _median(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def straggler(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``straggler_rank`` (None when no rank stands out), ``straggler_basis``, ``straggler_wait_us_per_step`` and
    ``straggler_compute_excess_us_per_step`` from the rows of :func:`rank_row` (see the module docstring)."""
    out: dict[str, Any] = {"straggler_rank": None, "straggler_basis": None, "straggler_wait_us_per_step": None,
                           "straggler_compute_excess_us_per_step": None}
    steps = [r["step_median_us"] for r in rows if r.get("step_median_us")]
    step = _median(steps) if steps else None
    talking = [r for r in rows if r.get("nccl_us_per_step")]
    if len(talking) == len(rows) >= 2 and step:
        late = min(talking, key=lambda r: r["nccl_us_per_step"])
        others = [r for r in talking if r is not late]
        wait = _median([r["nccl_us_per_step"] - late["nccl_us_per_step"] for r in others])
        if 100.0 * wait / step >= STRAGGLER_MIN_WAIT_PCT:
            computes = [r["compute_us_per_step"] or 0.0 for r in others]
            out.update(straggler_rank=late["rank"], straggler_basis="collectives",
                       straggler_wait_us_per_step=_round(wait),
                       straggler_compute_excess_us_per_step=_round((late["compute_us_per_step"] or 0.0)
                                                                   - _median(computes)))
        return out  # otherwise the ranks join their collectives together: nobody waits for anybody
    computed = [r for r in rows if r.get("compute_us_per_step")]
    if len(computed) >= 2:
        slow = max(computed, key=lambda r: r["compute_us_per_step"])
        least = min(r["compute_us_per_step"] for r in computed)
        if 100.0 * (slow["compute_us_per_step"] - least) / slow["compute_us_per_step"] >= STRAGGLER_MIN_SPREAD_PCT:
            others = [r["compute_us_per_step"] for r in computed if r is not slow]
            out.update(straggler_rank=slow["rank"], straggler_basis="compute",
                       straggler_compute_excess_us_per_step=_round(slow["compute_us_per_step"] - _median(others)))
    return out
