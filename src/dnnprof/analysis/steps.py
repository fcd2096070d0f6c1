"""Iterations: take the trace's markers, else find them from optimizer steps or the repeating launch pattern.

Sources, in order:
1. ``ProfilerStep#N`` ranges (``prof.step()``), already assigned at ingest;
2. ``Optimizer.step#…`` ranges that PyTorch records on every optimizer step: a step ends where one ends;
3. the kernel launch sequence repeats with a fixed period (inference loops without markers): the period is found
   from a launch that occurs once per period (the kernels of one CUDA-graph replay are one launch), and the phase is
   put where the GPU idles longest. When only part of the trace repeats (a decode loop's graph replays after an
   eager prefill and warm-up), the longest repeating stretch is the steps if it holds most of the GPU time; what
   comes before and after it is in no step;
4. nothing: the whole trace is one window and the report says how to mark steps.
"""

from __future__ import annotations

import copy

import numpy as np

from dnnprof.model.profile import Profile
from dnnprof.model.schema import OP_CATEGORIES, STEP_SOURCES
from dnnprof.model.steps import assign_steps

#: Fewest repetitions of the launch pattern before it is believed.
MIN_PATTERN_REPEATS = 3
#: Share of kernel positions that must repeat exactly one period later.
MIN_PATTERN_MATCH = 0.9
#: Share of the kernel time a repeating stretch must hold to stand for the steps of a trace that repeats only in part.
MIN_STRETCH_TIME = 0.5


def step_source(profile: Profile, rank: int = 0) -> str:
    """How the rank's steps were found ("" when it has none)."""
    steps = profile.tables["steps"]
    src = steps["source"][steps["rank"] == rank]
    return STEP_SOURCES[int(src[0])] if src.size else ""


def with_steps(profile: Profile, rank: int = 0) -> Profile:
    """The profile itself when the rank has steps; else a copy with the rank's steps inferred (optimizer or launch
    pattern; other ranks keep theirs). A rank whose only step is the whole trace (``dnnprof run`` found no
    iterations and profiled the run as one window) counts as having none: a decode loop's graph replays are its
    iterations."""
    st = profile.tables["steps"]
    mine = st["rank"] == rank
    if mine.any() and not (st["source"][mine] == STEP_SOURCES.index("whole_trace")).all():
        return profile
    windows = _optimizer_windows(profile, rank)
    source = "optimizer"
    if windows is None:
        windows = _pattern_windows(profile, rank)
        source = "pattern"
    if windows is None:
        return profile
    out = copy.copy(profile)
    out.tables = {name: dict(t) for name, t in profile.tables.items()}
    for t in out.tables.values():
        if "step" in t:
            t["step"] = t["step"].copy()
    assign_steps(out, windows[0], windows[1], source, rank=rank)
    return out


def _optimizer_windows(profile: Profile, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
    ops = profile.tables["ops"]
    sel = np.flatnonzero((ops["rank"] == rank) & (ops["category"] == OP_CATEGORIES.index("user_annotation")))
    if sel.size == 0:
        return None
    opt = sel[profile.names_where(ops["name_id"][sel], lambda s: s.startswith("Optimizer.step#"))]
    if opt.size < 2:
        return None
    ends = np.sort(ops["start_ns"][opt] + ops["dur_ns"][opt])
    # Step k spans (end of optimizer step k-1, end of optimizer step k]; the part before the first end is partial.
    return ends[:-1], ends[1:]


def _pattern_windows(profile: Profile, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Host-side windows of the repeating launch pattern, strictly increasing (every window positive), or None.

    The pattern is looked for in the sequence of launches, not of kernels: consecutive kernels that share a
    correlation id (one ``cudaGraphLaunch`` replaying a CUDA graph) are one launch, so a boundary never falls inside
    a graph replay, where every kernel has the same launch time (a decode step's graph repeats its layers' kernels
    and would otherwise give windows of 0 µs).
    """
    k = profile.tables["kernels"]
    sel = np.flatnonzero(k["rank"] == rank)
    if sel.size < 2 * MIN_PATTERN_REPEATS:
        return None
    sel = sel[np.argsort(k["start_ns"][sel], kind="stable")]
    corr = k["correlation"][sel]
    head = np.ones(sel.size, dtype=bool)  # the first kernel of each launch
    head[1:] = (corr[1:] != corr[:-1]) | (corr[1:] <= 0)
    heads = np.flatnonzero(head)
    count = np.diff(np.append(heads, sel.size))
    names = k["name_id"][sel]
    # A launch is known by its first kernel's name and its kernel count.
    _, seq = np.unique(np.stack([names[heads].astype(np.int64), count]), axis=1, return_inverse=True)
    seq = seq.ravel()
    lo, hi = 0, heads.size  # the launches that repeat: all of them, or the stretch that holds most GPU time
    period = _period(seq)
    if period is None:
        launch_ns = np.add.reduceat(k["dur_ns"][sel].astype(np.float64), heads)
        found = _periodic_stretch(seq, launch_ns, count > 1)
        if found is None:
            return None
        period, lo, hi = found
    start = k["start_ns"][sel]
    run_end = np.maximum.accumulate(start + k["dur_ns"][sel])
    gap_before = np.zeros(heads.size, dtype=np.int64)
    gap_before[1:] = np.maximum(start[heads[1:]] - run_end[heads[1:] - 1], 0)
    offset = int(np.argmax(np.bincount(np.arange(hi - lo) % period, weights=gap_before[lo:hi], minlength=period)))
    starts = np.arange(lo + offset, hi, period)
    if hi < heads.size and (hi - lo - offset) % period == 0:
        # A repeating stretch followed by other work: its last period is whole, and ends where that work starts.
        starts = np.append(starts, hi)
    firsts = sel[heads[starts]]
    # Host-side windows: from the launch of each period's first launch to the next one's. Without a launch record,
    # the GPU start moved back by the median launch-to-start delay of the others (one clock for every boundary).
    launch = k["launch_row"][firsts]
    rt = profile.tables["runtime"]["start_ns"]
    known = (launch >= 0) & (launch < rt.size)
    gpu_t = k["start_ns"][firsts]
    if known.any():
        host_t = rt[launch[known]]
        t0 = gpu_t - int(np.median(gpu_t[known] - host_t))
        t0[known] = host_t
    else:
        t0 = gpu_t.copy()
    # Strictly increasing boundaries: a boundary not after the one before it is dropped (its period joins the
    # previous window), so no window is empty or negative.
    keep = np.ones(t0.size, dtype=bool)
    keep[1:] = t0[1:] > np.maximum.accumulate(t0)[:-1]
    t0 = t0[keep]
    if t0.size < MIN_PATTERN_REPEATS:
        return None
    return t0[:-1], t0[1:]


def _periodic_stretch(seq: np.ndarray, launch_ns: np.ndarray, replay: np.ndarray) -> tuple[int, int, int] | None:
    """``(period, lo, hi)``: the longest run of launches ``seq[lo:hi]`` that repeats exactly with ``period``, at least
    ``MIN_PATTERN_REPEATS`` times, holding ``MIN_STRETCH_TIME`` of the kernel time ``launch_ns``, and whose every
    period holds a graph replay (``replay``: a launch of several kernels); else None. Without that last condition
    one iteration of an eager trace would be cut into its repeating parts (the backward of identical layers, a run
    of DDP bucket all-reduces)."""
    total = float(launch_ns.sum())
    if total <= 0:
        return None
    values, counts = np.unique(seq, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    best: tuple[int, int, int] | None = None
    tried: set[int] = set()
    for v in values[order][counts[order] >= MIN_PATTERN_REPEATS][:20]:
        diffs = np.diff(np.flatnonzero(seq == v))
        if diffs.size == 0:
            continue
        p = int(np.bincount(diffs).argmax())  # the commonest gap: the period inside the stretch
        if p <= 0 or p in tried or seq.size < MIN_PATTERN_REPEATS * p:
            continue
        tried.add(p)
        same = np.concatenate([[False], seq[:-p] == seq[p:], [False]])
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        if edges.size == 0:
            continue
        run_lo, run_hi = edges[0::2], edges[1::2]  # same[i] for i in [run_lo, run_hi) ⇒ seq[run_lo:run_hi + p] repeats
        longest = int(np.argmax(run_hi - run_lo))
        lo, hi = int(run_lo[longest]), int(run_hi[longest]) + p
        if (hi - lo) // p < MIN_PATTERN_REPEATS or float(launch_ns[lo:hi].sum()) < MIN_STRETCH_TIME * total:
            continue
        whole = (hi - lo) // p * p
        if not replay[lo:lo + whole].reshape(-1, p).any(axis=1).all():
            continue
        if best is None or hi - lo > best[2] - best[1]:
            best = (p, lo, hi)
    if best is None:
        return None
    p, lo, hi = best
    # The smallest period that repeats the stretch exactly (a launch seen every other iteration gives a multiple).
    part = seq[lo:hi]
    for d in range(1, p):
        if p % d == 0 and part.size // d >= MIN_PATTERN_REPEATS and bool(np.all(part[:-d] == part[d:])):
            return d, lo, hi
    return best


def _period(seq: np.ndarray) -> int | None:
    """Length of the repeating unit of a kernel-name sequence, or None."""
    n = seq.size
    values, counts = np.unique(seq, return_counts=True)
    candidates = values[(counts >= MIN_PATTERN_REPEATS)][np.argsort(counts[counts >= MIN_PATTERN_REPEATS])][:20]
    tried: set[int] = set()
    for v in candidates:
        pos = np.flatnonzero(seq == v)
        diffs = np.diff(pos)
        p = int(np.median(diffs))
        if p <= 0 or p in tried or n // p < MIN_PATTERN_REPEATS:
            continue
        tried.add(p)
        if np.mean(seq[:-p] == seq[p:]) >= MIN_PATTERN_MATCH:
            # A name that occurs every other iteration gives a multiple of the period: take the smallest divisor.
            for d in range(1, p):
                if p % d == 0 and n // d >= MIN_PATTERN_REPEATS and np.mean(seq[:-d] == seq[d:]) >= MIN_PATTERN_MATCH:
                    return d
            return p
    return None
