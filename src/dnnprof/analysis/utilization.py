"""How busy the GPU is in each step, what it does, and why it idles.

Definitions (all per GPU-side step window, see ``model.steps.assign_steps``):
* busy = union of kernel, memcpy and memset intervals (any stream) inside the window; busy % = busy / window.
  (nsys ``gpu_time_util`` counts overlapping work twice; the TensorBoard plugin counted kernels only.)
* kernel / memcpy / memset time: the busy time split by priority kernel > memcpy > memset, so the parts and the
  idle time add up to the window exactly.
* idle gaps are split by cause, from what the host was doing when the GPU ran dry:
  ``dataloader`` — the host was inside DataLoader ``__next__``; ``sync`` — the gap starts as a synchronising call
  (stream/device/event synchronize, a blocking copy) returns; ``host_launch`` — the next GPU work was launched
  only after the GPU went idle (empty launch queue: the host is too slow); ``other`` — work was already queued
  (waits on events or other streams, launch latency) or the cause is not in the trace.
* host time: the host-side step durations the windows stand for (the host span of the trace without steps);
  busy of host % = busy / host time. A GPU window is tiny against its step when the GPU worked little: one 1.76 µs
  kernel in a 13 s step is 100 % busy over its own window and 0.00001 % of the step. GPU work below
  ``GPU_WORK_MIN_US`` in all, or below ``GPU_WORK_MIN_HOST_PCT`` of the host time, is negligible: the rules whose gain
  rests on GPU time stay quiet then (docs/findings.md).
* collectives alone: busy time in which only collective kernels (NCCL) run. A collective kernel starts when its
  rank joins and spins until the last rank has joined, so this is transfer plus waiting for other ranks: busy to
  the GPU, no work for the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dnnprof.analysis.intervals import covered_per_window, gaps, interleave, merge, merge_runs
from dnnprof.analysis.kernel_names import family
from dnnprof.model.mapped_columns import gather, release_pages, release_pages_of, rows_where
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, OP_CATEGORIES

IDLE_CAUSES = ("host_launch", "sync", "dataloader", "other")
#: A synchronising call counts as the cause of a gap when it returns within this much of the gap's start.
SYNC_TOLERANCE_NS = 20_000
#: GPU work (busy time over all windows) below this is too little to base a GPU finding on (a few launches).
GPU_WORK_MIN_US = 50.0
#: ... and so is GPU work below this share of the host time of the steps (the GPU waited for the host 99% of it).
GPU_WORK_MIN_HOST_PCT = 1.0


@dataclass
class StepTime:
    """GPU time accounting of one step (all ns)."""

    number: int
    host_ns: int
    window_ns: int
    kernel_ns: int
    memcpy_ns: int
    memset_ns: int
    idle_ns: int
    idle_by_cause_ns: dict[str, int] = field(default_factory=dict)
    collectives_only_ns: int = 0

    @property
    def busy_ns(self) -> int:
        return self.kernel_ns + self.memcpy_ns + self.memset_ns


@dataclass
class Utilization:
    """Per-step GPU accounting for one device of one rank, and totals."""

    device: int
    steps: list[StepTime]
    whole_trace: bool  # True when there were no steps and the window is the trace's GPU span
    has_collectives: bool = False  # the device ran collective (NCCL) kernels
    host_ns: int = 0  # host time the windows stand for: host step durations, or the trace's host span

    @property
    def busy_of_host_pct(self) -> float | None:
        """Busy time as a share of the host time (None when the trace has no host events)."""
        return 100.0 * self.total("busy_ns") / self.host_ns if self.host_ns > 0 else None

    @property
    def gpu_work_negligible(self) -> bool:
        """The GPU did too little to found a GPU finding on: below ``GPU_WORK_MIN_US`` in all, or below
        ``GPU_WORK_MIN_HOST_PCT`` of the host time."""
        share = self.busy_of_host_pct
        return self.total("busy_ns") < GPU_WORK_MIN_US * 1000 or (share is not None and share < GPU_WORK_MIN_HOST_PCT)

    def total(self, attr: str) -> int:
        return int(sum(getattr(s, attr) for s in self.steps))

    @property
    def busy_pct(self) -> float:
        w = self.total("window_ns")
        return 100.0 * self.total("busy_ns") / w if w else 0.0

    def idle_by_cause_ns(self) -> dict[str, int]:
        return {c: int(sum(s.idle_by_cause_ns.get(c, 0) for s in self.steps)) for c in IDLE_CAUSES}


def primary_device(profile: Profile, rank: int = 0) -> int:
    """The device of the rank with the most kernel time (0 when there is none)."""
    k = profile.tables["kernels"]
    sel = k["rank"] == rank
    if not sel.any():
        return 0
    dev = k["device"][sel]
    totals = np.bincount(dev - dev.min(), weights=k["dur_ns"][sel])
    return int(np.argmax(totals) + dev.min())


def collective_mask(profile: Profile, rows: np.ndarray | slice) -> np.ndarray:
    """Which of these kernel rows are collectives (NCCL, by ``kernel_names.family``); one lookup per name."""
    ids = profile.tables["kernels"]["name_id"][rows]
    return profile.names_where(ids, lambda s: family(s) == "nccl")  # no sort of the ids: one test per name


def _gpu_rows(profile: Profile, table: str, rank: int, device: int) -> np.ndarray | slice:
    """The table's rows of the rank's device: ``slice(None)`` when every row is (one GPU's trace), so that no column
    of their indexes is made and the columns are read as they are."""
    t = profile.tables[table]
    mine = (t["rank"] == rank) & (t["device"] == device)
    return slice(None) if mine.all() else np.flatnonzero(mine)


def gpu_activity(profile: Profile, rank: int, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and launch time (-1: no launch record) of every kernel, copy and memset of the rank on the
    device, by start (stable from kernels, copies, memsets in table order).

    Each table's rows are in order of start (the tables are): the copies and memsets are inserted among the
    kernels, a column at a time, with no order of every activity (this is most of the analysis's peak memory on a
    big trace). Rows out of order are sorted: a few columns of the activity's length at once.
    """
    release_pages()  # a big trace's mapped columns: whatever the caller read before, not held through this
    rt_start = profile.tables["runtime"]["start_ns"]
    runs = []
    for table in ("kernels", "memcpy", "memset"):
        t = profile.tables[table]
        rows = _gpu_rows(profile, table, rank, device)
        s = t["start_ns"][rows].astype(np.int64, copy=isinstance(rows, slice))  # the column's own, never a view
        e = s + t["dur_ns"][rows]
        runs.append((s, e.astype(np.int64, copy=False), _launch_times(rt_start, t["launch_row"][rows])))
        del rows, s, e
        release_pages()  # launches spread over the runtime table touch most of its start column: one table at a time
    together = interleave(runs, consume=True)
    if together is not None:
        del runs
        return together[0], together[1], together[2]
    act_s, act_e, act_l = (np.concatenate([r[i] for r in runs]) for i in range(3))
    del runs
    order = np.argsort(act_s, kind="stable")
    act_s = act_s[order]
    act_e = act_e[order]
    act_l = act_l[order]
    return act_s, act_e, act_l


def _launch_times(rt_start: np.ndarray, launch_row: np.ndarray) -> np.ndarray:
    """The start of each launch's runtime call (-1: no launch record), a block of rows at a time: a big trace's
    launches spread over the runtime table's mapped start column, whose pages are given back after each block."""
    out = np.full(launch_row.size, -1, dtype=np.int64)
    if rt_start.size == 0:
        return out
    for a in range(0, launch_row.size, _LAUNCH_ROWS):
        lr = launch_row[a:a + _LAUNCH_ROWS]
        ok = np.flatnonzero(lr >= 0)
        out[a + ok] = rt_start[lr[ok]]
        release_pages_of(rt_start)
    return out


#: Launches :func:`_launch_times` looks up at once.
_LAUNCH_ROWS = 1 << 18


def utilization(profile: Profile, rank: int = 0, device: int | None = None) -> Utilization:
    """Busy/idle accounting per step (or over the whole GPU span when the profile has no steps)."""
    if device is None:
        device = primary_device(profile, rank)
    all_s, all_e, all_launch = gpu_activity(profile, rank, device)
    if all_s.size == 0:
        return Utilization(device, [], True, host_ns=_host_span_ns(profile, rank))

    def part(table: str, rows: np.ndarray | slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        t = profile.tables[table]
        rows = _gpu_rows(profile, table, rank, device) if rows is None else rows
        s = t["start_ns"][rows]
        return s, s + t["dur_ns"][rows]

    steps = profile.tables["steps"]
    sel = np.flatnonzero((steps["rank"] == rank) & (steps["gpu_start_ns"] >= 0))
    if sel.size:
        lo = steps["gpu_start_ns"][sel]
        hi = steps["gpu_end_ns"][sel]
        numbers = steps["number"][sel]
        host = steps["dur_ns"][sel]
        whole = False
    else:
        lo = np.array([all_s.min()])
        hi = np.array([all_e.max()])
        numbers = np.array([-1])
        host = hi - lo
        whole = True
    host_ns = int(steps["dur_ns"][steps["rank"] == rank].sum()) if not whole else _host_span_ns(profile, rank)
    window = hi - lo
    # Each union of intervals is measured over the windows as soon as it is made, then dropped: on a big trace
    # each is two columns of millions of intervals.
    ms_all = merge(all_s, all_e, spend_ends=True)
    del all_e
    cov_all = covered_per_window(*ms_all, lo, hi)
    krows = _gpu_rows(profile, "kernels", rank, device)
    release_pages()  # a big trace's mapped columns (model.mapped_columns): each part's pages in turn
    ks, ke = part("kernels", krows)
    release_pages()
    cov_k = covered_per_window(*merge(ks, ke), lo, hi)
    cs, ce = part("memcpy")
    cov_km = covered_per_window(*merge_runs([(ks, ke), (cs, ce)]), lo, hi)
    release_pages()
    # Everything but collective kernels: the busy time it leaves is collectives alone.
    nccl = collective_mask(profile, krows)
    del krows
    release_pages()
    if nccl.any():
        ss, se = part("memset")
        cov_rest = covered_per_window(*merge_runs([(ks[~nccl], ke[~nccl]), (cs, ce), (ss, se)]), lo, hi)
    else:
        cov_rest = cov_all
    del ks, ke, cs, ce
    release_pages()
    sync_s, sync_e = _sync_calls(profile, rank)
    order = np.argsort(sync_s, kind="stable")  # once, not per step
    sync_s, sync_latest_end = sync_s[order], np.maximum.accumulate(sync_e[order])
    dl = merge(*dataloader_ranges(profile, rank))

    out = []
    for i in range(lo.size):
        gs, ge = gaps(*ms_all, int(lo[i]), int(hi[i]))
        causes = _classify_gaps(gs, ge, all_s, all_launch, sync_s, sync_latest_end, dl)
        out.append(StepTime(
            number=int(numbers[i]), host_ns=int(host[i]), window_ns=int(window[i]), kernel_ns=int(cov_k[i]),
            memcpy_ns=int(cov_km[i] - cov_k[i]), memset_ns=int(cov_all[i] - cov_km[i]),
            idle_ns=int(window[i] - cov_all[i]), idle_by_cause_ns=causes,
            collectives_only_ns=int(cov_all[i] - cov_rest[i])))
    return Utilization(device, out, whole, has_collectives=bool(nccl.any()), host_ns=host_ns)


def _host_span_ns(profile: Profile, rank: int) -> int:
    """From the first host event (op or runtime call) of the rank to the end of the last one; 0 without any."""
    lo, hi = [], []
    for table in ("ops", "runtime"):
        t = profile.tables[table]
        sel = t["rank"] == rank
        if sel.any():
            lo.append(int(t["start_ns"][sel].min()))
            hi.append(int((t["start_ns"][sel] + t["dur_ns"][sel]).max()))
    return max(hi) - min(lo) if lo else 0


def _sync_calls(profile: Profile, rank: int) -> tuple[np.ndarray, np.ndarray]:
    rt = profile.tables["runtime"]
    sel = np.flatnonzero((rt["rank"] == rank) & (rt["api_kind"] == API_KINDS.index("sync")))
    # A blocking memcpy (pageable host memory, or cudaMemcpy without Async) synchronises too.
    mc = np.flatnonzero((rt["rank"] == rank) & (rt["api_kind"] == API_KINDS.index("memcpy")))
    if mc.size:
        blocking = ~profile.names_where(rt["name_id"][mc], lambda s: s.endswith("Async"))
        memcpy = profile.tables["memcpy"]
        # this rank's copies only: in a profile of several ranks, another rank's copy does not block this one
        pageable = memcpy["launch_row"][(memcpy["rank"] == rank) & ((memcpy["src_mem"] == 2) | (memcpy["dst_mem"] == 2))]
        # the union of the three, sorted: marked on the runtime rows rather than sorted (union1d)
        chosen = np.zeros(rt["start_ns"].size, dtype=bool)
        chosen[sel] = True
        chosen[mc[blocking]] = True
        chosen[pageable[pageable >= 0]] = True
        sel = np.flatnonzero(chosen)
    # calls spread over the biggest table touch most of its pages: a big trace's mapped columns give them back
    # after each column (model.mapped_columns)
    release_pages()
    s = rt["start_ns"][sel]
    release_pages()
    e = s + rt["dur_ns"][sel]
    release_pages()
    return s, e


def dataloader_ranges(profile: Profile, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of the rank's ``enumerate(DataLoader)#…`` ranges (the wait for the next batch)."""
    ops = profile.tables["ops"]
    annotation = OP_CATEGORIES.index("user_annotation")
    sel = rows_where(ops["start_ns"].size, lambda lo, hi: (ops["rank"][lo:hi] == rank)  # a block at a time: a big
                     & (ops["category"][lo:hi] == annotation), ops["rank"], ops["category"])  # trace's mapped ops
    if sel.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    dl = sel[profile.names_where(gather(ops["name_id"], sel), lambda s: s.startswith("enumerate(DataLoader)#"))]
    s = gather(ops["start_ns"], dl)
    return s, s + gather(ops["dur_ns"], dl)


def _classify_gaps(gs: np.ndarray, ge: np.ndarray, act_s: np.ndarray, act_launch: np.ndarray,
                   sync_s: np.ndarray, sync_latest_end: np.ndarray,
                   dl: tuple[np.ndarray, np.ndarray]) -> dict[str, int]:
    """Idle time of the gaps [gs, ge) by cause. ``sync_s``: the sync calls' starts, sorted; ``sync_latest_end``:
    the latest end among the calls up to each one."""
    out = dict.fromkeys(IDLE_CAUSES, 0)
    if gs.size == 0:
        return out
    length = ge - gs
    dl_part = covered_per_window(*dl, gs, ge) if dl[0].size else np.zeros_like(length)
    rest = length - dl_part
    out["dataloader"] = int(dl_part.sum())
    # The activity that ends each gap, and when the host launched it.
    nxt = np.searchsorted(act_s, ge, side="left")
    has_next = nxt < act_s.size
    launched = np.where(has_next, act_launch[np.clip(nxt, 0, act_s.size - 1)], -1)
    host_launch = has_next & (launched > gs)
    synced = np.zeros(gs.size, dtype=bool)
    if sync_s.size:
        # A sync call that spans the moment the GPU ran dry (it returned because the GPU drained):
        # some call started before gs + tol and ended after gs - tol.
        j = np.searchsorted(sync_s, gs + SYNC_TOLERANCE_NS, side="right") - 1
        synced = (j >= 0) & (sync_latest_end[np.clip(j, 0, None)] >= gs - SYNC_TOLERANCE_NS)
    out["sync"] = int(rest[synced].sum())
    out["host_launch"] = int(rest[~synced & host_launch].sum())
    out["other"] = int(rest[~synced & ~host_launch].sum())
    return out
