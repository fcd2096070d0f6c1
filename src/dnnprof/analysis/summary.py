"""The ``dnnprof.summary/1`` document: everything ``dnnprof analyze`` reports, as plain JSON-ready data.

The keys listed in docs/summary-json.md are a public contract: later versions add keys, never rename them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnprof.analysis.attribution import PHASES, Attribution, attribute
from dnnprof.analysis.beside import Beside
from dnnprof.analysis.checks import Check, profile_checks
from dnnprof.analysis.collectives import collectives_across
from dnnprof.analysis.critical_path import critical_path
from dnnprof.analysis.host_ops import host_ops
from dnnprof.analysis.kernel_summary import KernelRow, group_by_codes, kernel_summary
from dnnprof.analysis.occupancy import kernel_occupancy
from dnnprof.analysis.ranks import rank_overview
from dnnprof.analysis.serving import serving_loop
from dnnprof.analysis.steps import step_source, with_steps
from dnnprof.analysis.utilization import Utilization, primary_device, utilization
from dnnprof.model.device import DeviceInfo
from dnnprof.model.mapped_columns import release_pages
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, DEVICE_TYPES, MEMCPY_KINDS, MEMORY_KINDS

SCHEMA = "dnnprof.summary/1"
#: Host ops listed in the summary (by self time); the saved profile keeps all of them.
HOST_OPS_IN_SUMMARY = 50
#: Allocations listed in the summary's ``memory_events`` (largest first); the saved profile keeps all of them.
LARGEST_ALLOCATIONS = 10
#: Rows of ops, runtime calls and GPU activities up to which parts of the analysis run in two threads: the GPU's
#: busy time beside the attribution (:func:`analyse`); the checks that need no summary and the rules' timeline
#: beside the summary (``runs.report``). Each thread's working columns add to the other's: at 907 MB of DeepSpeech
#: (2.6 M rows) 157 → ~172 MB; at 10 GB (28 M) all at once peaked at 1,065 MB instead of 857, so beyond this the
#: parts run one after the other.
SIDE_BY_SIDE_MAX_ROWS = 4_000_000


@dataclass
class Analysis:
    """The intermediate results behind a summary, for callers (rules, renderers) that need more than JSON."""

    profile: Profile
    attribution: Attribution
    kernels: list[KernelRow]
    utilization: Utilization
    rank: int


def analyse(profile: Profile, rank: int = 0) -> Analysis:
    """Steps (inferred when missing), attribution, kernel summary and utilisation of one rank."""
    # A big trace's tables are mapped files (model.mapped_columns): each stage's pages are given back after it,
    # so the resident set holds what one stage reads, not every table.
    profile = with_steps(profile, rank)
    release_pages()
    device = primary_device(profile, rank)
    if side_by_side(profile):
        # The GPU's busy time beside the attribution and the occupancy (numpy lets go of the interpreter as it sorts
        # and gathers: the two threads share the cores).
        with Beside(utilization, profile, rank, device) as util_later:
            attribution = attribute(profile)
            release_pages()
            occupancy = _occupancy(profile, device, rank)
            util = util_later()
    else:  # one after the other, the occupancy's columns made after the busy time's peak, not held through it
        attribution = attribute(profile)
        release_pages()
        util = utilization(profile, rank, device)
        release_pages()
        occupancy = _occupancy(profile, device, rank)
    release_pages()
    kernels = kernel_summary(profile, attribution, rank=rank, occupancy=occupancy)
    release_pages()
    return Analysis(profile=profile, attribution=attribution, kernels=kernels, utilization=util, rank=rank)


def side_by_side(profile: Profile) -> bool:
    """Whether the analysis runs its independent parts in two threads: unless the trace has so many rows
    (:data:`SIDE_BY_SIDE_MAX_ROWS`) that the memory of the two would add up to much more than one's peak."""
    return sum(profile.rows(t) for t in ("ops", "runtime", "kernels", "memcpy", "memset")) <= SIDE_BY_SIDE_MAX_ROWS


def _occupancy(profile: Profile, device_id: int, rank: int) -> dict[str, np.ndarray] | None:
    """The kernels' theoretical occupancy on the rank's device (``analysis.occupancy``); None where unknown."""
    device = profile.device(device_id, rank) or (profile.devices[0] if profile.devices else None)
    # The occupancy calculator holds NVIDIA's per-architecture limits: no answer for other vendors' devices.
    if device is None or device_vendor(profile, device) not in ("", "nvidia"):
        return None
    return kernel_occupancy(profile.tables["kernels"], device)


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def _num(x: float, digits: int = 2) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


def _collectives_json(u: Any, window: int) -> dict[str, Any]:
    """``collectives_only_us``/``_pct``: busy time in which only collective kernels ran (their spin while waiting
    for other ranks included); present only when the GPU ran collectives."""
    alone = u.total("collectives_only_ns")
    if not u.has_collectives:
        return {}
    return {"collectives_only_us": _us(alone), "collectives_only_pct": _num(100.0 * alone / window) if window else None}


def summarize(profile: Profile, rank: int = 0) -> dict[str, Any]:
    """The summary document of one rank of a profile (see docs/summary-json.md)."""
    return summary_of(analyse(profile, rank))


def summary_of(a: Analysis, across_ranks: dict[str, Any] | None = None,
               made_checks: Callable[[], dict[str, Check]] | None = None) -> dict[str, Any]:
    """The summary document of an analysis. ``across_ranks``: its ``ranks`` and ``critical_path`` computed
    elsewhere (``analysis.ranks.overview_of_rows``, ``analysis.critical_path.reduce_parts`` over every rank of a
    folder) when ``a`` holds one rank of several; None computes them from ``a.profile``. ``made_checks``: gives
    the :func:`~dnnprof.analysis.checks.analysis_checks` made meanwhile (in another thread), asked for last."""
    p, u, rank = a.profile, a.utilization, a.rank
    dev = p.device(u.device, rank) or (p.devices[0] if p.devices else None)
    steps = p.tables["steps"]
    ssel = steps["rank"] == rank
    host = steps["dur_ns"][ssel].astype(np.float64)
    k = p.tables["kernels"]
    mine = (k["rank"] == rank) if k["rank"].size else np.ones(k["dur_ns"].size, dtype=bool)
    kd = k["dur_ns"][mine]
    phase_of = a.attribution.phase[mine]  # attribution covers every rank
    layer_names, layer_codes = a.attribution.codes("layer")
    layer_codes = layer_codes[mine]
    tc_ns = sum(r.total_ns for r in a.kernels if r.tensor_core)
    kernel_total = sum(r.total_ns for r in a.kernels)
    window = u.total("window_ns")
    phases = group_by_codes(np.array(PHASES, dtype=object), phase_of, kd)
    phase_ns = {g.name: g.total_ns for g in phases}
    layer_rows = group_by_codes(layer_names, layer_codes, kd) if kd.size else []
    release_pages()  # a big trace's mapped columns: each part of the summary reads its own (model.mapped_columns)
    vendor = device_vendor(p, dev)
    host_side = _host_side_json(p, rank, vendor)
    release_pages()
    memcpy = _memcpy_json(p, rank)
    release_pages()
    top_ops = host_ops(p, rank)[:HOST_OPS_IN_SUMMARY]
    release_pages()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "source": dict(p.meta.get("source", {"path": "", "format": ""})),
        "rank": int(rank),
        "world_size": _world_size(p),
        "device": {
            "name": dev.name if dev else "",
            "compute_capability": dev.compute_capability if dev else "",
            # -1 (and 0) are "the trace did not say" (an MTIA trace's deviceProperties), never a count
            "sm_count": dev.sm_count if dev and dev.sm_count > 0 else None,
            "memory_bytes": dev.memory_bytes if dev and dev.memory_bytes > 0 else None,
            "vendor": vendor or None,
        },
        "steps": {
            "count": int(host.size),
            "source": step_source(p, rank),
            "durations_us": [_us(x) for x in host.tolist()],
            "mean_us": _us(host.mean()) if host.size else None,
            "median_us": _us(float(np.median(host))) if host.size else None,
            "cv_pct": _num(100.0 * host.std() / host.mean()) if host.size > 1 and host.mean() > 0 else None,
            "gpu_durations_us": [_us(s.window_ns) for s in u.steps] if not u.whole_trace else [],
        },
        "gpu": {
            "has_activity": p.has_gpu_activity,
            "device_index": u.device,
            "window_us": _us(window),
            "busy_pct": _num(u.busy_pct) if p.has_gpu_activity else None,  # no share of nothing
            "kernel_us": _us(u.total("kernel_ns")),
            "memcpy_us": _us(u.total("memcpy_ns")),
            "memset_us": _us(u.total("memset_ns")),
            "idle_us": _us(u.total("idle_ns")),
            "idle_breakdown_us": {c: _us(v) for c, v in u.idle_by_cause_ns().items()},
            # tensor cores are told from NVIDIA kernel names: not applicable to other vendors' kernels
            "tensor_core_pct": _num(100.0 * tc_ns / kernel_total) if kernel_total and vendor in ("", "nvidia")
            else None,
            **host_side,
            "window": "whole_trace" if u.whole_trace else "steps",
            "host_us": _us(u.host_ns),
            "busy_of_host_pct": None if u.busy_of_host_pct is None else float(f"{u.busy_of_host_pct:.4g}"),
            "work_negligible": u.gpu_work_negligible,
            **_collectives_json(u, window),
        },
        "attribution": {
            "level": a.attribution.level,
            "attributed_pct": _num(100.0 * float(kd[a.attribution.layered()[mine]].sum()) / kernel_total)
            if kernel_total else None,
        },
        "kernels": _with_counters(p, [_kernel_json(r) for r in a.kernels]),
        "families": _families_json(a.kernels),
        "layers": [{"name": g.name, "total_us": _us(g.total_ns), "pct": _num(g.pct), "kernel_calls": g.calls}
                   for g in layer_rows if g.name],
        "phases": {f"{ph}_us": _us(phase_ns.get(ph, 0)) for ph in PHASES},
        "memcpy": memcpy,
        "host_ops": [{"name": r.name, "calls": r.calls, "total_us": _us(r.total_ns), "self_us": _us(r.self_ns),
                      "self_pct": _num(r.self_pct)} for r in top_ops],
        "findings": [],
    }
    release_pages()
    roofline = _roofline_json(p, rank, dev)
    if roofline is not None:
        doc["roofline"] = roofline
    serving = serving_loop(p, a.attribution, rank)
    if serving is not None:  # prefill/decode iterations of an inference server or generate loop
        doc["serving"] = serving
    memory = _memory_events_json(p, rank)
    if memory is not None:
        doc["memory_events"] = memory
    release_pages()
    ranks = rank_overview(p) if across_ranks is None else across_ranks.get("ranks")
    if ranks is not None:
        doc["ranks"] = ranks
        path = critical_path(p) if across_ranks is None else across_ranks.get("critical_path")
        if path is not None:
            doc["critical_path"] = path
        colls = collectives_across(p) if across_ranks is None else across_ranks.get("collectives")
        if colls is not None:
            doc["collectives"] = colls
    doc["checks"] = [c.to_dict() for c in profile_checks(a, doc, None if made_checks is None else made_checks())]
    return doc


def device_vendor(p: Profile, dev: DeviceInfo | None) -> str:
    """``"nvidia"``, ``"amd"``, ``"meta"`` or ``""``: the device's, else what ingest read from the trace's events."""
    if dev is not None and dev.vendor:
        return dev.vendor
    metas = [p.meta, *p.meta.get("per_rank", [])]
    return next((str(m["device_vendor"]) for m in metas if m.get("device_vendor")), "")


def _host_side_json(p: Profile, rank: int, vendor: str) -> dict[str, Any]:
    """``runtime_calls``, ``launch_calls`` (the rank's CUDA/HIP runtime calls and kernel launches among them) and
    ``activity_note``: when the trace has no GPU activity records, what it holds instead, in a sentence (None when
    it has them, or when it holds nothing that would have run on a device: a CPU-only profile)."""
    rt = p.tables["runtime"]
    mine = rt["rank"] == rank if rt["rank"].size else np.ones(0, dtype=bool)
    calls = int(mine.sum())
    launches = int((mine & np.isin(rt["api_kind"], [API_KINDS.index("launch"), API_KINDS.index("graph_launch")])).sum())
    counts: dict[str, int] = {}
    for m in (p.meta, *p.meta.get("per_rank", [])):
        for c, n in (m.get("event_counts") or {}).items():
            counts[c] = counts.get(c, 0) + int(n)
    note = None
    if not p.has_gpu_activity:
        ranges = counts.get("cuda_profiler_range", 0)
        mtia = sum(n for c, n in counts.items() if c.startswith("mtia_") and c != "mtia_runtime")
        if vendor == "meta" or mtia:
            note = (f"MTIA device activity ({mtia:,} device events) is not analysed: dnnprof reads CUDA and ROCm GPU "
                    "activity; the report covers the host side only")
        elif calls:
            note = (f"GPU activity not recorded: the trace holds {calls:,} runtime calls ({launches:,} kernel launches)"
                    " but no kernel, memcpy or memset records; "
                    + (f"it was taken in CUPTI range-profiler (counter) mode ({ranges:,} cuda_profiler_range "
                       "events), which records counters instead of activities" if ranges else
                       "likely CUPTI profiler/range mode or GPU activity dropped by the profiler (activities not "
                       "enabled, or the buffer overflowed)"))
    return {"runtime_calls": calls, "launch_calls": launches, "activity_note": note}


def _world_size(p: Profile) -> int | None:
    """Processes in the job, from the trace's ``distributedInfo`` (of any rank); None when it does not say."""
    infos = [p.meta.get("distributed")] + [m.get("distributed") for m in p.meta.get("per_rank", [])]
    sizes = [d.get("world_size") for d in infos if isinstance(d, dict)]
    return next((int(n) for n in sizes if isinstance(n, int) and not isinstance(n, bool) and n > 0), None)


def _with_counters(p: Profile, kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add Nsight Compute counter fields to each kernel that has them (time-weighted over its counted launches;
    bytes and FLOPs per launch)."""
    if p.tables["counters"]["kernel_row"].size == 0:
        return kernels
    from dnnprof.analysis.bounds import aggregate_bounds
    from dnnprof.analysis.counters_join import profile_bounds

    rows, kb = profile_bounds(p)
    if not len(rows):
        return kernels
    k = p.tables["kernels"]
    names = p.names(k["name_id"][rows])
    groups = {g.key: g for g in aggregate_bounds(kb, names, weights_ns=k["dur_ns"][rows].astype(np.float64))}
    for kj in kernels:
        g = groups.get(kj["name"])
        if g is None:
            continue
        kj.update({
            "achieved_occupancy_pct": _num(g.achieved_occupancy_pct),
            "sm_throughput_pct": _num(g.sm_throughput_pct),
            "memory_throughput_pct": _num(g.memory_throughput_pct),
            "dram_bytes": _num(g.dram_bytes / g.launches, 0) if g.launches else None,
            "flops": _num(g.flops / g.launches, 0) if g.launches else None,
            "arithmetic_intensity": _num(g.arithmetic_intensity, 3),
            "waves_per_sm": _num(g.waves_per_sm),
            "bound": g.bound or None,
            "counted_launches": g.launches,
        })
    return kernels


def _roofline_json(p: Profile, rank: int, dev: DeviceInfo | None) -> dict[str, Any] | None:
    """The ``roofline`` object when the rank's kernels have Nsight Compute counters (ceilings from ncu's peaks,
    completed from the spec sheet of the profile's GPU)."""
    if p.tables["counters"]["kernel_row"].size == 0:
        return None
    from dnnprof.analysis.roofline import profile_roofline
    from dnnprof.model.gpu_specs import lookup_gpu

    spec = lookup_gpu(dev.name, dev.memory_bytes if dev.memory_bytes > 0 else None) if dev is not None else None
    r = profile_roofline(p, rank, spec)
    return None if r is None else r.to_dict()


def _families_json(rows: list[KernelRow]) -> list[dict[str, Any]]:
    acc: dict[str, list[int]] = {}
    for r in rows:
        calls_total = acc.setdefault(r.family, [0, 0])
        calls_total[0] += r.calls
        calls_total[1] += r.total_ns
    grand = sum(v[1] for v in acc.values()) or 1
    out = [{"family": f, "calls": c, "total_us": _us(t), "pct": _num(100.0 * t / grand)} for f, (c, t) in acc.items()]
    out.sort(key=lambda r: -r["total_us"])
    return out


def _kernel_json(r: KernelRow) -> dict[str, Any]:
    return {
        "name": r.name, "short_name": r.short_name, "family": r.family, "tensor_core": r.tensor_core,
        "precision": r.precision, "calls": r.calls, "total_us": _us(r.total_ns), "pct": _num(r.pct, 3),
        "mean_us": _us(r.mean_ns), "min_us": _us(r.min_ns), "max_us": _us(r.max_ns),
        "layer": r.layer, "phase": r.phase, "source": r.source, "grid": r.grid, "block": r.block,
        "registers_per_thread": r.registers_per_thread if r.registers_per_thread >= 0 else None,
        "shared_memory_bytes": r.shared_memory_bytes if r.shared_memory_bytes >= 0 else None,
        "est_achieved_occupancy_pct": _num(r.est_achieved_occupancy_pct),
        "theoretical_occupancy_pct": _num(r.theoretical_occupancy_pct),
        "occupancy_limiters": list(r.occupancy_limiters),
    }


def _memcpy_json(p: Profile, rank: int) -> list[dict[str, Any]]:
    m = p.tables["memcpy"]
    sel = np.flatnonzero(m["rank"] == rank)
    out = []
    if sel.size == 0:
        return out
    host_mem = np.where(np.isin(m["src_mem"][sel], (2, 3)), m["src_mem"][sel], m["dst_mem"][sel])
    key = m["kind"][sel].astype(np.int64) * 16 + np.where(np.isin(host_mem, (2, 3)), host_mem, 0)
    for kv in np.unique(key).tolist():
        rows = sel[key == kv]
        kind, mem = divmod(kv, 16)
        out.append({"kind": MEMCPY_KINDS[kind], "host_memory": MEMORY_KINDS[mem] if mem else None,
                    "count": int(rows.size), "bytes": int(m["bytes"][rows].sum()),
                    "total_us": _us(float(m["dur_ns"][rows].sum()))})
    out.sort(key=lambda r: -r["total_us"])
    return out


def _device_type(code: int) -> str:
    return DEVICE_TYPES[code] if 0 <= code < len(DEVICE_TYPES) else str(code)


def _memory_events_json(p: Profile, rank: int) -> dict[str, Any] | None:
    """Allocations and frees recorded with ``profile_memory`` (a ``--full`` window): counts and byte totals, the
    peak allocator totals seen per device, the largest allocations and who made them. None without memory
    events."""
    m = p.tables["memory_events"]
    sel = np.flatnonzero(m["rank"] == rank)
    if sel.size == 0:
        return None
    b = m["bytes"][sel]

    def counts(rows: np.ndarray) -> dict[str, int]:
        x = m["bytes"][rows]
        return {"events": int(rows.size), "allocations": int((x > 0).sum()), "frees": int((x < 0).sum()),
                "allocated_bytes": int(x[x > 0].sum()), "freed_bytes": int(-x[x < 0].sum())}

    devices = []
    key = m["device_type"][sel].astype(np.int64) * 65536 + (m["device"][sel].astype(np.int64) + 1)
    for kv in np.unique(key).tolist():
        rows = sel[key == kv]
        code, dev = divmod(kv, 65536)
        devices.append({"device_type": _device_type(code), "device": dev - 1 if dev > 0 else None, **counts(rows),
                        "peak_total_allocated_bytes": int(m["total_allocated_bytes"][rows].max()),
                        "peak_total_reserved_bytes": int(m["total_reserved_bytes"][rows].max())})
    top = sel[np.argsort(-b, kind="stable")[:LARGEST_ALLOCATIONS]]
    largest = _allocations_json(p, top[m["bytes"][top] > 0])
    return {**counts(sel), "devices": devices, "largest_allocations": largest}


def _allocations_json(p: Profile, rows: np.ndarray) -> list[dict[str, Any]]:
    """Allocations: size, where, step, and who made them as kernels are attributed (the innermost op, the
    module or op-level layer, the phase, the user source line)."""
    m = p.tables["memory_events"]
    # attribute() reads a GPU-like table: give it the allocations as rows (times, sizes as weights, ops).
    view = Profile(tables={**p.tables, "kernels": {"start_ns": m["ts_ns"][rows], "dur_ns": m["bytes"][rows],
                                                   "op_row": m["op_row"][rows]}},
                   strings=list(p.strings), devices=p.devices, meta=p.meta)
    a = attribute(view)
    out = []
    for j, r in enumerate(rows.tolist()):
        step, dev = int(m["step"][r]), int(m["device"][r])
        out.append({"bytes": int(m["bytes"][r]), "device_type": _device_type(int(m["device_type"][r])),
                    "device": dev if dev >= 0 else None, "step": step if step >= 0 else None,
                    "op": a.op_name[j] or None, "layer": a.layer[j] or None, "phase": PHASES[a.phase[j]],
                    "source": (a.source[j] if a.source is not None else "") or None})
    return out
