"""Every collective instance matched across ranks: its name, process group and size, each rank's arrival, how long
each rank waited for the last one, and the transfer after it.

* **Per rank** (:func:`rank_collectives`): the spans of :func:`dnnprof.analysis.critical_path.collective_spans`
  (NCCL kernels on the rank's GPU, else the backend's host spans such as ``gloo:all_reduce``), each described by the
  ``collectives`` table where torch recorded it (name, group, bytes, ``Seq``). Where it did not (older torch, gloo),
  the name comes from the kernel or span name and the group is the trace's only process group when it has one.
  The arrival is the span's start, except on a GPU: when the kernel was ready to run (its launch and the rank's work
  before it; :func:`dnnprof.analysis.critical_path.collective_arrivals`), as the critical path takes it, since a
  collective queued behind another on its stream starts late without its rank having been late
  (``enqueue_ns`` is its launch on the host).
* **Matching** (:func:`match_collectives`): a process group runs its collectives in one order on every member, so
  an instance is (group, ``Seq``) where torch recorded it, else (group, name, k-th of that name): over the whole
  trace when every rank ran as many of them, else within each step (one rank's window caught one more). A rank's
  collective whose instance is missing on another profiled member of its group is counted in ``unmatched``.
* **Per instance:** ``wait_us`` of a rank is the last arrival minus its own (the last rank waits 0); the instance's
  ``wait_us`` is the largest; ``transfer_us`` is the median over ranks of (its end − the last arrival), the time the
  data took once everyone was there.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import numpy as np

from dnnprof.model.profile import Profile

#: Instances listed in ``top_by_wait``; kinds (name, group, size) in ``by_collective``.
TOP_INSTANCES, TOP_KINDS = 10, 20
#: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` / ``ncclKernel_AllReduce_RING_LL_Sum_float`` → ``AllReduce``.
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def _r(x: float) -> float:
    return round(float(x), 3)


def name_of_span(name: str) -> str:
    """The collective a kernel or host span runs, spelled as torch's ``Collective name`` (``allreduce``)."""
    m = _NCCL_KERNEL.match(name)
    core = m.group(1) if m else name.partition(":")[2] or name
    return core.replace("_", "").lower()


def _distributed(p: Profile, rank: int) -> dict[str, Any]:
    metas = [p.meta, *p.meta.get("per_rank", [])]
    return next((m.get("distributed") or {} for m in metas if m.get("ranks") == [rank]), {})


def _only_group(p: Profile, rank: int) -> tuple[str, str]:
    """(name, ranks) of the trace's only process group, ("", "") when it has several or says nothing."""
    groups = _distributed(p, rank).get("pg_config")
    if isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict):
        ranks = groups[0].get("ranks")
        return str(groups[0].get("pg_name", "")), json.dumps(ranks) if isinstance(ranks, list) else ""
    return "", ""


def rank_collectives(p: Profile, rank: int) -> dict[str, list[Any]]:
    """One rank's collectives in time order, JSON-ready, on ``p``'s clock (see the module docstring): ``name``,
    ``pg_name``, ``pg_ranks``, ``size_bytes`` (the larger of in and out, -1 unknown), ``seq`` (-1 unknown),
    ``step``, ``arrival_ns``, ``end_ns``, ``enqueue_ns`` (-1 unknown)."""
    from dnnprof.analysis.critical_path import COLLECTIVE_SPAN_PREFIXES, _steps
    from dnnprof.analysis.utilization import collective_mask

    k, ops, c = p.tables["kernels"], p.tables["ops"], p.tables["collectives"]
    mine = c["rank"] == rank
    rows = np.flatnonzero(k["rank"] == rank)
    rows = rows[collective_mask(p, rows)] if rows.size else rows
    on_gpu = bool(rows.size)
    arrival = None
    if on_gpu:
        from dnnprof.analysis.critical_path import collective_arrivals

        start, dur, names = k["start_ns"][rows], k["dur_ns"][rows], p.names(k["name_id"][rows])
        arrival = collective_arrivals(p, rank, rows)
        launch = k["launch_row"][rows]
        rt = p.tables["runtime"]["start_ns"]
        enqueue = np.where(launch >= 0, rt[np.clip(launch, 0, None)], -1) if rt.size else np.full(rows.size, -1)
        described = np.flatnonzero(mine & (c["kernel_row"] >= 0))
        at = dict(zip(c["kernel_row"][described].tolist(), described.tolist(), strict=True))
        meta = [at.get(r, -1) for r in rows.tolist()]
    else:
        rows = np.flatnonzero(ops["rank"] == rank)
        names = p.names(ops["name_id"][rows])
        pick = np.fromiter((str(n).startswith(COLLECTIVE_SPAN_PREFIXES) for n in names), dtype=bool, count=rows.size)
        rows, names = rows[pick], names[pick]
        srt = np.argsort(ops["start_ns"][rows], kind="stable")
        rows, names = rows[srt], names[srt]
        start, dur = ops["start_ns"][rows], ops["dur_ns"][rows]
        enqueue = np.full(rows.size, -1, dtype=np.int64)
        described = np.flatnonzero(mine & (c["op_row"] >= 0))
        described = described[np.argsort(ops["start_ns"][c["op_row"][described]], kind="stable")]
        # record_param_comms on the calling thread, the backend's span on its own: paired in order when they agree
        meta = described.tolist() if described.size == rows.size else [-1] * rows.size
    numbers, ss, se = _steps(p, rank, bool((k["rank"] == rank).any()))  # as the critical path counts steps
    idx = np.searchsorted(ss, start, side="right") - 1
    ok = (idx >= 0) & (start < se[np.clip(idx, 0, None)]) if ss.size else np.zeros(start.size, dtype=bool)
    step = np.where(ok, numbers[np.clip(idx, 0, None)] if ss.size else -1, -1)
    only_name, only_ranks = _only_group(p, rank)

    def text(col: str, i: int, default: str) -> str:
        return p.name(int(c[col][i])) if i >= 0 and c[col][i] >= 0 else default

    out: dict[str, list[Any]] = {"name": [], "pg_name": [], "pg_ranks": [], "size_bytes": [], "seq": []}
    for i, n in zip(meta, names.tolist(), strict=True):
        out["name"].append(text("name_id", i, name_of_span(str(n))))
        out["pg_name"].append(text("pg_name_id", i, only_name))
        out["pg_ranks"].append(text("pg_ranks_id", i, only_ranks))
        out["size_bytes"].append(int(max(c["in_bytes"][i], c["out_bytes"][i])) if i >= 0 else -1)
        out["seq"].append(int(c["seq"][i]) if i >= 0 else -1)
    out.update({"step": step.tolist(), "arrival_ns": (start if arrival is None else arrival).tolist(),
                "end_ns": (start + dur).tolist(),
                "enqueue_ns": np.asarray(enqueue).tolist()})
    return out


def _members(pg_ranks: str, ranks: list[int]) -> list[int]:
    """The profiled ranks of a group (every profiled rank when its ranks were not recorded)."""
    try:
        listed = json.loads(pg_ranks) if pg_ranks else None
    except ValueError:
        listed = None
    if not isinstance(listed, list):
        return ranks
    return [r for r in ranks if r in set(listed)]


def _keys(rows: dict[str, list[Any]], by_step: set[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """Each collective's instance key on this rank (see the module docstring); ``by_step``: the (group, name)
    pairs counted within steps (the others are counted over the whole trace)."""
    seen: Counter[tuple[Any, ...]] = Counter()
    out = []
    for name, pg, seq, step in zip(rows["name"], rows["pg_name"], rows["seq"], rows["step"], strict=True):
        if seq >= 0:
            out.append((pg, "seq", seq))
            continue
        key = (pg, name, step if (pg, name) in by_step else None)
        out.append((*key, seen[key]))
        seen[key] += 1
    return out


def _counted_by_step(parts: dict[int, dict[str, Any]]) -> set[tuple[str, str]]:
    """The (group, name) pairs whose count differs between the ranks that ran them: their k-th on one rank is the
    k-th on another only within a step (a rank's window may have caught one more or one less)."""
    counts: dict[tuple[str, str], set[int]] = {}
    for rows in parts.values():
        mine = Counter(zip(rows["pg_name"], rows["name"], strict=True))
        for key, n in mine.items():
            counts.setdefault(key, set()).add(n)
    return {key for key, ns in counts.items() if len(ns) > 1}


def match_collectives(parts: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The collectives of every rank (:func:`rank_collectives`, each with its ``shift_ns`` onto the common clock)
    matched into instances; None with fewer than two ranks or no instance seen on two of them."""
    ranks = sorted(parts)
    if len(ranks) < 2:
        return None
    found: dict[tuple[Any, ...], dict[int, int]] = {}
    by_step = _counted_by_step(parts)
    for r in ranks:
        for j, key in enumerate(_keys(parts[r], by_step)):
            found.setdefault(key, {})[r] = j
    instances, unmatched = [], 0
    for where in found.values():
        any_rank = next(iter(where))
        members = _members(parts[any_rank]["pg_ranks"][where[any_rank]], ranks)
        if len(members) < 2 or any(m not in where for m in members):
            unmatched += len(where)
            continue
        arr = {m: int(parts[m]["arrival_ns"][where[m]]) + int(parts[m]["shift_ns"]) for m in members}
        end = {m: int(parts[m]["end_ns"][where[m]]) + int(parts[m]["shift_ns"]) for m in members}
        last = max(members, key=lambda m: (arr[m], m))
        first = min(arr.values())
        row = parts[any_rank]
        j = where[any_rank]
        instances.append({
            "name": row["name"][j], "pg_name": row["pg_name"][j],
            "size_bytes": max(int(parts[m]["size_bytes"][where[m]]) for m in members),
            "seq": int(row["seq"][j]), "step": max(int(parts[m]["step"][where[m]]) for m in members), "first_arrival_ns": first, "last_rank": last,
            "wait_us": _r((arr[last] - first) / 1000),
            "transfer_us": _r(float(np.median([max(0, end[m] - arr[last]) for m in members])) / 1000),
            "arrival_offset_us": {str(m): _r((arr[m] - first) / 1000) for m in members},
            "wait_us_by_rank": {str(m): _r((arr[last] - arr[m]) / 1000) for m in members},
        })
    if not instances:
        return None
    instances.sort(key=lambda x: (x["first_arrival_ns"], x["pg_name"], x["name"]))
    for x in instances:
        x.pop("first_arrival_ns")
    kinds: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for x in instances:
        kinds.setdefault((x["name"], x["pg_name"], x["size_bytes"]), []).append(x)
    by_kind = []
    for (name, pg, size), xs in kinds.items():
        waits = [x["wait_us"] for x in xs]
        last = Counter(x["last_rank"] for x in xs if x["wait_us"] > 0)
        by_kind.append({"name": name, "pg_name": pg, "size_bytes": size, "count": len(xs),
                        "wait_us_total": _r(sum(waits)), "wait_us_mean": _r(sum(waits) / len(xs)),
                        "wait_us_max": _r(max(waits)),
                        "transfer_us_mean": _r(sum(x["transfer_us"] for x in xs) / len(xs)),
                        "last_rank_counts": {str(r): n for r, n in sorted(last.items())}})
    by_kind.sort(key=lambda d: (-d["wait_us_total"], d["name"], d["pg_name"], d["size_bytes"]))
    order = sorted(range(len(instances)), key=lambda i: (-instances[i]["wait_us"], i))
    seq_all = all(x["seq"] >= 0 for x in instances)
    return {"matched_by": "group_and_seq" if seq_all else "group_name_and_order", "instances": len(instances),
            "unmatched": unmatched, "wait_us_total": _r(sum(x["wait_us"] for x in instances)),
            "top_by_wait": [instances[i] for i in order[:TOP_INSTANCES]], "by_collective": by_kind[:TOP_KINDS]}


def collectives_across(p: Profile) -> dict[str, Any] | None:
    """:func:`match_collectives` of every rank of a profile that holds them all (one clock)."""
    if len(p.ranks) < 2:
        return None
    return match_collectives({r: {**rank_collectives(p, r), "shift_ns": 0} for r in p.ranks})
