"""Combining per-rank profiles (one Kineto file per process of a multi-GPU run) into one Profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dnnprof.ingest.errors import TraceError
from dnnprof.model.profile import Profile

_ROW_LINKS = {"launch_row": "runtime", "op_row": "ops", "parent_row": "ops", "fwd_row": "ops",
              "kernel_row": "kernels"}


def merge_ranks(profiles: list[Profile], source: Path | None = None) -> Profile:
    """One profile holding every rank. Ranks come from each trace's ``distributedInfo``; duplicates are an error.

    Timestamps are moved onto one clock using each trace's ``base_time_ns`` (Kineto's relative-time base).
    """
    ranks = [int(p.meta.get("ranks", [0])[0]) for p in profiles]
    if len(set(ranks)) != len(ranks):
        paths = [p.meta.get("source", {}).get("path", "?") for p in profiles]
        raise TraceError(f"{source or 'traces'}: several traces claim the same rank {ranks} ({', '.join(paths)}); "
                         "pass one file, or a folder with one trace per rank")
    base = min(int(p.meta.get("base_time_ns", 0)) for p in profiles)
    out = Profile()
    merged: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in out.tables}
    offsets = dict.fromkeys(out.tables, 0)
    for p in profiles:
        remap = np.array([out.intern(s) for s in p.strings] + [-1], dtype=np.int32)
        shift = int(p.meta.get("base_time_ns", 0)) - base
        for name, t in p.tables.items():
            part = {}
            for c, v in t.items():
                if c.endswith("_id") and c not in ("external_id", "fwd_thread_id", "graph_id"):
                    v = remap[np.where(v < 0, len(p.strings), v)]
                elif c in _ROW_LINKS:
                    v = np.where(v >= 0, v + offsets[_ROW_LINKS[c]], -1).astype(v.dtype)
                elif c.endswith("_ns") and c not in ("dur_ns", "window_ns") and shift:
                    v = np.where(v >= 0, v + shift, v)
                part[c] = v
            merged[name].append(part)
        for name in out.tables:
            offsets[name] += p.rows(name)
        out.devices.extend(p.devices)
    for name, parts in merged.items():
        if parts:
            out.tables[name] = {c: np.concatenate([pt[c] for pt in parts]) for c in parts[0]}
    _sort_by_start(out)
    out.meta = {"source": {"path": str(source or ""), "format": "kineto"}, "base_time_ns": base,
                "ranks": sorted(ranks), "per_rank": [p.meta for p in profiles]}
    return out


def _sort_by_start(p: Profile) -> None:
    """Re-establish time order per table after concatenation (memory events by ``ts_ns``), remapping every row
    link."""
    perms: dict[str, np.ndarray] = {}
    for name in ("ops", "runtime", "kernels", "memcpy", "memset"):
        perms[name] = np.argsort(p.tables[name]["start_ns"], kind="stable")
    perms["memory_events"] = np.argsort(p.tables["memory_events"]["ts_ns"], kind="stable")
    inverse = {n: np.argsort(pm, kind="stable").astype(np.int32) for n, pm in perms.items()}
    for name, t in p.tables.items():
        if name in perms:
            for c in t:
                t[c] = t[c][perms[name]]
        for c, target in _ROW_LINKS.items():
            if c in t and target in inverse and t[c].size:
                v = t[c]
                t[c] = np.where(v >= 0, inverse[target][np.clip(v, 0, None)], -1).astype(v.dtype)
