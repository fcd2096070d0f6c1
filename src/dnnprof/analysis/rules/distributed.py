"""Rules about multi-GPU runs: ``communication-exposed``, ``rank-straggler``."""

from __future__ import annotations

from dnnprof.analysis.ranks import kernel_times
from dnnprof.analysis.rules.base import Finding, rule
from dnnprof.analysis.rules.context import Context

#: ``communication-exposed``: collective kernel time no compute overlaps, as a share of step time, at least this.
EXPOSED_MIN_PCT = 5.0
#: ``rank-straggler``: the ranks' compute per step differs by at least this share of the largest.
STRAGGLER_MIN_SPREAD_PCT = 10.0


@rule("communication-exposed", group="distributed")
def communication_exposed(ctx: Context) -> Finding | None:
    """Collectives (NCCL all-reduce, all-gather, reduce-scatter …) run while no compute kernel does, so the step
    waits for the network.

    Pattern: on the rank's GPU, the union of collective kernels minus the part any non-collective kernel overlaps
    is ≥ ``EXPOSED_MIN_PCT`` of the step time (``analysis/ranks.py``). Works on one rank's trace of a
    data-parallel run as well as on a folder of ranks.
    Algorithm: exposed time per step / GPU step window. Part of it may be waiting for a slower rank
    (``rank-straggler``), not transfer time.
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
    share = 100.0 * exposed_us / step_us if step_us else 0.0
    if not nccl_us or share < EXPOSED_MIN_PCT:
        return None
    return Finding(
        id="communication-exposed",
        title=f"Communication exposed: {share:.0f}% of the step waits on collectives",
        summary=(f"collective kernels run {nccl_us / 1000:.2f} ms per step, {exposed_us / 1000:.2f} ms of it with no "
                 f"compute kernel alongside (rank {ctx.rank}, GPU {ctx.util.device})"),
        recommendation=("Overlap communication with compute: keep backward free of host syncs so DDP's bucketed "
                        "all-reduce runs under it, wrap gradient-accumulation micro-steps in no_sync(), tune "
                        "bucket_cap_mb, use gradient_as_bucket_view=True (FSDP: forward/backward prefetch); a larger "
                        "per-GPU batch amortises the same traffic. If one rank is slower (rank-straggler), the "
                        "others wait inside their collectives: fix that rank first."),
        est_gain_pct=share,
        how_estimated="Exposed collective time per step / step time: what full overlap with compute would save.",
        evidence={"rank": ctx.rank, "device": ctx.util.device, "nccl_us_per_step": nccl_us,
                  "exposed_nccl_us_per_step": exposed_us, "compute_us_per_step": row["compute_us_per_step"],
                  "step_us": step_us, "exposed_pct": round(share, 2)},
    )


@rule("rank-straggler", group="distributed")
def rank_straggler(ctx: Context) -> Finding | None:
    """One rank computes longer than the others, and every collective makes the others wait for it.

    Pattern: a profile of several ranks (``summary.ranks``) whose compute per step (kernels other than
    collectives) differs by ≥ ``STRAGGLER_MIN_SPREAD_PCT`` of the largest.
    Algorithm: gain = (the straggler's compute − the median rank's compute) per step / the straggler's step time:
    what the job gains when every rank computes like the median one.
    Fix: balance the work (equal shards; bucket variable-length samples so every rank gets similar lengths),
    check the straggler's GPU (clocks, temperature, power cap, PCIe link, other processes), its data loading and
    host (CPU binding, NUMA).
    """
    ranks = ctx.doc.get("ranks") or {}
    rows = [r for r in ranks.get("per_rank", []) if r.get("compute_us_per_step")]
    if len(rows) < 2:
        return None
    computes = sorted(r["compute_us_per_step"] for r in rows)
    slow = max(rows, key=lambda r: r["compute_us_per_step"])
    spread = 100.0 * (computes[-1] - computes[0]) / computes[-1]
    if spread < STRAGGLER_MIN_SPREAD_PCT:
        return None
    median = computes[len(computes) // 2] if len(computes) % 2 else 0.5 * (computes[len(computes) // 2 - 1]
                                                                            + computes[len(computes) // 2])
    step = slow.get("step_median_us") or slow["compute_us_per_step"]
    gain = 100.0 * (slow["compute_us_per_step"] - median) / step if step else None
    return Finding(
        id="rank-straggler",
        title=f"Straggler: rank {slow['rank']} computes {spread:.0f}% longer per step than the fastest rank",
        summary=(f"compute per step ranges {computes[0] / 1000:.2f}–{computes[-1] / 1000:.2f} ms over "
                 f"{len(rows)} ranks; the others wait for rank {slow['rank']} in their collectives"),
        recommendation=("Balance the work across ranks (equal shards; bucket variable-length samples so each rank "
                        "gets similar lengths) and check the slow rank's GPU (clocks, temperature, power cap, PCIe "
                        "link, other processes), data loading and CPU/NUMA binding."),
        est_gain_pct=gain,
        how_estimated=("(straggler's compute − median rank's compute) per step / the straggler's step time: every "
                       "rank computing like the median one."),
        evidence={"straggler_rank": slow["rank"], "spread_pct": round(spread, 2),
                  "per_rank_compute_us": {str(r["rank"]): r["compute_us_per_step"] for r in rows}},
    )
