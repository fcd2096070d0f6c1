"""Across ranks: each collective's arrivals and waits, which rank and phase gated each step, comm/compute overlap.

* **Collectives:** per rank, the spans in which a collective ran — NCCL kernels on the rank's GPU, else the host
  spans a backend records around its work (``gloo:all_reduce`` on gloo's worker thread, ``nccl:*``). A span starts
  when that rank has joined (its *arrival*) and ends when the last rank has joined and the data moved.
* **Matching:** a process group runs its collectives in the same order on every rank, and every rank counts steps
  the same way, so the k-th collective of step s on one rank is the k-th of step s on the others; instances that
  are not seen on every rank are left out.
* **Arrival** on a GPU rank: when its collective kernel was ready to run — the later of its launch and the end of
  the rank's last kernel launched before it — not the kernel's start, which queues behind the rank's earlier
  collectives on their stream (:func:`collective_arrivals`).
* **Wait:** in one instance, a rank waits ``last arrival − its arrival``; the last rank waits nothing. Per rank and
  step, its longest wait (several collectives can be in flight at once: their waits overlap).
* **Critical path of a step:** the instance with the largest spread of arrivals; its last rank made the others
  wait. Why it was late: for every rank, the time from the step's previous synchronisation point (the end of the
  previous step's last instance — the ranks leave a collective together — else the rank's own step start) to its
  arrival is split into phases — ``data_loading``, ``forward``, ``backward``, ``optimizer``, ``host`` (nothing of
  those) — from the rank's ops on every thread but the collectives'. On a GPU rank the arrival is the collective
  kernel's start on the GPU, so the split is of the GPU's time: its kernels by their phase (attribution), and the
  time it sat idle by what the host was doing meanwhile (a slow data loader, a host-side delay inside forward),
  the rest ``host``. A rank whose GPU work is larger (a bigger micro-batch) is late in the phase of that work even
  though its host ran ahead. The phase in which the late rank spent most more than the median of the others is the
  verdict, with the layer (module range) it spent most more in.
* **Overlap:** per rank, the collective spans' union, and the part of it that ran while the rank computed (its
  ops on other threads; on a GPU :func:`dnnprof.analysis.ranks.kernel_times` says the same from kernels).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from dnnprof.analysis.attribution import _op_features
from dnnprof.analysis.intervals import covered_per_window, merge
from dnnprof.analysis.ranks import collective_mask
from dnnprof.model.profile import Profile
from dnnprof.model.run_format import MODULE_RANGE_PREFIX

PHASES = ("data_loading", "forward", "backward", "optimizer", "host")
#: Host spans of a backend's collective work, by name prefix.
COLLECTIVE_SPAN_PREFIXES = ("gloo:", "nccl:")
#: A step's late rank is named only when the others wait at least this long for it (µs).
MIN_WAIT_US = 200.0
_FORWARD_MARKS = (".forward", "nn.Module:")


def _r(x: float) -> float:
    return round(float(x), 3)


def collective_spans(p: Profile, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, thread or stream) of the rank's collectives in time order (see the module docstring)."""
    k = p.tables["kernels"]
    rows = np.flatnonzero(k["rank"] == rank)
    if rows.size:
        rows = rows[collective_mask(p, rows)]
    if rows.size:
        s = k["start_ns"][rows]
        return s, s + k["dur_ns"][rows], k["stream"][rows].astype(np.int64)
    ops = p.tables["ops"]
    mine = np.flatnonzero(ops["rank"] == rank)
    names = p.names(ops["name_id"][mine])
    sel = mine[np.fromiter((str(n).startswith(COLLECTIVE_SPAN_PREFIXES) for n in names), dtype=bool,
                           count=mine.size)]
    sel = sel[np.argsort(ops["start_ns"][sel], kind="stable")]
    s = ops["start_ns"][sel]
    return s, s + ops["dur_ns"][sel], ops["tid"][sel]


def collective_arrivals(p: Profile, rank: int, rows: np.ndarray | None = None) -> np.ndarray | None:
    """When each collective kernel of a GPU rank (in :func:`collective_spans`' order) was ready to run: the later of
    its host launch and the end of the rank's last other kernel launched before it (the work its data waits on).
    A collective kernel that queued behind an earlier one on its stream starts later than that: taking its start
    as the arrival would hide every delay after a rank's first collective of a step (DDP's later buckets carry a
    slow backward's excess). ``min(start, ready)``; None on a rank without kernels. ``rows``: the collective kernel
    rows to answer for, in that order (default: :func:`collective_spans`' rows, in its order)."""
    k = p.tables["kernels"]
    mine = np.flatnonzero(k["rank"] == rank)
    if not mine.size:
        return None
    coll = collective_mask(p, mine)
    crow, orow = mine[coll], mine[~coll]
    crow = crow if rows is None else np.asarray(rows)  # default: collective_spans' rows, in its order
    start = k["start_ns"][crow].astype(np.int64)
    rt_start = p.tables["runtime"]["start_ns"]

    def launched(r: np.ndarray) -> np.ndarray:
        lr = k["launch_row"][r].astype(np.int64)
        ok = (lr >= 0) & (lr < rt_start.size)
        return np.where(ok, rt_start[np.clip(lr, 0, max(rt_start.size - 1, 0))] if rt_start.size else 0, -1)

    c_launch = launched(crow)
    o_launch = launched(orow)
    has = o_launch >= 0
    o_launch, o_end = o_launch[has], (k["start_ns"][orow] + k["dur_ns"][orow])[has].astype(np.int64)
    order = np.argsort(o_launch, kind="stable")
    o_launch, o_end = o_launch[order], np.maximum.accumulate(o_end[order]) if order.size else o_end
    i = np.searchsorted(o_launch, c_launch, side="left") - 1
    prev_end = np.where(i >= 0, o_end[np.clip(i, 0, None)] if o_end.size else 0, np.iinfo(np.int64).min)
    ready = np.maximum(c_launch, prev_end)
    return np.where(c_launch >= 0, np.minimum(start, ready), start)


def _steps(p: Profile, rank: int, on_gpu: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(number, start_ns, end_ns) of the rank's steps: on a GPU rank the steps' GPU-side windows, since its
    collectives are kernels, which run behind the host by however far the host has run ahead on that rank."""
    st = p.tables["steps"]
    sel = np.flatnonzero(st["rank"] == rank)
    if on_gpu:
        sel = sel[(st["gpu_start_ns"][sel] >= 0) & (st["gpu_end_ns"][sel] > st["gpu_start_ns"][sel])]
        sel = sel[np.argsort(st["gpu_start_ns"][sel], kind="stable")]
        return st["number"][sel], st["gpu_start_ns"][sel], st["gpu_end_ns"][sel]
    sel = sel[np.argsort(st["start_ns"][sel], kind="stable")]
    return st["number"][sel], st["start_ns"][sel], st["start_ns"][sel] + st["dur_ns"][sel]


def _phase_intervals(p: Profile, rank: int, feats: dict[str, np.ndarray],
                     skip_tids: set[int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per phase, the merged intervals of the rank's ops in it (exclusive: data > optimizer > backward > forward)."""
    ops = p.tables["ops"]
    rows = np.flatnonzero((ops["rank"] == rank) & ~np.isin(ops["tid"], list(skip_tids)))
    ids = feats["name_id"][rows]
    fwd_named = p.names_where(ids, lambda s: any(m in s for m in _FORWARD_MARKS))
    is_step = p.names_where(ids, lambda s: s.startswith("ProfilerStep#"))
    rows, fwd_named = rows[~is_step], fwd_named[~is_step]
    s = ops["start_ns"][rows]
    e = s + ops["dur_ns"][rows]
    data = feats["dataloader"][rows]
    opt = feats["optimizer"][rows] & ~data
    bwd = feats["backward"][rows] & ~data & ~opt
    fwd = ((feats["module"][rows] >= 0) | fwd_named) & ~data & ~opt & ~bwd
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    taken = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    for name, sel in (("data_loading", data), ("optimizer", opt), ("backward", bwd), ("forward", fwd)):
        ms, me = merge(s[sel], e[sel])
        ms, me = _minus(ms, me, *taken)
        out[name] = (ms, me)
        taken = merge(np.concatenate([taken[0], ms]), np.concatenate([taken[1], me]))
    out["_any"] = taken
    return out


def _gpu_phase_intervals(p: Profile, rank: int, host: dict[str, tuple[np.ndarray, np.ndarray]],
                         kernel_phase: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per phase, the GPU time of a GPU rank in it: its non-collective kernels of that phase (exclusive: optimizer >
    backward > forward; kernels of no phase count as host), plus the time its GPU was idle while the host was in
    that phase. ``_any`` is everything but ``host``."""
    from dnnprof.analysis.attribution import PHASES as KERNEL_PHASES

    k = p.tables["kernels"]
    rows = np.flatnonzero(k["rank"] == rank)
    coll = collective_mask(p, rows)
    comm = merge(k["start_ns"][rows[coll]], k["start_ns"][rows[coll]] + k["dur_ns"][rows[coll]])
    rows = rows[~coll]
    s = k["start_ns"][rows]
    e = s + k["dur_ns"][rows]
    ph = kernel_phase[rows]
    busy = merge(s, e)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    taken = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    for name in ("optimizer", "backward", "forward"):
        sel = ph == KERNEL_PHASES.index(name)
        ms, me = _minus(*merge(s[sel], e[sel]), *taken)
        out[name] = (ms, me)
        taken = merge(np.concatenate([taken[0], ms]), np.concatenate([taken[1], me]))
    out["data_loading"] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    for name in ("data_loading", "optimizer", "backward", "forward"):  # idle GPU, host in this phase
        idle_s, idle_e = _minus(*host[name], *busy)
        a = out[name]
        out[name] = merge(np.concatenate([a[0], idle_s]), np.concatenate([a[1], idle_e]))
    # Idle GPU inside the backward pass (backward kernels on both sides of the gap) while the host is in no phase
    # it recorded: the pass stalled on the host. The timing window records few host ops and none of the autograd
    # thread's, so a backward hook that sleeps shows only as such a gap. (Forward and optimizer have their host
    # ranges in that window — the model's forward, ``Optimizer.step`` — and a gap between forward-phase kernels
    # may be host code between the loss and ``backward()``.)
    claimed = merge(np.concatenate([out[n][0] for n in ("data_loading", "optimizer", "backward", "forward")]),
                    np.concatenate([out[n][1] for n in ("data_loading", "optimizer", "backward", "forward")]))
    for name, (gs, ge) in _gaps_within_phase(s, e, ph, KERNEL_PHASES).items():
        gs, ge = _minus(gs, ge, *claimed)
        gs, ge = _minus(gs, ge, *comm)  # a collective running there: the rank waits on the others, not on its host
        a = out[name]
        out[name] = merge(np.concatenate([a[0], gs]), np.concatenate([a[1], ge]))
    out["_any"] = merge(np.concatenate([out[n][0] for n in ("data_loading", "optimizer", "backward", "forward")]),
                        np.concatenate([out[n][1] for n in ("data_loading", "optimizer", "backward", "forward")]))
    return out


def _gaps_within_phase(s: np.ndarray, e: np.ndarray, ph: np.ndarray,
                       phase_names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For the backward phase, the idle gaps between busy stretches of these kernels whose last kernel before and
    first kernel after are both backward kernels."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if s.size < 2:
        return out
    order = np.argsort(s, kind="stable")
    s, e, ph = s[order], e[order], ph[order]
    reach = np.maximum.accumulate(e)
    # The kernel holding the stretch's end so far (the latest-ending kernel among those started).
    holder = np.maximum.accumulate(np.where(e >= reach, np.arange(s.size), 0))
    gap = np.flatnonzero(s[1:] > reach[:-1])  # kernel i+1 starts a new busy stretch
    before, after = ph[holder[gap]], ph[gap + 1]
    for name in ("backward",):
        code = phase_names.index(name)
        sel = gap[(before == code) & (after == code)]
        out[name] = (reach[sel].astype(np.int64), s[sel + 1].astype(np.int64))
    return out


def _minus(s: np.ndarray, e: np.ndarray, ts: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals (s, e) less the merged intervals (ts, te)."""
    if not ts.size or not s.size:
        return s, e
    pts_s: list[int] = []
    pts_e: list[int] = []
    for a, b in zip(s.tolist(), e.tolist(), strict=False):
        i = int(np.searchsorted(te, a, side="right"))
        cur = a
        while i < ts.size and ts[i] < b:
            if ts[i] > cur:
                pts_s.append(cur)
                pts_e.append(int(ts[i]))
            cur = max(cur, int(te[i]))
            i += 1
        if cur < b:
            pts_s.append(cur)
            pts_e.append(b)
    return np.asarray(pts_s, dtype=np.int64), np.asarray(pts_e, dtype=np.int64)


def _within(iv: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> int:
    s, e = iv
    if hi <= lo or not s.size:
        return 0
    return int(np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None).sum())


def _compute(p: Profile, rank: int, host: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """What counts as the rank computing: its non-collective kernels on a GPU, else its host ops (not the
    collectives' threads)."""
    k = p.tables["kernels"]
    rows = np.flatnonzero(k["rank"] == rank)
    if not rows.size:
        return host
    rows = rows[~collective_mask(p, rows)]
    return merge(k["start_ns"][rows], k["start_ns"][rows] + k["dur_ns"][rows])


def _depth(label: str) -> int:
    """Nesting depth of a module range's ``fqn|Class`` label (the root module, fqn "", is 0)."""
    fqn = label.rpartition("|")[0]
    return fqn.count(".") + 1 if fqn else 0


def _label(label: str) -> str:
    """``module.2 (Linear)`` for ``module.2|Linear``."""
    fqn, _, cls = label.rpartition("|")
    return f"{fqn} ({cls})" if fqn and cls else (cls or fqn)


def _layer_rows(p: Profile, rank: int) -> dict[str, list[Any]]:
    """The rank's dnnprof module ranges (``dnnprof.module:…``) in row order: label, start_ns, end_ns."""
    ops = p.tables["ops"]
    rows = np.flatnonzero(ops["rank"] == rank)
    names = p.names(ops["name_id"][rows])
    pick = np.fromiter((str(n).startswith(MODULE_RANGE_PREFIX) for n in names), dtype=bool, count=rows.size)
    rows = rows[pick]
    s = ops["start_ns"][rows].astype(np.int64)
    return {"label": [str(n)[len(MODULE_RANGE_PREFIX):] for n in names[pick]], "start_ns": s.tolist(),
            "end_ns": (s + ops["dur_ns"][rows]).tolist()}


def _layers(mods: dict[str, list[Any]], lo: int, hi: int) -> dict[str, int]:
    """Time per module range of :func:`_layer_rows` inside [lo, hi)."""
    out: Counter[str] = Counter()
    for lab, s, e in zip(mods["label"], mods["start_ns"], mods["end_ns"], strict=True):
        if s < hi and e > lo:
            out[lab] += max(0, min(e, hi) - max(s, lo))
    return dict(out)


def spent_in(phases: dict[str, tuple[np.ndarray, np.ndarray]], lo: int, hi: int) -> dict[str, int]:
    """Time of each phase inside [lo, hi); ``host`` is what no other phase covers."""
    d = {name: _within(phases[name], lo, hi) for name in PHASES if name != "host"}
    d["host"] = max(0, hi - lo - _within(phases["_any"], lo, hi))
    return d


def rank_phases(p: Profile, rank: int, feats: dict[str, np.ndarray] | None = None,
                kernel_phase: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per phase, the merged intervals in which the rank was in it (GPU time on a GPU rank; see the module
    docstring); ``_any`` is everything but ``host``, ``_host_any`` the host's phases' union."""
    where = collective_spans(p, rank)[2]
    on_gpu = bool((p.tables["kernels"]["rank"] == rank).any())
    skip = set() if on_gpu else set(where.tolist())  # gloo's worker threads are no compute
    host = _phase_intervals(p, rank, _op_features(p) if feats is None else feats, skip)
    if not on_gpu:
        return {**host, "_host_any": host["_any"]}
    if kernel_phase is None:
        from dnnprof.analysis.attribution import attribute

        kernel_phase = attribute(p, "kernels").phase
    return {**_gpu_phase_intervals(p, rank, host, kernel_phase), "_host_any": host["_any"]}


def rank_part(p: Profile, rank: int, feats: dict[str, np.ndarray] | None = None,
              kernel_phase: np.ndarray | None = None) -> dict[str, Any]:
    """What the cross-rank reduce (:func:`reduce_parts`) needs of one rank, as JSON-ready data on ``p``'s clock.

    ``collectives``: step, index in step, arrival and end of each collective instance; ``steps``: number and start;
    ``comm_ns``/``overlapped_ns``: the collectives' union and the part of it the rank computed under; ``windows``:
    the phase times (``spent``) of the windows the reduce will ask for when every rank saw the same collectives
    (from the rank's previous synchronisation point to each arrival), so it need not come back to the trace;
    ``modules``: the rank's module ranges, for the late layer. Its size grows with collectives, steps and module
    calls, never with kernels or ops.
    """
    s, e, _ = collective_spans(p, rank)
    on_gpu = bool((p.tables["kernels"]["rank"] == rank).any())
    kernel_start = s  # the collectives' own time (comm, overlap) is their kernels'; arrivals are when ready
    arrived = collective_arrivals(p, rank)
    if arrived is not None and arrived.size == s.size:
        s = arrived
    numbers, ss, se = _steps(p, rank, on_gpu)
    # The step is the kernel's (its start, as the collectives table counts), whatever its arrival: a collective
    # that is its step's first GPU work was ready before the step's GPU window began.
    idx = np.searchsorted(ss, kernel_start, side="right") - 1
    ok = ((idx >= 0) & (kernel_start < se[np.clip(idx, 0, None)])) if ss.size else np.zeros(s.size, dtype=bool)
    step = np.where(ok, numbers[np.clip(idx, 0, None)] if ss.size else -1, -1)
    index = np.zeros(step.size, dtype=np.int64)
    seen: Counter[int] = Counter()
    for i, st in enumerate(step.tolist()):
        index[i] = seen[st]
        seen[st] += 1
    phases = rank_phases(p, rank, feats, kernel_phase)
    ms, me = merge(kernel_start, e)
    cs, ce = _compute(p, rank, phases["_host_any"])
    comm = int((me - ms).sum())
    over = int(covered_per_window(cs, ce, ms, me).sum()) if ms.size and cs.size else 0
    starts = dict(zip(numbers.tolist(), ss.tolist(), strict=False))
    windows = []
    prev_end: int | None = None
    for st in sorted(set(step.tolist()) - {-1}):
        sel = step == st
        lo = prev_end if prev_end is not None else starts.get(st)
        for hi in s[sel].tolist():
            w = (hi if lo is None else lo, hi)
            windows.append([*w, spent_in(phases, *w)])
        prev_end = int(e[sel].max())
    return {"rank": int(rank), "shift_ns": 0,
            "collectives": {"step": step.tolist(), "index": index.tolist(), "arrival_ns": s.tolist(),
                            "end_ns": e.tolist()},
            "steps": {"number": numbers.tolist(), "start_ns": ss.tolist()},
            "comm_ns": comm, "overlapped_ns": over, "windows": windows, "modules": _layer_rows(p, rank)}


def critical_path(p: Profile) -> dict[str, Any] | None:
    """The cross-rank analysis of a profile of several ranks (see the module docstring); None with fewer than two
    ranks or no collective seen on every rank."""
    ranks = p.ranks
    if len(ranks) < 2:
        return None
    from dnnprof.analysis.attribution import attribute

    feats = _op_features(p)
    on_gpu = p.tables["kernels"]["rank"].size > 0
    kernel_phase = attribute(p, "kernels").phase if on_gpu else None
    parts = {r: rank_part(p, r, feats, kernel_phase) for r in ranks}
    return reduce_parts(parts, lambda r, ws: [spent_in(rank_phases(p, r, feats, kernel_phase), lo, hi)
                                              for lo, hi in ws])


SpentOf = Callable[[int, list[tuple[int, int]]], list[dict[str, int]]]


def reduce_parts(parts: dict[int, dict[str, Any]], spent_of: SpentOf) -> dict[str, Any] | None:
    """:func:`critical_path` from every rank's :func:`rank_part` (each with its ``shift_ns`` onto the common clock).

    ``spent_of(rank, windows)``: the phase times of windows (on that rank's own clock) its part did not foresee —
    only when the ranks did not all see the same collectives; it goes back to that one rank's profile.
    """
    ranks = sorted(parts)
    if len(ranks) < 2:
        return None
    per: dict[int, dict[str, Any]] = {}
    for r in ranks:
        c, sh = parts[r]["collectives"], int(parts[r]["shift_ns"])
        keys = {(st, i): j for j, (st, i) in enumerate(zip(c["step"], c["index"], strict=True))}
        per[r] = {"keys": keys, "s": [a + sh for a in c["arrival_ns"]], "e": [b + sh for b in c["end_ns"]],
                  "steps": {n: st + sh for n, st in zip(parts[r]["steps"]["number"], parts[r]["steps"]["start_ns"],
                                                         strict=True)},
                  "windows": {(lo + sh, hi + sh): d for lo, hi, d in parts[r]["windows"]}}
    common = set.intersection(*(set(v["keys"]) for v in per.values()))
    common = {k for k in common if k[0] >= 0}
    if not common:
        return None
    instances = []
    for key in sorted(common):
        arr = {r: int(per[r]["s"][per[r]["keys"][key]]) for r in ranks}
        end = {r: int(per[r]["e"][per[r]["keys"][key]]) for r in ranks}
        last = max(arr, key=lambda r: arr[r])
        instances.append({"step": key[0], "index": key[1], "arrival_ns": arr, "end_ns": end, "last_rank": last,
                          "wait_ns": {r: arr[last] - arr[r] for r in ranks}})
    by_step: dict[int, list[dict[str, Any]]] = {}
    for inst in instances:
        by_step.setdefault(inst["step"], []).append(inst)
    worst_of: dict[int, dict[str, Any]] = {}
    windows: dict[int, dict[int, tuple[int, int]]] = {}
    prev_end: dict[int, int] = {}
    for step in sorted(by_step):
        group = by_step[step]
        worst = worst_of[step] = max(group, key=lambda x: max(x["wait_ns"].values()))
        windows[step] = {}
        for r in ranks:
            lo = prev_end.get(r, per[r]["steps"].get(step, worst["arrival_ns"][r]))
            windows[step][r] = (lo, worst["arrival_ns"][r])
        for r in ranks:
            prev_end[r] = max(i["end_ns"][r] for i in group)
    spent: dict[tuple[int, int], dict[str, int]] = {}
    for r in ranks:
        missing = sorted({w[r] for w in windows.values()} - set(per[r]["windows"]))
        if missing:
            sh = int(parts[r]["shift_ns"])
            got = spent_of(r, [(lo - sh, hi - sh) for lo, hi in missing])
            per[r]["windows"].update(dict(zip(missing, got, strict=True)))
        for step, w in windows.items():
            spent[(step, r)] = per[r]["windows"][w[r]]
    steps_out = []
    for step in sorted(by_step):
        worst = worst_of[step]
        late = worst["last_rank"]
        others = [r for r in ranks if r != late]
        excess = {name: spent[(step, late)][name] - float(np.median([spent[(step, o)][name] for o in others]))
                  for name in PHASES}
        phase = max(excess, key=lambda k: excess[k])
        wait_us = max(worst["wait_ns"].values()) / 1000.0
        layer = None
        if phase == "forward":  # module ranges are forward ranges: a backward delay has no layer from them
            mine = _layers(_shifted(parts[late]), *windows[step][late])
            theirs = [_layers(_shifted(parts[o]), *windows[step][o]) for o in others]
            ex = {lab: v - float(np.median([t.get(lab, 0) for t in theirs])) for lab, v in mine.items()}
            if ex and max(ex.values()) > 0:
                top = max(ex.values())
                layer = _label(max((lab for lab, v in ex.items() if v >= 0.9 * top), key=_depth))
        named = wait_us >= MIN_WAIT_US
        steps_out.append({"step": step, "rank": late if named else None, "phase": phase if named else None,
                          "layer": layer if named else None, "wait_us": _r(wait_us),
                          "phase_excess_us": {k: _r(v / 1000) for k, v in excess.items()},
                          "phase_us": {str(r): {k: _r(v / 1000) for k, v in spent[(step, r)].items()}
                                       for r in ranks}})
    rows = []
    n = max(len(by_step), 1)
    for r in ranks:
        comm, over = parts[r]["comm_ns"], parts[r]["overlapped_ns"]
        rows.append({"rank": r, "collectives": len(per[r]["keys"]),
                     "wait_us_per_step": _r(_wait_per_step_ns(instances, r) / 1000 / n),
                     "comm_us_per_step": _r(comm / 1000 / n), "overlapped_comm_us_per_step": _r(over / 1000 / n),
                     "exposed_comm_us_per_step": _r((comm - over) / 1000 / n),
                     "last_arrivals": sum(1 for i in instances if i["last_rank"] == r and max(i["wait_ns"].values())
                                          >= MIN_WAIT_US * 1000)})
    named_steps = Counter((x["rank"], x["phase"]) for x in steps_out if x["rank"] is not None)
    verdict = None
    if named_steps:
        (rank, phase), count = named_steps.most_common(1)[0]
        mine_steps = [x for x in steps_out if x["rank"] == rank and x["phase"] == phase]
        layers = Counter(x["layer"] for x in mine_steps if x["layer"])
        verdict = {"rank": rank, "phase": phase, "layer": layers.most_common(1)[0][0] if layers else None,
                   "steps": count, "of_steps": len(steps_out),
                   "wait_us_per_step": _r(float(np.median([x["wait_us"] for x in mine_steps]))),
                   "excess_us_per_step": _r(float(np.median([x["phase_excess_us"][phase] for x in mine_steps]))),
                   "phase_excess_us_per_step": {k: _r(float(np.median([x["phase_excess_us"][k] for x in mine_steps])))
                                                for k in PHASES}}
    return {"matched_by": "step_and_order", "instances": len(instances), "per_rank": rows, "steps": steps_out,
            "verdict": verdict}


def _wait_per_step_ns(instances: list[dict[str, Any]], rank: int) -> int:
    """The time a rank waited for others, in ns, summed over steps: per step its longest wait in one instance.
    Waits of collectives in flight together overlap (DDP's buckets: a rank ready for every bucket early waits for
    all of them at once, computing meanwhile), so neither their sum nor their union is time the rank lost."""
    worst: dict[int, int] = {}
    for i in instances:
        worst[i["step"]] = max(worst.get(i["step"], 0), int(i["wait_ns"][rank]))
    return sum(worst.values())


def _shifted(part: dict[str, Any]) -> dict[str, list[Any]]:
    """A part's module ranges on the common clock."""
    sh = int(part["shift_ns"])
    m = part["modules"]
    return {"label": m["label"], "start_ns": [s + sh for s in m["start_ns"]], "end_ns": [e + sh for e in m["end_ns"]]}
