"""Rules about the GPU waiting: ``gpu-idle``, ``dataloader-bound``, ``launch-bound``.

Idle time is measured inside the GPU-side step windows and split by cause (see ``rules.timeline``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.analysis.rules.timeline import CAUSES
from dnnprof.model.mapped_columns import gather, release_pages_of, rows_where
from dnnprof.model.schema import API_KINDS
from dnnprof.model.units import ns_brief_text

#: ``gpu-idle`` fires when the GPU is busy less than this share of the step windows (TensorBoard plugin: 50%,
#: nsys ``gpu_time_util``: 50%; we flag a little earlier because the cause breakdown makes it actionable).
GPU_IDLE_MAX_BUSY_PCT = 60.0
#: ``dataloader-bound`` fires when the GPU idles inside DataLoader ``__next__`` for this share of step time
#: (TensorBoard plugin rule: DataLoader time > 5% of the step).
DATALOADER_MIN_PCT = 5.0
#: ``launch-bound`` fires when host-launch idle that no blocking call explains reaches this share of step time...
LAUNCH_BOUND_MIN_PCT = 10.0
#: ... and at least this share of the kernels are short (shorter than ``SHORT_KERNEL_NS``).
LAUNCH_BOUND_MIN_SHORT_SHARE = 0.25
#: A kernel shorter than this finishes before the host can launch the next one (launch cost ~5-10 µs).
SHORT_KERNEL_NS = 10_000
#: Host-launch gaps longer than this are not launch overhead but host work between launches (data preparation,
#: Python logic, logging); they count for ``gpu-idle`` as ``host_work``, not for ``launch-bound``.
LAUNCH_GAP_MAX_NS = 1_000_000
#: When CUDA-graph replays launched at least this share of the kernel time, the step already runs as graphs: the
#: launch gaps left are outside them (host work between replays), and capturing graphs is no advice.
GRAPH_LAUNCHED_MIN_SHARE = 0.5
#: Gaps listed as evidence.
TOP_N = 5
#: Which rule explains each idle cause, for the gpu-idle evidence.
_EXPLAINED_BY = {"dataloader": "see dataloader-bound", "sync": "see host-sync and pageable-memcpy",
                 "refill": "the host catching up after a blocking call: see host-sync and pageable-memcpy",
                 "host_launch": "launch overhead between short kernels: see launch-bound",
                 "host_work": "the host was busy between launches (data preparation, Python logic, logging): "
                              "move that work off the critical path",
                 "other": "work was queued: waits on events, other streams or profiler overhead"}


def _host_op_at(ctx: Context, t_ns: int) -> str:
    """The innermost op running on the host at ``t_ns`` (the deepest of any thread's; the first in row order of
    equally deep ones), "" when none. A block of rows at a time: a big trace's ops are tens of millions."""
    ops = ctx.profile.tables["ops"]
    best, best_depth = -1, 0  # best_depth is read only once best >= 0
    for a in range(0, ops["start_ns"].size, _SCAN_ROWS):
        b = a + _SCAN_ROWS
        s = ops["start_ns"][a:b]
        sel = np.flatnonzero((ops["rank"][a:b] == ctx.rank) & (s <= t_ns) & (s + ops["dur_ns"][a:b] > t_ns))
        if sel.size:
            d = ops["depth"][a:b][sel]
            i = int(np.argmax(d))
            if best < 0 or int(d[i]) > best_depth:
                best, best_depth = a + int(sel[i]), int(d[i])
        release_pages_of(ops["start_ns"], ops["dur_ns"], ops["rank"], ops["depth"])  # mapped: a block's pages
    return ctx.op_name(best)


#: Ops :func:`_host_op_at` looks at at once.
_SCAN_ROWS = 1 << 20


def _host_hotspots(ctx: Context, n: int = 3) -> list[str] | None:
    """The Python lines that took the host's time (``dnnprof run`` samples them), or None when not sampled."""
    hs = ctx.doc.get("host_hotspots")
    if not isinstance(hs, dict) or not hs.get("top_user_lines"):
        return None
    out = []
    for r in hs["top_user_lines"][:n]:
        path = str(r.get("file", "")).replace("\\", "/").rsplit("/", 1)[-1]
        func = f" ({r['function']})" if r.get("function") else ""
        share = f" {r['pct']}%" if r.get("pct") is not None else ""
        out.append(f"{path}:{r.get('line', '?')}{func}{share}")
    return out


def _nvml(ctx: Context) -> dict[str, float] | None:
    """Mean NVML/GPM utilisation metrics over the timed steps, when the run sampled them."""
    metrics = (ctx.doc.get("samples") or {}).get("metrics") if isinstance(ctx.doc.get("samples"), dict) else None
    if not isinstance(metrics, dict):
        return None
    keep = ("gpu_util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct")
    out = {k: metrics[k]["mean"] for k in keep if isinstance(metrics.get(k), dict) and "mean" in metrics[k]}
    return out or None


def _next_kernel_op(ctx: Context, t_ns: int) -> str:
    """The op that launched the first kernel starting at or after ``t_ns`` ("" when unknown)."""
    k = ctx.profile.tables["kernels"]
    sel = np.flatnonzero((k["rank"] == ctx.rank) & (k["start_ns"] >= t_ns))
    if sel.size == 0:
        return ""
    op, _ = ctx.user_op(int(k["op_row"][sel[0]]))
    return op


def _gap_cause(tl: Any, g: int) -> str:
    """One gap's cause in gpu-idle's terms (host-launch gaps split into refill, launch overhead, host work)."""
    if tl.dataloader_ns[g] > 0:
        return "dataloader"
    cause = CAUSES[int(tl.cause[g])]
    if cause != "host_launch":
        return cause
    if tl.blamed_ns[g] > 0:
        return "refill"
    return "host_work" if tl.gap_end[g] - tl.gap_start[g] > LAUNCH_GAP_MAX_NS else "host_launch"


def _top_gaps(ctx: Context, mask: np.ndarray) -> list[dict[str, Any]]:
    """The longest gaps under ``mask``: length, cause, what the host was doing, and what ended the gap."""
    tl = ctx.timeline
    idx = np.flatnonzero(mask)
    length = (tl.gap_end - tl.gap_start)[idx]
    out = []
    for g in idx[np.argsort(-length, kind="stable")][:TOP_N].tolist():
        out.append({"gap_us": us(tl.gap_end[g] - tl.gap_start[g]), "cause": _gap_cause(tl, g),
                    "host_op": _host_op_at(ctx, int(tl.gap_start[g])) or None,
                    "next_kernel_op": _next_kernel_op(ctx, int(tl.gap_end[g])) or None})
    return out


@rule("gpu-idle", group="idle")
def gpu_idle(ctx: Context) -> Finding | None:
    """The GPU is idle for a large share of each step.

    Pattern: busy time (union of kernels, copies and memsets) below ``GPU_IDLE_MAX_BUSY_PCT`` of the GPU-side
    step windows.
    Algorithm: busy % from the utilisation accounting; the idle time is split by cause (data loading, blocking
    calls and the refill after them, launch overhead, longer host work between launches, other) so the finding
    says where it goes and which rule explains it.
    Fix: follow the specific finding for the largest cause; as a general lever, give the GPU more work per launch
    (larger batch, fused ops, CUDA graphs).
    """
    if not ctx.window_ns or not ctx.profile.has_gpu_activity:
        return None
    busy = ctx.util.busy_pct
    if busy >= GPU_IDLE_MAX_BUSY_PCT:
        return None
    tl = ctx.timeline
    idle = int((tl.gap_end - tl.gap_start).sum())
    short, long = tl.host_launch_split(LAUNCH_GAP_MAX_NS)
    causes = {c: tl.total(c) for c in CAUSES if c != "host_launch"}
    causes.update(host_launch=short, host_work=long, refill=tl.total("host_launch") - short - long)
    order = sorted(causes, key=lambda c: -causes[c])
    main = order[0]
    breakdown = {c: {"idle_us": us(v), "pct_of_idle": round(pct(v, idle), 1), "see": _EXPLAINED_BY[c]}
                 for c, v in causes.items() if v}
    net = ctx.net_of_capture(idle)
    gain = pct(idle, ctx.window_ns) if net is None else pct(*net)
    return Finding(
        id="gpu-idle",
        title=f"GPU idle {100 - busy:.0f}% of the step (busy {busy:.0f}%)",
        summary=(f"{ns_brief_text(idle)} idle in {ctx.n_windows} step window(s); largest cause: "
                 f"{main.replace('_', ' ')} ({pct(causes[main], idle):.0f}% of the idle time)"
                 + _capture_clause(ctx)),
        recommendation=("Fix the largest idle cause first: " + "; ".join(
            f"{c.replace('_', ' ')} {pct(causes[c], idle):.0f}% ({_EXPLAINED_BY[c]})" for c in order if causes[c])
            + "." + (_capture_caveat(ctx, "host time") if main in ("host_launch", "host_work") else "")),
        est_gain_pct=gain,
        how_estimated=("All idle time inside the step windows: the upper bound if every gap were filled; the "
                       "cause-specific findings estimate what each fix recovers."
                       + ("" if net is None else _NET_OF_CAPTURE)),
        evidence={"busy_pct": round(busy, 1), "idle_us": us(idle), "window_us": us(ctx.window_ns),
                  "idle_by_cause": breakdown, "largest_cause": main, "nvml_mean": _nvml(ctx),
                  "host_hotspots": _host_hotspots(ctx), **_capture_evidence(ctx, net)},
        top=_top_gaps(ctx, np.ones(tl.gap_start.size, dtype=bool)),
    )


_NET_OF_CAPTURE = (" The run timed its steps without the profiler too; the time the capture added to each step is "
                   "taken out of the idle time and of the step (capture_added_us_per_step).")


def _capture_clause(ctx: Context) -> str:
    cost = ctx.capture_cost
    if cost is None or not cost["added_us_per_step"]:
        return ""
    return (f"; the capture itself added {cost['added_us_per_step'] / 1000:.2f} ms to each step "
            f"({cost['profiled_step_us'] / 1000:.2f} ms profiled, {cost['unprofiled_step_us'] / 1000:.2f} ms without)")


def _capture_caveat(ctx: Context, what: str) -> str:
    """What to make of host time measured under a profiler: the run's own measure when it has one."""
    if ctx.capture_cost is not None:
        return "" if not ctx.capture_cost["added_us_per_step"] else (
            f" Part of this {what} is the profiler's own: the estimate leaves out what the capture added to each step.")
    if ctx.profile.meta.get("source", {}).get("format") == "kineto":
        return f" Traces taken under torch.profiler inflate {what}; confirm with an unprofiled timing."
    return ""


def _capture_evidence(ctx: Context, net: tuple[int, int] | None) -> dict[str, Any]:
    cost = ctx.capture_cost
    if cost is None:
        return {}
    out = {"capture_added_us_per_step": cost["added_us_per_step"], "unprofiled_step_us": cost["unprofiled_step_us"],
           "profiled_step_us": cost["profiled_step_us"]}
    if net is not None:
        out["idle_net_of_capture_us"] = us(net[0])
    return out


@rule("dataloader-bound", group="idle")
def dataloader_bound(ctx: Context) -> Finding | None:
    """The GPU waits for the next batch.

    Pattern: GPU idle while the host is inside DataLoader ``__next__`` (the ``enumerate(DataLoader)#…``
    ranges torch.profiler records).
    Algorithm: idle covered by those ranges ≥ ``DATALOADER_MIN_PCT`` of step time.
    Fix: ``num_workers`` > 0 (start with the number of cores / GPUs), ``persistent_workers=True``,
    ``prefetch_factor``, ``pin_memory=True``; move decoding/augmentation to the GPU (DALI, torchvision v2 on
    tensors) or preprocess offline.
    """
    if not ctx.window_ns:
        return None
    tl = ctx.timeline
    dl = tl.total("dataloader")
    if pct(dl, ctx.window_ns) < DATALOADER_MIN_PCT:
        return None
    ranges = _dataloader_time(ctx)
    return Finding(
        id="dataloader-bound",
        title=f"GPU waits for the DataLoader: {pct(dl, ctx.window_ns):.0f}% of step time",
        summary=(f"the GPU idled {ns_brief_text(dl)} while the host was in DataLoader __next__ "
                 f"({ns_brief_text(ranges['host_ns'])} of __next__ in {ranges['calls']} calls)"),
        recommendation=("Load batches in parallel with the step: DataLoader(num_workers=N, pin_memory=True, "
                        "persistent_workers=True, prefetch_factor=2-4); move decoding and augmentation off the "
                        "critical path (GPU transforms, DALI, or preprocessing once offline)."),
        est_gain_pct=pct(dl, ctx.window_ns),
        how_estimated=("GPU idle that overlaps DataLoader __next__, as a share of the step windows: removed when "
                       "workers prepare batches while the GPU computes (if they keep up)."),
        evidence={"gpu_idle_in_dataloader_us": us(dl), "dataloader_host_us": us(ranges["host_ns"]),
                  "host_hotspots": _host_hotspots(ctx),
                  "dataloader_calls": ranges["calls"], "pct_of_step": round(pct(dl, ctx.window_ns), 2),
                  "range_name": ranges["name"]},
        top=_top_gaps(ctx, tl.dataloader_ns > 0),
    )


def _dataloader_time(ctx: Context) -> dict[str, Any]:
    ops = ctx.profile.tables["ops"]
    sel = np.flatnonzero((ops["rank"] == ctx.rank)
                         & ctx.profile.names_where(ops["name_id"], lambda s: s.startswith("enumerate(DataLoader)#")))
    if ctx.has_steps:
        sel = sel[ops["step"][sel] >= 0]
    return {"host_ns": int(ops["dur_ns"][sel].sum()) if sel.size else 0, "calls": int(sel.size),
            "name": ctx.raw_op_name(int(sel[0])) if sel.size else None}


@rule("launch-bound", group="idle")
def launch_bound(ctx: Context) -> Finding | None:
    """The host cannot launch kernels as fast as the GPU runs them.

    Pattern: many short kernels (``SHORT_KERNEL_NS``) and GPU gaps that end with work launched only after the GPU
    ran dry, not explained by a blocking call.
    Algorithm: unexplained host-launch idle in gaps up to ``LAUNCH_GAP_MAX_NS`` ≥ ``LAUNCH_BOUND_MIN_PCT`` of step
    time and at least ``LAUNCH_BOUND_MIN_SHORT_SHARE`` of the kernels are short.
    Fix: capture the step in a CUDA graph (``torch.compile(mode="reduce-overhead")`` or
    ``torch.cuda.graphs``), fuse small ops with ``torch.compile``, use fused/foreach optimizers, raise the batch
    size so each launch does more work. When CUDA-graph replays (``cudaGraphLaunch``, or kernels with a graph id)
    already run ``GRAPH_LAUNCHED_MIN_SHARE`` of the kernel time, the launch cost left is outside the graphs: the
    finding says so and advises moving the host work between replays off the critical path instead.
    """
    if not ctx.window_ns:
        return None
    tl = ctx.timeline
    idle, _ = tl.host_launch_split(LAUNCH_GAP_MAX_NS)
    net = ctx.net_of_capture(idle)
    measured = pct(idle, ctx.window_ns)
    share = measured if net is None else pct(*net)
    if share < LAUNCH_BOUND_MIN_PCT:  # with the run's own measure: the capture's added cost does not count
        return None
    # A big trace's kernel and runtime columns are read a block of rows at a time (model.mapped_columns).
    k = ctx.profile.tables["kernels"]
    sel = rows_where(k["start_ns"].size, lambda lo, hi: (k["rank"][lo:hi] == ctx.rank)
                     & ((k["step"][lo:hi] >= 0) if ctx.has_steps else True), k["rank"], k["step"])
    d = gather(k["dur_ns"], sel)
    if d.size == 0:
        return None
    short = float((d < SHORT_KERNEL_NS).mean())
    if short < LAUNCH_BOUND_MIN_SHORT_SHARE:
        return None
    rt = ctx.profile.tables["runtime"]
    launch = API_KINDS.index("launch")
    launches = rows_where(rt["start_ns"].size, lambda lo, hi: (rt["rank"][lo:hi] == ctx.rank)
                          & (rt["api_kind"][lo:hi] == launch) & ((rt["step"][lo:hi] >= 0) if ctx.has_steps else True),
                          rt["rank"], rt["api_kind"], rt["step"])
    launch_us = float(gather(rt["dur_ns"], launches).mean() / 1e3) if launches.size else None
    del launches
    by_graph = gather(k["graph_id"], sel) >= 0
    graphs = int(by_graph.sum())
    if rt["api_kind"].size:  # launched by a cudaGraphLaunch (Kineto often records no graph id on replays)
        lr = gather(k["launch_row"], sel)
        by_graph |= (lr >= 0) & (gather(rt["api_kind"], np.clip(lr, 0, rt["api_kind"].size - 1))
                                 == API_KINDS.index("graph_launch"))
        del lr
    graph_pct = 100.0 * float(d[by_graph].sum()) / float(d.sum()) if d.sum() else 0.0
    in_graphs = graph_pct >= 100.0 * GRAPH_LAUNCHED_MIN_SHARE
    per_step = d.size / ctx.n_windows
    median_us = float(np.median(d)) / 1e3
    del sel, d, by_graph
    top = _top_gaps(ctx, (tl.cause == CAUSES.index("host_launch")) & (tl.blamed_ns == 0)
                    & (tl.gap_end - tl.gap_start <= LAUNCH_GAP_MAX_NS))
    if in_graphs:
        title = f"Host-bound outside the CUDA graphs: the GPU waits for the next launch {share:.0f}% of the step"
        recommendation = (f"CUDA-graph replays already launch {graph_pct:.0f}% of the kernel time, so the launch cost "
                          "left is outside the graphs: the host work between replays (Python loop, sampling, "
                          "copying the next inputs in, eager ops). Capture that work into the graph too, run several "
                          "iterations per replay, or prepare the next iteration while the current replay runs."
                          + _capture_caveat(ctx, "launch cost"))
    else:
        title = f"Host-bound: the GPU waits for kernel launches {share:.0f}% of the step"
        recommendation = ("Cut per-kernel host overhead: capture the step in a CUDA graph "
                          "(torch.compile(model, mode='reduce-overhead') or torch.cuda.CUDAGraph), fuse small ops "
                          "with torch.compile, use fused optimizers, or raise the batch size so each launch does more "
                          "work." + _capture_caveat(ctx, "launch cost"))
    return Finding(
        id="launch-bound",
        title=title,
        summary=(f"{per_step:.0f} kernels per step, median {median_us:.1f} µs, {short:.0%} shorter than "
                 f"{SHORT_KERNEL_NS // 1000} µs; {ns_brief_text(idle)} of idle waiting for the next launch"
                 + _capture_clause(ctx)),
        recommendation=recommendation,
        est_gain_pct=share,
        how_estimated=("Idle gaps that end with a kernel launched after the GPU ran dry and that no blocking call "
                       "explains, as a share of the step windows: what replaying the step as a CUDA graph (one "
                       "launch) would remove at best." + ("" if net is None else _NET_OF_CAPTURE)),
        evidence={"host_launch_idle_us": us(idle), "pct_of_step": round(measured, 2),
                  "kernels_per_step": round(per_step, 1), "median_kernel_us": round(median_us, 2),
                  "short_kernel_share": round(short, 3), "mean_launch_call_us": launch_us,
                  "graph_launched_kernels": graphs, "graph_launched_kernel_pct": round(graph_pct, 2),
                  "host_hotspots": _host_hotspots(ctx),
                  **_capture_evidence(ctx, net),
                  **({} if net is None else {"pct_of_step_net_of_capture": round(share, 2)})},
        top=top,
    )
