"""Idle gaps of the GPU, what caused each one, and which blocking host call gets the blame.

The utilisation module totals idle time by cause; rules need the gaps themselves, so this module rebuilds them
per gap with the same definitions (``analysis.utilization``): busy = union of kernels, memcpys and memsets on the
primary device inside the GPU-side step windows; a gap's ``dataloader`` part is covered by DataLoader
``__next__``; the rest is ``sync`` (a blocking host call is in flight when the GPU runs dry), ``host_launch``
(the work that ends the gap was launched after the gap began) or ``other``.

**Blocking calls and lost lead.** A host call that blocks until the GPU drains (``cudaStreamSynchronize``,
``cudaDeviceSynchronize``, ``cudaEventSynchronize``, a copy to or from pageable memory, a non-``Async`` copy)
destroys the host's lead over the GPU: while the host waits, the launch queue empties. The cost is

* the *direct* gap: the GPU idles from the moment it drains until the host launches again;
* the *refill* gaps that follow: host-launch gaps the queued lead would have hidden. We charge them to the
  blocking call up to its wait time, because the host was ahead of the GPU by about that much when it blocked
  (it waited that long for the GPU to finish), so without the call that much later host slowness would have
  been absorbed. A newer call takes the blame once its wait exceeds what is left of the older one's.

Calls inside an op chain that copies host→device from pageable memory (PyTorch synchronises the stream after such
a copy) are owned by ``pageable-memcpy``; every other blocking call by ``host-sync``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dnnprof.analysis.intervals import covered_per_window, gaps, merge
from dnnprof.analysis.utilization import SYNC_TOLERANCE_NS, dataloader_ranges, gpu_activity
from dnnprof.model.mapped_columns import release_pages
from dnnprof.model.schema import API_KINDS, MEMCPY_KINDS, MEMORY_KINDS

if TYPE_CHECKING:
    from dnnprof.analysis.rules.context import Context

CAUSES = ("dataloader", "sync", "host_launch", "other")
OWNERS = ("host-sync", "pageable-memcpy")
_PAGEABLE = MEMORY_KINDS.index("pageable")
_HTOD = MEMCPY_KINDS.index("HtoD")
_DTOH = MEMCPY_KINDS.index("DtoH")


@dataclass
class BlockingCall:
    """One host call that waited for the GPU."""

    runtime_row: int
    start_ns: int
    end_ns: int
    api: str
    op_row: int  # innermost op around the call (-1 none)
    owner: str  # "host-sync" or "pageable-memcpy"
    what: str  # "sync", "DtoH copy", "HtoD copy", "copy"
    charged_direct_ns: int = 0
    charged_refill_ns: int = 0

    @property
    def wait_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def charged_ns(self) -> int:
        return self.charged_direct_ns + self.charged_refill_ns


@dataclass
class Timeline:
    """Gaps of the primary device inside the step windows, classified, with blame assigned."""

    gap_start: np.ndarray
    gap_end: np.ndarray
    dataloader_ns: np.ndarray  # per gap: part covered by DataLoader __next__
    cause: np.ndarray  # per gap: index into CAUSES for the non-dataloader part
    blamed_ns: np.ndarray  # per gap: part charged to a blocking call
    calls: list[BlockingCall] = field(default_factory=list)

    @property
    def rest_ns(self) -> np.ndarray:
        return self.gap_end - self.gap_start - self.dataloader_ns

    def total(self, cause: str) -> int:
        """Idle ns of one cause (``dataloader`` counts the covered parts)."""
        if cause == "dataloader":
            return int(self.dataloader_ns.sum())
        return int(self.rest_ns[self.cause == CAUSES.index(cause)].sum())

    def charged(self, owner: str) -> int:
        return int(sum(c.charged_ns for c in self.calls if c.owner == owner))

    @property
    def unblamed_host_launch_ns(self) -> int:
        """Host-launch idle that no blocking call explains: the host is simply slower than the GPU."""
        sel = self.cause == CAUSES.index("host_launch")
        return int((self.rest_ns[sel] - self.blamed_ns[sel]).sum())

    def host_launch_split(self, long_gap_ns: int) -> tuple[int, int]:
        """Unexplained host-launch idle in gaps up to ``long_gap_ns`` (launch/dispatch overhead) and in longer
        gaps (the host was doing other work: data preparation, Python logic, logging)."""
        sel = self.cause == CAUSES.index("host_launch")
        idle = self.rest_ns[sel] - self.blamed_ns[sel]
        long = (self.gap_end - self.gap_start)[sel] > long_gap_ns
        return int(idle[~long].sum()), int(idle[long].sum())


def build_timeline(ctx: Context) -> Timeline:
    """Gaps, causes and blame for the context's rank and primary device."""
    p, rank, device = ctx.profile, ctx.rank, ctx.util.device
    act_s, act_e, act_l = gpu_activity(p, rank, device)
    empty = np.empty(0, np.int64)
    if act_s.size == 0:
        return Timeline(empty, empty, empty, np.empty(0, np.int8), empty)
    ms, me = merge(act_s, act_e, spend_ends=True)  # a big trace's activities are millions: each column is
    del act_e  # dropped once spent

    steps = p.tables["steps"]
    sel = np.flatnonzero((steps["rank"] == rank) & (steps["gpu_start_ns"] >= 0))
    if sel.size:
        lo, hi = steps["gpu_start_ns"][sel], steps["gpu_end_ns"][sel]
    else:
        lo, hi = np.array([act_s.min()]), np.array([me.max()])  # the union's end is the latest activity's
    parts = [gaps(ms, me, int(a), int(b)) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    del ms, me
    gs = np.concatenate([x[0] for x in parts]).astype(np.int64, copy=False)
    ge = np.concatenate([x[1] for x in parts]).astype(np.int64, copy=False)
    del parts
    order = np.argsort(gs, kind="stable")
    gs, ge = gs[order], ge[order]
    del order

    # Which activity ends each gap, and was it launched after the GPU ran dry? And the launch lead before each gap.
    # First, so that the activities' columns (millions in a big trace) are dropped before the per-gap ones are made.
    nxt = np.searchsorted(act_s, ge, side="left")
    has_next = nxt < act_s.size
    launched = np.where(has_next, act_l[np.clip(nxt, 0, act_s.size - 1)], -1)
    host_launch = has_next & (launched > gs)
    del nxt, has_next, launched
    lead = np.where(act_l >= 0, act_s - act_l, -1)
    del act_l
    run_lead = _lead_before(act_s, lead, gs, ge)
    del act_s, lead

    dl_s, dl_e = merge(*dataloader_ranges(p, rank))
    dl = covered_per_window(dl_s, dl_e, gs, ge) if dl_s.size else np.zeros(gs.size, np.int64)
    release_pages()  # the ops table's pages, read for the data-loader ranges
    calls = _blocking_calls(ctx)
    release_pages()  # the runtime table's pages, read for the calls
    cs = np.array([c.start_ns for c in calls], dtype=np.int64)
    ce = np.array([c.end_ns for c in calls], dtype=np.int64)
    # The blocking call in flight when the GPU ran dry (started before gs + tol, ended after gs - tol).
    direct = np.full(gs.size, -1, dtype=np.int64)
    if cs.size:
        j = np.searchsorted(cs, gs + SYNC_TOLERANCE_NS, side="right") - 1
        run_end = np.maximum.accumulate(ce)
        run_arg = _running_argmax(ce)
        ok = (j >= 0) & (run_end[np.clip(j, 0, None)] >= gs - SYNC_TOLERANCE_NS)
        direct = np.where(ok, run_arg[np.clip(j, 0, None)], -1)
        del j, run_end, run_arg, ok
    cause = np.full(gs.size, CAUSES.index("other"), dtype=np.int8)
    cause[host_launch] = CAUSES.index("host_launch")
    del host_launch
    cause[direct >= 0] = CAUSES.index("sync")
    rest = ge - gs - dl
    blamed = np.zeros(gs.size, dtype=np.int64)
    _charge(calls, gs, ge, rest, cause, direct, blamed, run_lead)
    return Timeline(gs, ge, dl, cause, blamed, calls)


def _lead_before(act_s: np.ndarray, lead: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """Per gap: the largest launch lead among the activities that ran since the previous gap (-1 if none). A block
    of gaps at a time: a big trace's gaps are millions."""
    out = np.full(gs.size, -1, dtype=np.int64)
    if gs.size == 0 or lead.size == 0:
        return out
    for a in range(0, gs.size, _GAP_BLOCK):
        b = min(a + _GAP_BLOCK, gs.size)
        # the first activity since the previous gap's end, for the block's gaps and the next one (its segment's end)
        g = np.arange(a, min(b + 1, gs.size))
        lo = np.searchsorted(act_s, ge[g - 1], side="left")
        lo[g == 0] = 0
        hi = np.searchsorted(act_s, gs[a:b], side="left")
        # Segments [lo_g, lo_g+1) hold the same activities as [lo_g, hi_g): none starts inside a gap.
        seg = np.maximum.reduceat(lead, np.minimum(lo, lead.size - 1))[:b - a]
        lo = lo[:b - a]
        if b == gs.size and hi[-1] > lo[-1]:  # the last gap's segment: reduceat's runs to the end
            seg[-1] = lead[lo[-1]:hi[-1]].max()
        out[a:b] = np.where(hi > lo, seg, -1)
    return out


#: Gaps :func:`_lead_before` looks at at once.
_GAP_BLOCK = 1 << 18


def _running_argmax(x: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``x`` (first occurrence)."""
    idx = np.arange(x.size)
    best = np.maximum.accumulate(x)
    is_new = x >= best
    return np.maximum.accumulate(np.where(is_new, idx, 0))


def _charge(calls: list[BlockingCall], gs: np.ndarray, ge: np.ndarray, rest: np.ndarray, cause: np.ndarray,
            direct: np.ndarray, blamed: np.ndarray, run_lead: np.ndarray) -> None:
    """Charge direct gaps to the call in flight and refill gaps to the call with lead left to lose.

    The refill ends once the host is ahead again: when work that ran after the call had been queued for at least
    the lead still to lose (``run_lead``), the queue has refilled and later gaps are not the call's doing.
    """
    if not calls:
        return
    sync_c, launch_c = CAUSES.index("sync"), CAUSES.index("host_launch")
    for g in _each(np.flatnonzero(cause == sync_c)):
        c = calls[int(direct[g])]
        c.charged_direct_ns += int(rest[g])
        blamed[g] = rest[g]
    starts = np.array([c.start_ns for c in calls], dtype=np.int64)
    owner, budget = -1, 0
    ci = 0
    for g in _each(np.flatnonzero(cause == launch_c)):
        # Calls that began before this gap: the newest takes over when its wait exceeds the budget left.
        while ci < len(calls) and starts[ci] <= gs[g]:
            if calls[ci].wait_ns >= budget:
                owner, budget = ci, calls[ci].wait_ns
            ci += 1
        if owner < 0 or budget <= 0:
            continue
        prev_end = ge[g - 1] if g > 0 else gs[g]
        if prev_end >= calls[owner].end_ns and run_lead[g] >= budget:
            owner, budget = -1, 0  # the queue refilled: the lost lead is back
            continue
        take = int(min(rest[g], budget))
        calls[owner].charged_refill_ns += take
        budget -= take
        blamed[g] = take


def _each(idx: np.ndarray, block: int = 1 << 16) -> Iterator[int]:
    """The values of ``idx`` as Python ints, a block at a time (a list of millions of ints is 36 bytes each)."""
    for a in range(0, idx.size, block):
        yield from idx[a:a + block].tolist()


def _blocking_calls(ctx: Context) -> list[BlockingCall]:
    p, rank = ctx.profile, ctx.rank
    rt = p.tables["runtime"]
    mine = rt["rank"] == rank
    sync_rows = np.flatnonzero(mine & (rt["api_kind"] == API_KINDS.index("sync")))
    mc_rows = np.flatnonzero(mine & (rt["api_kind"] == API_KINDS.index("memcpy")))
    del mine
    release_pages()  # two columns of every runtime call: what follows reads a few rows
    memcpy = p.tables["memcpy"]
    by_launch: dict[int, int] = {int(lr): i for i, lr in enumerate(memcpy["launch_row"].tolist()) if lr >= 0}
    # Outermost copy ops that move host->device data out of pageable memory (their syncs are the copy's cost).
    pageable_h2d_tops: set[int] = set()
    for i in np.flatnonzero((memcpy["rank"] == rank) & (memcpy["kind"] == _HTOD)
                            & (memcpy["src_mem"] == _PAGEABLE)).tolist():
        lr = int(memcpy["launch_row"][i])
        if lr >= 0 and rt["op_row"][lr] >= 0:
            pageable_h2d_tops.add(ctx.plumbing_top(int(rt["op_row"][lr])))
    # the few columns the calls need, gathered one at a time: a few rows spread over the biggest table touch most
    # of its pages, and a big trace's mapped columns give them back in between (model.mapped_columns)
    rows = np.concatenate([mc_rows, sync_rows])
    cols: dict[str, list[int]] = {}
    for c in ("name_id", "op_row", "start_ns", "dur_ns"):
        cols[c] = rt[c][rows].tolist()
        release_pages()
    out: list[BlockingCall] = []
    for i, r in enumerate(rows.tolist()):
        name = p.name(cols["name_id"][i])
        op, start = cols["op_row"][i], cols["start_ns"][i]
        if i >= mc_rows.size:
            out.append(_call(ctx, r, name, "sync", op, start, cols["dur_ns"][i], pageable_h2d_tops))
            continue
        m = by_launch.get(r, -1)
        kind = int(memcpy["kind"][m]) if m >= 0 else 0
        pageable = m >= 0 and _PAGEABLE in (int(memcpy["src_mem"][m]), int(memcpy["dst_mem"][m]))
        if name.endswith("Async") and not pageable:
            continue  # a truly asynchronous copy does not block
        what = {_HTOD: "HtoD copy", _DTOH: "DtoH copy"}.get(kind, "copy")
        out.append(_call(ctx, r, name, what, op, start, cols["dur_ns"][i], pageable_h2d_tops))
    out.sort(key=lambda c: c.start_ns)
    return out


def _call(ctx: Context, r: int, name: str, what: str, op: int, start_ns: int, dur_ns: int,
          pageable_tops: set[int]) -> BlockingCall:
    top = ctx.plumbing_top(op) if op >= 0 else -1
    owner = "pageable-memcpy" if top >= 0 and top in pageable_tops else "host-sync"
    return BlockingCall(r, start_ns, start_ns + dur_ns, name, op, owner, what)
