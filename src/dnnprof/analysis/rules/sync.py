"""Rules about the host waiting for the GPU: ``host-sync`` and ``pageable-memcpy``.

Both use the blame model of :mod:`dnnprof.analysis.rules.timeline`: a blocking call is charged the GPU idle it
causes directly (drain → next launch) and the refill gaps its lost lead would have hidden, capped by its wait.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.model.schema import MEMCPY_KINDS, MEMORY_KINDS
from dnnprof.model.units import bytes_text, ns_brief_text

#: ``host-sync`` fires when blocking calls inside the steps cost at least this share of step time …
HOST_SYNC_MIN_PCT = 1.0
#: … and they recur: blocking calls in at least this share of the steps (a single torch.cuda.synchronize() at the
#: end of a profiled loop is not a habit to fix) — unless they cost ``HOST_SYNC_ALWAYS_PCT`` or more.
HOST_SYNC_MIN_STEP_SHARE = 0.5
HOST_SYNC_ALWAYS_PCT = 5.0
#: ``pageable-memcpy`` fires when pageable copies (their GPU time plus the idle they cause) reach this share.
PAGEABLE_MIN_PCT = 1.0
#: Pinned copies run this many times faster than pageable ones (PCIe staging through a bounce buffer halves the
#: rate; NVIDIA's "How to Optimize Data Transfers in CUDA C/C++" shows ~2x with bandwidthTest on PCIe hosts).
PINNED_SPEEDUP = 2.0
#: Offenders listed in evidence.
TOP_N = 5

_PAGEABLE = MEMORY_KINDS.index("pageable")
#: Advice for blocking calls inside ops known to synchronise.
_OP_HINTS = {
    "aten::ctc_loss": "ctc_loss copies CUDA input/target lengths to the host: pass the lengths as CPU int64 tensors",
    "aten::item": ".item() waits for the GPU: keep the value as a tensor and read it every N steps",
    "aten::_local_scalar_dense": ".item()/float(t)/if t: wait for the GPU: keep the value as a tensor",
    "aten::is_nonzero": "`if tensor:` waits for the GPU: compute the condition with torch.where or read it rarely",
    "aten::nonzero": "nonzero has a data-dependent size: use masks with torch.where, or torch.nonzero_static",
    "aten::masked_select": "masked_select has a data-dependent size: multiply by the mask instead",
    "aten::index": "boolean-mask indexing has a data-dependent size: use torch.where or index_select with indices",
    "aten::unique": "unique has a data-dependent size: move it out of the step or use a fixed-size alternative",
    "aten::repeat_interleave": "repeat_interleave with tensor repeats reads them on the host: pass output_size=",
    "cudaDeviceSynchronize": "remove torch.cuda.synchronize() from the training loop (keep it only for timing)",
}


def _by_site(ctx: Context, owner: str) -> list[dict[str, Any]]:
    """Blocking calls of one owner grouped by (op, enclosing op, what), costliest first."""
    acc: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(lambda: {"calls": 0, "wait_ns": 0,
                                                                             "charged_ns": 0, "op_row": -1})
    for c in ctx.timeline.calls:
        if c.owner != owner:
            continue
        op, outer = ctx.user_op(c.op_row)
        a = acc[(op, outer, c.what)]
        a["calls"] += 1
        a["wait_ns"] += c.wait_ns
        a["charged_ns"] += c.charged_ns
        if a["op_row"] < 0:
            a["op_row"] = c.op_row
        a.setdefault("apis", set()).add(c.api)
    rows = []
    for (op, outer, what), a in acc.items():
        rows.append({"op": op or None, "in_op": outer or None, "what": what, "calls": a["calls"],
                     "apis": sorted(a["apis"]), "host_wait_us": us(a["wait_ns"]),
                     "gpu_idle_caused_us": us(a["charged_ns"]),
                     "pct_of_step": round(pct(a["charged_ns"], ctx.window_ns), 2),
                     "source": ctx.source_line(a["op_row"])})
    rows.sort(key=lambda r: -r["gpu_idle_caused_us"])
    return rows


@rule("host-sync", group="host")
def host_sync(ctx: Context) -> Finding | None:
    """The host blocks on the GPU inside the step, and the GPU starves afterwards.

    Pattern: ``cudaStreamSynchronize``/``cudaDeviceSynchronize``/``cudaEventSynchronize`` or device→host copies
    (``.item()``, ``.cpu()``, ``.tolist()``, printing a CUDA tensor, data-dependent shapes such as ``nonzero``)
    inside a step, each followed by GPU idle while the host launches again.
    Algorithm: gaps of the GPU-side step windows are blamed on the blocking call in flight when the GPU ran dry
    (direct), and the host-launch gaps after it up to the call's wait (refill; the lead it destroyed); calls
    inside pageable host→device copies are left to ``pageable-memcpy``. Fires when the blamed idle is at least
    ``HOST_SYNC_MIN_PCT`` of step time and the calls recur in ``HOST_SYNC_MIN_STEP_SHARE`` of the steps (or cost
    ``HOST_SYNC_ALWAYS_PCT``).
    Fix: keep values on the GPU (accumulate the loss as a tensor, log every N steps), replace ``.item()`` checks
    with tensor ops, copy results with ``.to("cpu", non_blocking=True)`` into pinned memory and read them after
    the next step's launches, avoid ops with data-dependent output shapes inside the step.
    """
    tl = ctx.timeline
    charged = tl.charged("host-sync")
    if not ctx.window_ns or pct(charged, ctx.window_ns) < HOST_SYNC_MIN_PCT:
        return None
    sites = _by_site(ctx, "host-sync")
    calls = [c for c in tl.calls if c.owner == "host-sync"]
    direct = sum(c.charged_direct_ns for c in calls)
    share = pct(charged, ctx.window_ns)
    runtime_step = ctx.profile.tables["runtime"]["step"]
    steps_with_calls = len({int(runtime_step[c.runtime_row]) for c in calls})
    if share < HOST_SYNC_ALWAYS_PCT and steps_with_calls < HOST_SYNC_MIN_STEP_SHARE * max(ctx.n_windows, 1):
        return None
    top = sites[:TOP_N]
    hints = list(dict.fromkeys(h for row in top for h in (
        _OP_HINTS.get(row["op"] or ""), _OP_HINTS.get(row["in_op"] or ""), _OP_HINTS.get(row["apis"][0])) if h))
    hint = hints[0] + ". " if hints else ""
    return Finding(
        id="host-sync",
        title=f"Host waits for the GPU inside the step; the GPU then starves ({share:.1f}% of step time)",
        summary=f"{len(calls)} blocking calls in {ctx.n_windows} step(s) caused {ns_brief_text(charged)} of GPU idle",
        recommendation=(hint + "Do not read GPU values on the host inside the step: keep running sums as tensors and "
                        "call .item() every N steps, drop torch.cuda.synchronize() from the loop, copy results "
                        "with .to('cpu', non_blocking=True) into pinned memory and read them later, and avoid "
                        "ops with data-dependent shapes (nonzero, masked_select, boolean indexing)."),
        est_gain_pct=share,
        how_estimated=("GPU idle blamed on the blocking calls: from when the GPU ran dry until the host launched "
                       "again, plus later host-launch gaps up to each call's wait (the lead it destroyed), as a "
                       "share of the GPU-side step windows."),
        evidence={"blocking_calls": len(calls), "steps": ctx.n_windows, "gpu_idle_caused_us": us(charged),
                  "direct_idle_us": us(direct), "refill_idle_us": us(charged - direct),
                  "host_wait_us": us(sum(c.wait_ns for c in calls)), "pct_of_step": round(share, 2),
                  "hints": hints},
        top=top,
    )


@rule("pageable-memcpy", group="host")
def pageable_memcpy(ctx: Context) -> Finding | None:
    """Host↔device copies from pageable (not pinned) memory.

    Pattern: memcpy rows whose host side is ``pageable``; a host→device copy from pageable memory is staged
    through a driver buffer and PyTorch synchronises the stream after it (``non_blocking`` has no effect).
    Algorithm: cost = GPU time of the pageable copies (both directions) + GPU idle blamed (timeline model) on the
    blocking calls inside the pageable host→device copy ops. Fires at ``PAGEABLE_MIN_PCT`` of step time.
    Fix: ``DataLoader(pin_memory=True)`` or ``tensor.pin_memory()``, then ``.to(device, non_blocking=True)``;
    build small tensors (lengths, indices) on the device directly (``torch.tensor(x, device="cuda")``).
    """
    p = ctx.profile
    m = p.tables["memcpy"]
    sel = np.flatnonzero((m["rank"] == ctx.rank) & ((m["src_mem"] == _PAGEABLE) | (m["dst_mem"] == _PAGEABLE)))
    if sel.size == 0 or not ctx.window_ns:
        return None
    if ctx.has_steps:
        sel = sel[m["step"][sel] >= 0]
    copy_ns = int(m["dur_ns"][sel].sum())
    idle_ns = ctx.timeline.charged("pageable-memcpy")
    cost = copy_ns + idle_ns
    if pct(cost, ctx.window_ns) < PAGEABLE_MIN_PCT:
        return None
    gain = idle_ns + copy_ns * (1.0 - 1.0 / PINNED_SPEEDUP)
    kinds = m["kind"][sel]
    by_dir = {MEMCPY_KINDS[k]: {"count": int((kinds == k).sum()), "bytes": int(m["bytes"][sel][kinds == k].sum()),
                                "gpu_us": us(m["dur_ns"][sel][kinds == k].sum())}
              for k in np.unique(kinds).tolist()}
    top = _copy_sites(ctx, sel)
    idle_sites = _by_site(ctx, "pageable-memcpy")
    worst = top[0]
    where = worst["op"] + (f" in {worst['in_op']}" if worst["in_op"] else "")
    return Finding(
        id="pageable-memcpy",
        title=f"Copies from pageable host memory ({pct(cost, ctx.window_ns):.1f}% of step time)",
        summary=(f"{sel.size} pageable copies ({bytes_text(int(m['bytes'][sel].sum()))}) take {ns_brief_text(copy_ns)} "
                 f"on the GPU and cause {ns_brief_text(idle_ns)} of GPU idle; most in {where}"),
        recommendation=("Pin host buffers (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with "
                        ".to(device, non_blocking=True); create small tensors (lengths, indices, masks) directly "
                        "on the GPU with torch.tensor(..., device='cuda') instead of copying them each step."),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"GPU idle blamed on the stream syncs PyTorch adds after pageable host→device copies "
                       f"(removed by pinned + non_blocking copies) plus the copies' GPU time × (1 − 1/"
                       f"{PINNED_SPEEDUP:g}), pinned transfers being about {PINNED_SPEEDUP:g}× faster than pageable "
                       f"ones; as a share of the GPU-side step windows."),
        evidence={"copies": int(sel.size), "bytes": int(m["bytes"][sel].sum()), "gpu_copy_us": us(copy_ns),
                  "gpu_idle_caused_us": us(idle_ns), "by_direction": by_dir, "idle_sites": idle_sites[:TOP_N],
                  "pct_of_step": round(pct(cost, ctx.window_ns), 2)},
        top=top[:TOP_N],
    )


def _copy_sites(ctx: Context, sel: np.ndarray) -> list[dict[str, Any]]:
    m = ctx.profile.tables["memcpy"]
    rt = ctx.profile.tables["runtime"]
    acc: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i in sel.tolist():
        lr = int(m["launch_row"][i])
        op_row = int(rt["op_row"][lr]) if lr >= 0 else -1
        op, outer = ctx.user_op(op_row)
        key = (op or "(no op)", outer, MEMCPY_KINDS[int(m["kind"][i])])
        a = acc.setdefault(key, {"count": 0, "bytes": 0, "gpu_ns": 0, "host_ns": 0, "op_row": op_row})
        a["count"] += 1
        a["bytes"] += int(m["bytes"][i])
        a["gpu_ns"] += int(m["dur_ns"][i])
        a["host_ns"] += int(rt["dur_ns"][lr]) if lr >= 0 else 0
    rows = [{"op": k[0], "in_op": k[1] or None, "kind": k[2], "count": a["count"], "bytes": a["bytes"],
             "gpu_us": us(a["gpu_ns"]), "host_call_us": us(a["host_ns"]), "source": ctx.source_line(a["op_row"])}
            for k, a in acc.items()]
    rows.sort(key=lambda r: (-r["host_call_us"] - r["gpu_us"]))
    return rows


