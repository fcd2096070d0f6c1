"""Serving loops (LLM inference servers, generate loops): the prefill and decode iterations, and the time per
output token split into compute, communication and idle.

A serving trace has no optimizer and often no step markers; what repeats is the decode iteration, one token per
sequence, often one CUDA-graph replay. Iterations come from, in order:

1. ``record_function`` ranges named ``prefill`` / ``decode`` (``dnnprof profile gpt2 --mode generate``, and servers
   that annotate their engine steps): the name says the kind;
2. CUDA-graph replays, when they run most of the GPU time of a trace without backward or optimizer work and there
   is more than one replay per marked step: each ``cudaGraphLaunch`` is one iteration. Replays of the most common
   graph (by kernel count and first kernel) are decode; the eager GPU work just before a run of replays is a prefill
   when it takes at least ``PREFILL_MIN_RATIO`` times a decode iteration's GPU time (a prefill over the whole prompt
   is long; the glue between replays, a token copy, is short), and so is a replay of another graph that long.

Anything else (a training trace, batch inference with one forward per step) has no serving section.

Iteration time: on the GPU, from the iteration's first GPU activity to the next iteration's when a decode follows
a decode (the period of the loop, host gaps between tokens included), else to its own last GPU activity; on a trace
without GPU activity, the same on the host ranges. Time per output token is the median decode iteration time over
``tokens_per_iteration`` (one token per sequence per decode iteration); its split is the decode iterations' share of
compute (kernels, copies, memsets other than collectives), communication (collective kernels running alone) and
idle, scaled to it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from dnnprof.analysis.attribution import PHASES, Attribution
from dnnprof.analysis.intervals import covered_per_window, merge
from dnnprof.analysis.utilization import collective_mask
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, OP_CATEGORIES, STEP_SOURCES

#: An iteration not named by an annotation is a prefill when its GPU time is at least this many decode iterations'.
PREFILL_MIN_RATIO = 1.5
#: Fewest decode iterations before a trace is called a serving loop.
MIN_DECODE_ITERATIONS = 3
#: CUDA-graph replays must run at least this share of the rank's kernel time to be taken as the iterations.
GRAPH_REPLAY_MIN_SHARE = 0.5
#: ... in a trace whose backward and optimizer kernels take less than this share (inference).
TRAINING_MAX_SHARE = 0.01
#: Output tokens per sequence per decode iteration (no speculative decoding seen in a trace).
TOKENS_PER_ITERATION = 1
#: A prefill/decode annotation: the whole name or its last ``/ . :`` part, an optional ``#N`` after it.
_ANNOTATION = re.compile(r"(?:^|.*[/.:])\s*(prefill|decode)(?:\s*#\s*\d+)?\s*$", re.IGNORECASE)
_KINDS = ("prefill", "decode", "other")
_GPU_TABLES = ("kernels", "memcpy", "memset")
#: Step sources the user marked (inferred steps, from the launch pattern, are the replays themselves).
_MARKED = [STEP_SOURCES.index("profiler_step"), STEP_SOURCES.index("marker")]


def serving_loop(profile: Profile, attribution: Attribution, rank: int = 0) -> dict[str, Any] | None:
    """The ``serving`` object of the summary (see the module docstring), or None when the trace is no serving
    loop."""
    its = _annotated(profile, rank)
    source = "annotation"
    if its is None:
        its = _graph_replays(profile, attribution, rank)
        source = "graph_replay"
    if its is None:
        return None
    host_s, host_e, kind = its
    gpu = _gpu_windows(profile, rank, host_s, host_e)
    if source == "graph_replay":
        kind = _classify_replays(gpu["kernel_ns"], gpu["signature"], kind)
    if int((kind == 1).sum()) < MIN_DECODE_ITERATIONS:
        return None
    on_gpu = bool((gpu["first"] >= 0).any())
    lo, last = (gpu["first"], gpu["last"]) if on_gpu else (host_s, host_e)
    hi = last.copy()
    follows = np.zeros(kind.size, dtype=bool)
    follows[:-1] = (kind[:-1] == 1) & (kind[1:] == 1) & (lo[1:] > lo[:-1])
    hi[follows] = lo[1:][follows[:-1]]
    valid = (lo >= 0) & (hi > lo)
    dur = np.where(valid, hi - lo, 0)
    split = _split(profile, rank, lo, hi, valid) if on_gpu else None

    def group(k: int) -> dict[str, Any] | None:
        sel = (kind == k) & valid
        if not sel.any():
            return None
        d = dur[sel].astype(np.float64)
        out = {"iterations": int(sel.sum()), "median_ms": _ms(np.median(d)), "p90_ms": _ms(np.percentile(d, 90)),
               "total_ms": _ms(d.sum()),
               "kernels_per_iteration": float(np.median(gpu["kernels"][sel])) if on_gpu else None}
        if split is not None:
            out.update({f"{name}_ms": _ms(split[name][sel].sum()) for name in split})
        return out

    decode = group(1)
    if decode is None:
        return None
    tpot = decode["median_ms"] / TOKENS_PER_ITERATION
    breakdown = None
    if split is not None:
        sel = (kind == 1) & valid
        total = float(dur[sel].sum())
        breakdown = {f"{name}_ms": round(tpot * float(split[name][sel].sum()) / total, 4) if total else None
                     for name in split}
    return {
        "source": source,
        "measured_on": "gpu" if on_gpu else "host",
        "iterations": int(kind.size),
        "prefill": group(0),
        "decode": decode,
        "other_iterations": int((kind == 2).sum()),
        "tokens_per_iteration": TOKENS_PER_ITERATION,
        "time_per_output_token_ms": round(tpot, 4),
        "time_per_output_token_breakdown_ms": breakdown,
        "decode_tokens_per_s": round(1000.0 / tpot, 2) if tpot > 0 else None,
    }


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 4)


def _annotated(profile: Profile, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Host ranges of the outermost ``prefill``/``decode`` annotations, in start order, with their kind."""
    ops = profile.tables["ops"]
    sel = np.flatnonzero((ops["rank"] == rank) & (ops["category"] == OP_CATEGORIES.index("user_annotation")))
    if sel.size == 0:
        return None
    ids, inverse = np.unique(ops["name_id"][sel], return_inverse=True)
    kind_of_id = np.full(ids.size, -1, dtype=np.int8)
    for i, name in enumerate(profile.names(ids).tolist()):
        m = _ANNOTATION.match(str(name))
        if m:
            kind_of_id[i] = _KINDS.index(m.group(1).lower())
    kind = kind_of_id[inverse.ravel()]
    sel, kind = sel[kind >= 0], kind[kind >= 0]
    if sel.size == 0:
        return None
    s = ops["start_ns"][sel].astype(np.int64)
    e = s + ops["dur_ns"][sel]
    order = np.argsort(s, kind="stable")
    s, e, kind = s[order], e[order], kind[order]
    outer = np.ones(s.size, dtype=bool)  # one nested in an earlier one (a decode inside a decode) is not its own
    outer[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    return s[outer], e[outer], kind[outer]


def _graph_replays(profile: Profile, attribution: Attribution,
                   rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Host ranges of the iterations of a CUDA-graph serving loop: each ``cudaGraphLaunch`` (kind decode, refined
    by :func:`_classify_replays`) and each stretch of eager launches between replays (kind other); None when the
    trace is not one."""
    rt, k = profile.tables["runtime"], profile.tables["kernels"]
    mine = rt["rank"] == rank
    replay = np.flatnonzero(mine & (rt["api_kind"] == API_KINDS.index("graph_launch")))
    if replay.size < MIN_DECODE_ITERATIONS:
        return None
    krows = np.flatnonzero(k["rank"] == rank)
    total = float(k["dur_ns"][krows].sum())
    lr = k["launch_row"][krows]
    by_graph = (lr >= 0) & np.isin(lr, replay)
    if not total or float(k["dur_ns"][krows][by_graph].sum()) < GRAPH_REPLAY_MIN_SHARE * total:
        return None
    phase = attribution.phase[krows]
    training = np.isin(phase, [PHASES.index("backward"), PHASES.index("optimizer")])
    if float(k["dur_ns"][krows][training].sum()) >= TRAINING_MAX_SHARE * total:
        return None
    steps = profile.tables["steps"]
    marked = int(((steps["rank"] == rank) & np.isin(steps["source"], _MARKED)).sum())
    if marked and replay.size < 2 * marked:  # one replay per marked step: a batch per step, not a token loop
        return None
    launches = np.flatnonzero(mine & np.isin(rt["api_kind"], [API_KINDS.index("launch"), API_KINDS.index("memcpy"),
                                                               API_KINDS.index("memset")]))
    r_s = rt["start_ns"][replay].astype(np.int64)
    r_e = r_s + rt["dur_ns"][replay]
    order = np.argsort(r_s, kind="stable")
    r_s, r_e = r_s[order], r_e[order]
    # Eager launches between two replays (or before the first) form one stretch: from its first launch to the
    # start of the next replay.
    ls = np.sort(rt["start_ns"][launches].astype(np.int64))
    ls = ls[ls < r_s[-1]]
    slot = np.searchsorted(r_s, ls, side="right")  # the replay each launch precedes
    firsts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]]) if ls.size else np.zeros(0, dtype=np.int64)
    e_s, e_e = ls[firsts], r_s[slot[firsts]]
    e_s = np.maximum(e_s, np.where(slot[firsts] > 0, r_e[np.clip(slot[firsts] - 1, 0, None)], e_s))
    keep = e_e > e_s
    s = np.concatenate([r_s, e_s[keep]])
    e = np.concatenate([r_e, e_e[keep]])
    kind = np.concatenate([np.ones(r_s.size, dtype=np.int8), np.full(int(keep.sum()), 2, dtype=np.int8)])
    order = np.argsort(s, kind="stable")
    return s[order], e[order], kind[order]


def _classify_replays(kernel_ns: np.ndarray, signature: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Decode: replays of the most common graph signature; prefill: another replay or an eager stretch followed by
    a replay with at least ``PREFILL_MIN_RATIO`` decode iterations' GPU time; other: the rest."""
    out = kind.copy()
    replay = kind == 1
    sigs, counts = np.unique(signature[replay], return_counts=True)
    decode = replay & (signature == sigs[np.argmax(counts)])
    out[replay & ~decode] = 2
    if not decode.any():
        return out
    median = float(np.median(kernel_ns[decode]))
    before_replay = np.zeros(kind.size, dtype=bool)
    before_replay[:-1] = replay[1:]
    long = kernel_ns >= PREFILL_MIN_RATIO * median
    out[~decode & long & (replay | before_replay)] = 0
    return out


def _gpu_windows(profile: Profile, rank: int, host_s: np.ndarray, host_e: np.ndarray) -> dict[str, np.ndarray]:
    """Per iteration (host ranges sorted, disjoint): the GPU work its host range launched: first start, last end
    (-1 when none), kernel count, kernel time and a signature (kernel count and first kernel name)."""
    n = host_s.size
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    kernels = np.zeros(n, dtype=np.int64)
    kernel_ns = np.zeros(n, dtype=np.float64)
    first_name = np.full(n, -1, dtype=np.int64)
    rt_start = profile.tables["runtime"]["start_ns"]
    for table in _GPU_TABLES:
        t = profile.tables[table]
        rows = np.flatnonzero((t["rank"] == rank) & (t["launch_row"] >= 0))
        if rows.size == 0 or rt_start.size == 0:
            continue
        at = rt_start[np.clip(t["launch_row"][rows], 0, rt_start.size - 1)]
        i = np.searchsorted(host_s, at, side="right") - 1
        ok = (i >= 0) & (at < host_e[np.clip(i, 0, None)])
        rows, i = rows[ok], i[ok]
        if rows.size == 0:  # none of this table's work was launched inside an iteration
            continue
        s = t["start_ns"][rows].astype(np.int64)
        np.minimum.at(first, i, s)
        np.maximum.at(last, i, s + t["dur_ns"][rows])
        if table == "kernels":
            np.add.at(kernels, i, 1)
            np.add.at(kernel_ns, i, t["dur_ns"][rows])
            order = np.lexsort((s, i))  # each iteration's earliest kernel names it
            head = order[np.r_[True, i[order][1:] != i[order][:-1]]]
            first_name[i[head]] = t["name_id"][rows][head]
    first[last < 0] = -1
    return {"first": first, "last": last, "kernels": kernels, "kernel_ns": kernel_ns,
            "signature": kernels * (1 << 32) + first_name}


def _split(profile: Profile, rank: int, lo: np.ndarray, hi: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
    """Compute, communication (collectives alone) and idle ns of each window [lo, hi) (0 for invalid ones)."""
    s_all, e_all, s_rest, e_rest = [], [], [], []
    for table in _GPU_TABLES:
        t = profile.tables[table]
        rows = np.flatnonzero(t["rank"] == rank)
        s = t["start_ns"][rows].astype(np.int64)
        e = s + t["dur_ns"][rows]
        s_all.append(s)
        e_all.append(e)
        rest = ~collective_mask(profile, rows) if table == "kernels" else np.ones(rows.size, dtype=bool)
        s_rest.append(s[rest])
        e_rest.append(e[rest])
    lo_v, hi_v = np.where(valid, lo, 0), np.where(valid, hi, 0)
    busy = covered_per_window(*merge(np.concatenate(s_all), np.concatenate(e_all)), lo_v, hi_v)
    compute = covered_per_window(*merge(np.concatenate(s_rest), np.concatenate(e_rest)), lo_v, hi_v)
    return {"compute": compute, "communication": busy - compute, "idle": (hi_v - lo_v) - busy}
