"""Rules about multi-GPU runs: ``communication-exposed``, ``rank-straggler``."""

from __future__ import annotations

import statistics

from dnnprof.analysis.ranks import kernel_times
from dnnprof.analysis.rules.base import Finding, rule
from dnnprof.analysis.rules.context import Context

#: ``communication-exposed``: collective kernel time no compute overlaps, as a share of step time, at least this.
EXPOSED_MIN_PCT = 5.0


@rule("communication-exposed", group="distributed")
def communication_exposed(ctx: Context) -> Finding | None:
    """Collectives (NCCL all-reduce, all-gather, reduce-scatter …) run while no compute kernel does, so the step
    waits for the network.

    Pattern: on the rank's GPU, the union of collective kernels minus the part any non-collective kernel overlaps
    is ≥ ``EXPOSED_MIN_PCT`` of the step time (``analysis/ranks.py``). Works on one rank's trace of a
    data-parallel run as well as on a folder of ranks.
    Algorithm: exposed time per step / GPU step window. In a profile of several ranks, the part this rank spends
    waiting for the late rank (its collective time − the late rank's) is taken off first: that part is
    ``rank-straggler``'s, and overlap would not remove it. On one rank's trace the two cannot be told apart.
    Fix: let DDP overlap gradient all-reduce with backward (no host syncs between backward and step, ``no_sync()``
    around accumulation micro-steps, ``bucket_cap_mb`` so the first buckets start early,
    ``gradient_as_bucket_view=True``); FSDP: ``forward_prefetch``/``backward_prefetch``; larger per-GPU batches
    amortise the same communication; check the interconnect (NVLink vs PCIe, ``NCCL_DEBUG=INFO``).
    """
    if not ctx.window_ns or not any(r.family == "nccl" for r in ctx.kernels):
        return None
    row = kernel_times(ctx.profile, ctx.rank, ctx.util.device)  # the analysis' own steps and device: no re-analysis
    exposed_us, nccl_us = row["exposed_nccl_us_per_step"] or 0.0, row["nccl_us_per_step"] or 0.0
    step_us = ctx.window_ns / ctx.n_windows / 1000.0
    waiting_us, late = _waiting_for_late_rank(ctx, nccl_us, exposed_us)
    transfer_us = exposed_us - waiting_us
    share = 100.0 * transfer_us / step_us if step_us else 0.0
    if not nccl_us or share < EXPOSED_MIN_PCT:
        return None  # nothing exposed, or all of it is waiting for a late rank: rank-straggler says so
    waits = (f"; {waiting_us / 1000:.2f} ms of it waiting for rank {late} (rank-straggler), the rest transfer"
             if waiting_us else "")
    return Finding(
        id="communication-exposed",
        title=f"Communication exposed: {share:.0f}% of the step waits on collectives",
        summary=(f"collective kernels run {nccl_us / 1000:.2f} ms per step, {exposed_us / 1000:.2f} ms of it with no "
                 f"compute kernel alongside (rank {ctx.rank}{_gpu_clause(ctx.util.device)}){waits}"),
        recommendation=("Overlap communication with compute: keep backward free of host syncs so DDP's bucketed "
                        "all-reduce runs under it, wrap gradient-accumulation micro-steps in no_sync(), tune "
                        "bucket_cap_mb, use gradient_as_bucket_view=True (FSDP: forward/backward prefetch); a larger "
                        "per-GPU batch amortises the same traffic. If one rank is slower (rank-straggler), the "
                        "others wait inside their collectives: fix that rank first."),
        est_gain_pct=share,
        how_estimated=("Exposed collective time per step, less what this rank spends waiting for a late rank (in a "
                       "profile of several ranks: its collective time − the late rank's), / step time: what full "
                       "overlap with compute would save."),
        evidence={"rank": ctx.rank, "device": ctx.util.device, "nccl_us_per_step": nccl_us,
                  "exposed_nccl_us_per_step": exposed_us, "waiting_us_per_step": round(waiting_us, 3),
                  "waiting_for_rank": late if waiting_us else None, "compute_us_per_step": row["compute_us_per_step"],
                  "step_us": step_us, "exposed_pct": round(share, 2)},
    )


def _waiting_for_late_rank(ctx: Context, nccl_us: float, exposed_us: float) -> tuple[float, int | None]:
    """(µs per step this rank's exposed collectives spend waiting for the late rank, that rank): in a profile of
    several ranks whose straggler was found by its collectives, this rank's collective time − the late rank's, at
    most the exposed time; (0, None) otherwise (one rank: transfer and waiting cannot be told apart)."""
    ranks = ctx.doc.get("ranks") or {}
    late = ranks.get("straggler_rank")
    if ranks.get("straggler_basis") != "collectives" or late is None or late == ctx.rank:
        return 0.0, None
    theirs = next((r.get("nccl_us_per_step") for r in ranks.get("per_rank", []) if r["rank"] == late), None)
    if theirs is None:
        return 0.0, None
    return min(max(nccl_us - theirs, 0.0), exposed_us), late


@rule("rank-straggler", group="distributed")
def rank_straggler(ctx: Context) -> Finding | None:
    """One rank joins the collectives last, and every collective makes the others wait for it.

    Pattern: a profile of several ranks (``summary.ranks``) in which the others spend at least
    ``STRAGGLER_MIN_WAIT_PCT`` of the step waiting for one rank inside their collectives: the rank with the shortest
    collectives joined last (``analysis/ranks.py``). Without collectives: compute per step differing by
    ``STRAGGLER_MIN_SPREAD_PCT`` of the largest.
    Algorithm: gain = the others' wait per step / the median step (what the job gains when that rank is on time);
    without collectives, (its compute − the median rank's) / its step. The cause is its GPU when it computes longer
    than the others, else its host.
    Fix: balance the work (equal shards; bucket variable-length samples so every rank gets similar lengths); for a
    host-side delay, look at that rank's data loading, logging, syncs and CPU/NUMA binding; for a GPU one, its
    clocks, temperature, power cap, PCIe link and other processes.
    """
    ranks = ctx.doc.get("ranks") or {}
    late = ranks.get("straggler_rank")
    rows = {r["rank"]: r for r in ranks.get("per_rank", [])}
    if late is None or late not in rows:
        return None
    me = rows[late]
    others = [r for k, r in rows.items() if k != late]
    excess = ranks.get("straggler_compute_excess_us_per_step") or 0.0
    computes = {str(k): r["compute_us_per_step"] for k, r in rows.items()}
    steps = [r["step_median_us"] for r in rows.values() if (r.get("step_median_us") or 0) > 0]
    step = statistics.median(steps) if steps else None
    if ranks.get("straggler_basis") == "collectives":
        wait = ranks["straggler_wait_us_per_step"]
        gpu = excess > 0.5 * wait
        cause = (f"it computes {excess / 1000:.2f} ms more per step than the others" if gpu else
                 f"its GPU computes no longer than the others' ({(me['compute_us_per_step'] or 0) / 1000:.2f} ms "
                 f"against a median {statistics.median(r['compute_us_per_step'] or 0 for r in others) / 1000:.2f}"
                 " ms per step): the delay is on its host")
        title = (f"Straggler: the other ranks wait {wait / 1000:.1f} ms per step for rank {late} in their "
                 "collectives")
        summary = (f"rank {late}'s collectives take {me['nccl_us_per_step'] / 1000:.2f} ms per step, the others' "
                   f"{wait / 1000 + me['nccl_us_per_step'] / 1000:.2f} ms (median): rank {late} joins them last; {cause}")
        gain = 100.0 * wait / step if step else None
        how = ("The others' wait for it per step (median of their collective time − its collective time) / the median "
               "step: what the job gains when it joins on time; an upper bound.")
        rec = ("Find what makes that rank late. " + (
            "Its GPU does more work: balance shards and sequence lengths across ranks, and check its clocks, "
            "temperature, power cap, PCIe link and other processes." if gpu else
            "Its host is late: profile that rank (DNNPROF_PROFILE_RANK=N with dnnprof run) for data loading, "
            "logging, .item()/sync calls and Python work the others skip (rank-0-only code runs on one rank), and "
            "check its CPU/NUMA binding and DataLoader workers."))
    else:
        vals = sorted(r["compute_us_per_step"] for r in rows.values() if r.get("compute_us_per_step"))
        spread = 100.0 * (vals[-1] - vals[0]) / vals[-1]
        title = f"Straggler: rank {late} computes {spread:.0f}% longer per step than the fastest rank"
        summary = (f"compute per step ranges {vals[0] / 1000:.2f}–{vals[-1] / 1000:.2f} ms over {len(vals)} ranks; "
                   f"the others will wait for rank {late} at every synchronisation")
        own = me.get("step_median_us") if (me.get("step_median_us") or 0) > 0 else me["compute_us_per_step"]
        gain = 100.0 * excess / own if own else None
        how = ("(straggler's compute − median rank's compute) per step / the straggler's step time: every rank "
               "computing like the median one.")
        rec = ("Balance the work across ranks (equal shards; bucket variable-length samples so each rank gets similar "
               "lengths) and check the slow rank's GPU (clocks, temperature, power cap, PCIe link, other processes), "
               "data loading and CPU/NUMA binding.")
    return Finding(
        id="rank-straggler", title=title, summary=summary, recommendation=rec, est_gain_pct=gain, how_estimated=how,
        evidence={"straggler_rank": late, "basis": ranks.get("straggler_basis"),
                  "wait_us_per_step": ranks.get("straggler_wait_us_per_step"),
                  "compute_excess_us_per_step": ranks.get("straggler_compute_excess_us_per_step"),
                  "per_rank_compute_us": computes,
                  "per_rank_nccl_us": {str(k): r["nccl_us_per_step"] for k, r in rows.items()}},
    )


def _gpu_clause(device: int | None) -> str:
    """``, GPU 3``; nothing when the trace does not say which GPU."""
    return f", GPU {device}" if isinstance(device, int) and device >= 0 else ""


#: ``rank-late-phase``: the others wait for the late rank at least this share of the step (median over steps).
LATE_PHASE_MIN_WAIT_PCT = 5.0


@rule("rank-late-phase", group="distributed")
def rank_late_phase(ctx: Context) -> Finding | None:
    """One rank reaches the step's collectives last, and one phase of its step (data loading, forward, backward,
    optimizer, host) is why.

    Pattern: in a profile of several ranks (``summary.critical_path``, ``analysis/critical_path.py``), the same rank
    arrives last at the collective with the largest spread of arrivals in most steps, and the others wait for it at
    least ``LATE_PHASE_MIN_WAIT_PCT`` of the step.
    Algorithm: per step, each rank's time from the previous synchronisation point to its arrival is split into
    phases from its ops; the phase in which the late rank spent most more than the median other rank is the
    verdict, with the module range it spent most more in. Gain = the others' median wait / the median step.
    Fix: data loading — more DataLoader workers, pinned memory, prefetching, equal-cost shards; forward/backward —
    balance the work (equal batches and sequence lengths per rank), look for rank-specific code in that layer, and
    check that rank's GPU (clocks, power cap, other processes); optimizer/host — code that runs on one rank only
    (logging, checkpointing, metrics with .item()), CPU/NUMA binding.
    """
    path = ctx.doc.get("critical_path") or {}
    v = path.get("verdict")
    if not v or 2 * v["steps"] < v["of_steps"]:
        return None
    steps = [r["step_median_us"] for r in (ctx.doc.get("ranks") or {}).get("per_rank", [])
             if (r.get("step_median_us") or 0) > 0]
    step = statistics.median(steps) if steps else None
    share = 100.0 * v["wait_us_per_step"] / step if step else None
    if share is None or share < LATE_PHASE_MIN_WAIT_PCT:
        return None
    where = f"{v['phase'].replace('_', ' ')}" + (f" (layer {v['layer']})" if v.get("layer") else "")
    fixes = {
        "data_loading": "Its data loading is slow: more DataLoader workers, pin_memory, prefetch_factor, and shards "
                        "of equal cost per rank.",
        "forward": "Its forward pass takes longer: balance batch sizes and sequence lengths across ranks, look for "
                   "rank-specific work in that layer, check the rank's device.",
        "backward": "Its backward pass takes longer: balance the work across ranks, look for hooks or rank-specific "
                    "work in that layer's backward, check the rank's device (clocks, power cap, other processes).",
        "optimizer": "Its optimizer step takes longer: look for rank-specific work around optimizer.step().",
        "host": "Its host does something the others do not (logging, checkpointing, .item() syncs, rank-0-only "
                "code) or runs slower (CPU/NUMA binding).",
    }
    also = ""
    excess = v.get("phase_excess_us_per_step") or {}
    second = max((k for k in excess if k != v["phase"]), key=lambda k: excess[k], default=None)
    if second and excess[second] >= 0.25 * max(v["excess_us_per_step"], 1e-9) and excess[second] > 0:
        also = f", and {excess[second] / 1000:.2f} ms more in {second.replace('_', ' ')}"
    return Finding(
        id="rank-late-phase",
        title=f"Rank {v['rank']} makes the others wait {v['wait_us_per_step'] / 1000:.1f} ms per step: its {where}",
        summary=(f"in {v['steps']} of {v['of_steps']} steps rank {v['rank']} reaches the collectives last; it spends "
                 f"{v['excess_us_per_step'] / 1000:.2f} ms more in {where}{also} than the median rank before arriving"),
        recommendation=fixes.get(v["phase"], fixes["host"]),
        est_gain_pct=min(share, 100.0),
        how_estimated="The others' median wait for that rank per step / the median step time: what they gain when "
                      "it arrives on time.",
        evidence={"rank": v["rank"], "phase": v["phase"], "layer": v.get("layer"), "steps": v["steps"],
                  "of_steps": v["of_steps"], "wait_us_per_step": v["wait_us_per_step"],
                  "excess_us_per_step": v["excess_us_per_step"],
                  "phase_excess_us_per_step": v.get("phase_excess_us_per_step"), "step_us": step},
    )
