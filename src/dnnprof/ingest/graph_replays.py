"""CUDA-graph replays → the ``nn.Module`` layers their kernels were captured from, from the compile-time records of
``collect.compiled`` (``compiled_kernels.json``).

A replay is one ``cudaGraphLaunch``: every kernel, memset and copy it runs shares that call's correlation id, so
the launching op is the same for all of them (the compiled-region wrapper) and attribution by op stops there.
Kineto (PyTorch 2.11) records no graph or node id on them, and ``torch.compile(mode="reduce-overhead")`` captures
its graphs while warming up, before a profiled window opens. What ties a replayed kernel to its layer is the
order: a graph captured from one stream replays its kernels in the order the compiled graph's wrapper launched
them, which is the order Inductor generated them in, and the records keep that order.

So a replay's GPU work, in start order, is aligned with the records of the graph it ran (the recorded graph that
shares most generated kernel names with it, same direction as the launching op first; none in common:
not a compiled graph, left alone). Generated kernels
(``triton_*``) are anchors: each takes the next record of its name. Between two anchors, the other GPU work
(cuBLAS GEMMs, attention kernels, their memsets) belongs to the graph's extern calls between the two records
(``extern_kernels.mm`` …): one item per call takes that call's layer; otherwise the calls' common layer (exact when
there is one call; a layer they share when one call launched several kernels). Work with no extern call between
its anchors takes the common layer of the records around it. The layer goes into the GPU row's ``module_id``,
which ``analysis.attribution`` prefers to the launching op's.

Replays of one graph run the same sequence, so each distinct sequence is aligned once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from dnnprof.ingest.compiled import ROOT_LABEL, layer_label, runtime_name
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS

GPU_TABLES = ("kernels", "memset", "memcpy")
_BACKWARD_MARKS = ("CompiledFunctionBackward", "autograd::engine::evaluate_function")
#: Distinct replayed kernel sequences looked for among the eager kernels (a bound on the work for odd traces).
MAX_SEQUENCES = 64
#: Fewest kernels a replay must run to be matched to an eager run of the same kernels.
MIN_SEQUENCE = 3


def apply_graph_replays(profile: Profile, doc: dict[str, Any]) -> dict[str, Any]:
    """Give the GPU work of the profile's CUDA-graph replays the layers of the records they ran; returns counts
    (also in ``profile.meta["compiled"]["graph_replays"]``)."""
    info: dict[str, Any] = {"replays": 0, "items": 0, "exact": 0, "shared": 0, "unmatched": 0}
    kernels = doc.get("kernels") or []
    rt = profile.tables["runtime"]
    launches = np.flatnonzero(rt["api_kind"] == API_KINDS.index("graph_launch"))
    if not kernels or launches.size == 0:
        return _store(profile, info)
    roots = doc.get("roots") or []
    root = roots[0] if len(roots) == 1 else ROOT_LABEL
    graphs = {int(g["index"]): g for g in doc.get("graphs") or []}
    order: dict[int, list[int]] = defaultdict(list)  # graph -> its records in call order
    for i, k in enumerate(kernels):
        order[int(k["graph"])].append(i)
    generated = {g: {runtime_name(kernels[i]) for i in ix if not kernels[i].get("extern")} for g, ix in order.items()}

    key_of_launch = _keys(rt["rank"][launches], rt["correlation"][launches])
    backward_launch = dict(zip(key_of_launch.tolist(), _under_backward(profile, rt["op_row"][launches]), strict=True))
    parts = []
    for ti, table in enumerate(GPU_TABLES):
        t = profile.tables[table]
        keys = _keys(t["rank"], t["correlation"])
        rows = np.flatnonzero(np.isin(keys, key_of_launch) & (t["correlation"] > 0))
        parts.append((np.full(rows.size, ti), rows, keys[rows], t["start_ns"][rows], t["name_id"][rows]))
    tab, rows, keys, start, name_id = (np.concatenate(x) for x in zip(*parts, strict=True))
    if rows.size == 0:
        return _store(profile, info)
    by = np.lexsort((start, keys))
    tab, rows, keys, name_id = tab[by], rows[by], keys[by], name_id[by]
    bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    cache: dict[tuple[Any, ...], tuple[list[int], list[str]]] = {}  # name sequence -> layer ids, how found
    label_ids = {t: profile.tables[t]["module_id"] for t in GPU_TABLES}
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):  # one per replay
        backward = backward_launch.get(int(keys[a]), False)
        sig = (backward, *name_id[a:b].tolist())
        if sig not in cache:
            names = profile.names(name_id[a:b]).tolist()
            labels, kinds = _align(names, kernels, graphs, order, generated, backward, root)
            cache[sig] = ([profile.intern(x) if x else -1 for x in labels], kinds)
        ids, kinds = cache[sig]
        info["replays"] += 1
        info["items"] += b - a
        for kind in ("exact", "shared", "unmatched"):
            info[kind] += kinds.count(kind)
        for j, (t, r) in enumerate(zip(tab[a:b].tolist(), rows[a:b].tolist(), strict=True)):
            if ids[j] >= 0:
                label_ids[GPU_TABLES[t]][r] = ids[j]
    return _store(profile, info)


def _align(names: list[str], kernels: list[dict[str, Any]], graphs: dict[int, dict[str, Any]],
           order: dict[int, list[int]], generated: dict[int, set[str]], backward: bool,
           root: str) -> tuple[list[str | None], list[str]]:
    """Per item of one replay (names in start order): its layer (None when none) and how it was found (``exact``,
    ``shared`` or ``unmatched``)."""
    present = set(names)
    best, best_key = None, (0, -1)
    for g, gi in graphs.items():
        key = (len(present & generated.get(g, set())), int(bool(gi.get("backward")) == backward))
        if key[0] and key > best_key:
            best, best_key = g, key
    n = len(names)
    if best is None:  # no generated kernel in common: not a compiled graph's replay (a hand-captured one)
        return [None] * n, ["unmatched"] * n
    recs = order[best]
    labels: list[str | None] = [None] * n
    kinds = ["unmatched"] * n
    pending: list[int] = []
    p = 0  # next record position

    def stacks(ix: list[int]) -> list[list[list[str]]]:
        return [s for i in ix for s in kernels[i].get("module_stacks") or []] or [[]]

    def flush(upto: int, anchor: int | None) -> None:
        if not pending:
            return
        ext = [recs[q] for q in range(p, upto) if kernels[recs[q]].get("extern")]
        if len(ext) == len(pending):
            for j, i in zip(pending, ext, strict=True):
                labels[j], kinds[j] = layer_label(stacks([i]), root)[0], "exact"
        else:
            near = ext or [recs[q] for q in (p - 1, anchor) if q is not None and 0 <= q < len(recs)]
            lab = layer_label(stacks(near), root)[0] if near else None
            for j in pending:
                labels[j], kinds[j] = lab, ("exact" if len(ext) == 1 else "shared") if lab else "unmatched"
        pending.clear()

    gen = generated.get(best, set())
    for j, nm in enumerate(names):
        if nm not in gen:
            pending.append(j)
            continue
        q = next((q for q in range(p, len(recs)) if runtime_name(kernels[recs[q]]) == nm), None)
        if q is None:  # out of order: the first record of that name
            q = next(q for q in range(len(recs)) if runtime_name(kernels[recs[q]]) == nm)
            flush(p, None)
        else:
            flush(q, q)
        labels[j], kinds[j] = layer_label(stacks([recs[q]]), root)[0], "exact"
        p = q + 1
    flush(len(recs), None)
    return labels, kinds


def _keys(rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (rank.astype(np.int64) << 48) | (corr.astype(np.int64) & ((1 << 48) - 1))


def _under_backward(profile: Profile, op_rows: np.ndarray) -> list[bool]:
    ops = profile.tables["ops"]
    if ops["name_id"].size == 0:
        return [False] * op_rows.size
    names = profile.names(ops["name_id"])
    parent = ops["parent_row"]
    out = []
    for r in op_rows.tolist():
        hit = False
        while r >= 0 and not hit:
            hit = any(m in str(names[r]) for m in _BACKWARD_MARKS)
            r = int(parent[r])
        out.append(hit)
    return out


def _store(profile: Profile, info: dict[str, Any]) -> dict[str, Any]:
    profile.meta.setdefault("compiled", {})["graph_replays"] = info
    return info


def match_captured_replays(profile: Profile) -> dict[str, int]:
    """Replays of a graph captured by hand (``torch.cuda.graph``), whose kernels the same code also launched eagerly
    inside the trace (the warm-up a capture needs, an eager prefill of the same layers): each replayed kernel takes
    the launching op of the eager kernel at the same place of the same sequence, so its layer, phase, op and source
    line are the ones it was captured from. A replay's kernel names in start order (at least ``MIN_SEQUENCE``) must
    occur as one unbroken run among the other kernels of one stream (the run that starts latest); a replay with no
    such run keeps no op. Counts are kept in ``profile.meta["graph_replays_eager"]`` when any replay was looked at."""
    info = {"replays": 0, "matched": 0, "kernels": 0}
    rt = profile.tables["runtime"]
    k = profile.tables["kernels"]
    launches = np.flatnonzero(rt["api_kind"] == API_KINDS.index("graph_launch"))
    if launches.size == 0 or k["start_ns"].size == 0:
        return info
    key_of_launch = _keys(rt["rank"][launches], rt["correlation"][launches])
    keys = _keys(k["rank"], k["correlation"])
    replayed = np.isin(keys, key_of_launch) & (k["correlation"] > 0)
    target = np.flatnonzero(replayed & (k["op_row"] < 0))
    eager = np.flatnonzero(~replayed & (k["op_row"] >= 0))
    if target.size == 0 or eager.size == 0:
        return info
    eager = eager[np.lexsort((k["start_ns"][eager], k["stream"][eager], k["rank"][eager]))]
    e_names = k["name_id"][eager].astype(np.int64)
    e_group = (k["rank"][eager].astype(np.int64) << 32) | (k["stream"][eager].astype(np.int64) & 0xFFFFFFFF)
    e_start = k["start_ns"][eager]
    target = target[np.lexsort((k["start_ns"][target], keys[target]))]
    bounds = np.flatnonzero(np.r_[True, keys[target][1:] != keys[target][:-1], True])
    found: dict[tuple[int, ...], np.ndarray | None] = {}
    op_row = k["op_row"]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        rows = target[a:b]
        sig = tuple(k["name_id"][rows].astype(np.int64).tolist())
        if sig not in found:  # each distinct sequence is looked for once, and at most MAX_SEQUENCES of them
            found[sig] = _latest_run(e_names, e_group, e_start, np.asarray(sig, dtype=np.int64)) \
                if len(found) < MAX_SEQUENCES else None
        info["replays"] += 1
        at = found[sig]
        if at is not None:
            op_row[rows] = op_row[eager[at]]
            info["matched"] += 1
            info["kernels"] += rows.size
    profile.meta["graph_replays_eager"] = info
    return info


def _latest_run(names: np.ndarray, group: np.ndarray, start: np.ndarray, sig: np.ndarray) -> np.ndarray | None:
    """Positions of the unbroken run of ``sig`` in ``names`` (within one ``group``) that starts latest in ``start``,
    or None. Sequences shorter than ``MIN_SEQUENCE`` are not looked for: a lone fill kernel names no op."""
    n = sig.size
    if n < MIN_SEQUENCE or names.size < n:
        return None
    cand = np.flatnonzero(names[: names.size - n + 1] == sig[0])
    cand = cand[(names[cand + n - 1] == sig[-1]) & (group[cand] == group[cand + n - 1])]
    for j in range(1, n - 1):  # narrowed one position at a time, all candidates at once
        if cand.size == 0:
            return None
        cand = cand[names[cand + j] == sig[j]]
    if cand.size == 0:
        return None
    s = int(cand[np.argmax(start[cand])])
    return np.arange(s, s + n)
