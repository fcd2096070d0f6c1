"""Nsight Systems SQLite export (``nsys export --type sqlite``) → canonical Profile.

What is read (every table and column is looked up with ``PRAGMA table_info`` first; a missing one reads as
unknown, never as an error, except the kernel table without which there is no GPU timeline):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: kernels (name from ``demangledName``, else ``shortName``/``mangledName``, ids
  into ``StringIds``; grid, block, registers, static + dynamic shared memory, ``graphId`` when present);
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``: copies and sets, directions and memory kinds through the export's
  own ``ENUM_CUDA_MEMCPY_OPER`` / ``ENUM_CUDA_MEM_KIND`` tables when it has them (their numbering is nsys's, not
  CUPTI's), else nsys's documented numbering;
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: runtime and driver calls (nsys appends the API version, ``cudaFree_v3020``: the
  suffix is dropped so names read as CUPTI/Kineto spell them); GPU activities join their call by ``correlationId``;
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``: syncs, named as Kineto names ``cuda_sync`` events;
* ``NVTX_EVENTS``: push/pop and start/end ranges become annotation ops on their thread (PyTorch ``emit_nvtx``
  ranges, ``aten::addmm, seq = 12, …``, become ``cpu_op`` rows named by the op, with their sequence number), so
  layers come from the outermost range under a step, and a top-level range name that repeats marks the steps;
* ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE``: device name, SMs, memory, compute capability, limits;
* ``TARGET_INFO_SESSION_START_TIME``: the epoch of the session clock; ``META_DATA_EXPORT`` /
  ``EXPORT_META_DATA``: the nsys version and export schema, recorded in ``meta["source"]``.

Timestamps in an export are integer ns on the session clock, as the canonical tables keep them.
Host thread ids are the low 24 bits of nsys's ``globalTid`` (nsys's own ``stats`` scripts decode it so).
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.kineto_tables import api_kind, link_by_correlation
from dnnprof.ingest.nesting import innermost_enclosing, nest
from dnnprof.model.device import DeviceInfo
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, MEMCPY_KINDS, MEMORY_KINDS, OP_CATEGORIES, empty_table
from dnnprof.model.steps import assign_steps

#: The table without which an export has no GPU timeline (CUDA tracing was off, or nothing ran on the GPU).
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
#: Tables only Nsight Systems writes: one of them tells its export from any other SQLite database.
NSYS_MARKERS = ("StringIds", "TARGET_INFO_GPU", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", KERNEL_TABLE,
                "ThreadNames", "TARGET_INFO_SESSION_START_TIME")
#: nsys writes unsigned "none" (stream of a context sync, …) as 2**32-1.
_NONE32 = 0xFFFFFFFF
#: ``ENUM_NSYS_EVENT_TYPE`` ids of NVTX ranges when the export lacks that table (NvtxPushPopRange,
#: NvtxStartEndRange, NvtxtPushPopRange, NvtxtStartEndRange in every schema seen).
_NVTX_RANGE_TYPES = (59, 60, 70, 71)
#: nsys ``ENUM_CUDA_MEMCPY_OPER`` names → ``MEMCPY_KINDS`` (Unified copies count as their direction).
_COPY_KINDS = {"HTOD": "HtoD", "DTOH": "DtoH", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP", "HTOA": "HtoD",
               "ATOH": "DtoH", "ATOA": "DtoD", "ATOD": "DtoD", "DTOA": "DtoD", "UVM_HTOD": "HtoD",
               "UVM_DTOH": "DtoH", "UVM_DTOD": "DtoD"}
#: Fallback numbering of ``copyKind`` (nsys = CUPTI ``CUpti_ActivityMemcpyKind``).
_COPY_KIND_IDS = ("UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH", "PTOP",
                  "UVM_HTOD", "UVM_DTOH", "UVM_DTOD")
#: nsys ``ENUM_CUDA_MEM_KIND`` names → ``MEMORY_KINDS``.
_MEM_KINDS = {"PAGEABLE": "pageable", "PINNED": "pinned", "DEVICE": "device", "ARRAY": "array",
              "MANAGED": "managed", "DEVICE_STATIC": "device", "MANAGED_STATIC": "managed", "UNKNOWN": "unknown"}
#: Fallback numbering of ``srcKind``/``dstKind``/``memKind`` (nsys's, which starts at PAGEABLE, unlike CUPTI's).
_MEM_KIND_IDS = ("PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC", "UNKNOWN")
#: ``syncType`` → the name Kineto gives the ``cuda_sync`` event.
_SYNC_NAMES = ("Unknown Sync", "Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync")
_API_VERSION = re.compile(r"_v\d+$")
#: PyTorch ``emit_nvtx`` range names: ``aten::addmm, seq = 12, op_id = 5, sizes = [[2, 3]]``.
_EMIT_NVTX = re.compile(r"^(?P<op>[^,]+), (?:seq = (?P<seq>\d+)|op_id = |sizes = )")
_STEP_NUMBER = re.compile(r"#\d+$")
#: ``GPU_METRICS`` names (``nsys profile --gpu-metrics-devices``; the unit in brackets dropped) → dnnprof's sample
#: names, where the quantity is the one NVML/GPM gives under that name; any other metric keeps its own name, as
#: ``nsys:<name> [<unit>]``.
_GPU_METRIC_NAMES = {"sms active": "sm_active_pct", "sm active": "sm_active_pct",
                     "tensor active": "tensor_active_pct", "compute warps in flight": "sm_occupancy_pct",
                     "gr active": "gr_engine_active_pct", "dram read bandwidth": "dram_read_pct",
                     "dram write bandwidth": "dram_write_pct", "sm issue": "sm_issue_pct"}
_METRIC_UNIT = re.compile(r"\s*\[(?P<unit>[^\]]*)\]\s*$")


class _Db:
    """The export, read only, with its tables and columns looked up once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
            self.tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type IN "
                                                          "('table', 'view')")}
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{path}: not a readable SQLite database ({e})") from None
        self._cols: dict[str, set[str]] = {}
        #: Per canonical table, each row's process id (from ``globalPid``/``globalTid``; -1 unknown).
        self.pids: dict[str, np.ndarray] = {}

    def cols(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = ({r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
                                 if table in self.tables else set())
        return self._cols[table]

    def select(self, table: str, wanted: dict[str, str], where: str = "") -> dict[str, list[Any]]:
        """Columns of ``table`` as lists: ``wanted`` maps an output name to a column (``a|b``: the first present);
        a missing column reads as None."""
        exprs = []
        for spec in wanted.values():
            col = next((c for c in spec.split("|") if c in self.cols(table)), None)
            exprs.append(f'"{col}"' if col else "NULL")
        try:
            rows = self.con.execute(f'SELECT {", ".join(exprs)} FROM "{table}" {where}').fetchall()
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{self.path}: cannot read {table} ({e})") from None
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(wanted)
        return {k: list(v) for k, v in zip(wanted, cols, strict=True)}

    def enum(self, table: str, prefix: str) -> dict[int, str]:
        """id → name without ``prefix`` of an ``ENUM_*`` table ({} when the export has none)."""
        if not {"id", "name"} <= self.cols(table):
            return {}
        return {int(i): str(n).removeprefix(prefix) for i, n in self.con.execute(f'SELECT id, name FROM "{table}"')}


def is_nsys_export(path: Path) -> bool:
    """True when ``path`` is a SQLite database holding one of the tables only Nsight Systems writes."""
    try:
        db = _Db(path)
    except TraceError:
        return False
    return not db.tables.isdisjoint(NSYS_MARKERS)


def read_nsys_sqlite(path: str | Path, rank: int = 0) -> Profile:
    """Read an Nsight Systems SQLite export into a canonical :class:`Profile`.

    Raises:
        TraceError: not SQLite, not an nsys export, or an export without kernel activity (says what is missing).
    """
    path = Path(path)
    db = _Db(path)
    try:
        return _read(db, rank)
    finally:
        db.con.close()


def _read(db: _Db, rank: int) -> Profile:
    path = db.path
    if db.tables.isdisjoint(NSYS_MARKERS):
        raise TraceError(f"{path}: a SQLite database but not an Nsight Systems export (none of its tables: "
                         f"{', '.join(NSYS_MARKERS[:3])}, …)")
    if KERNEL_TABLE not in db.tables:
        have = sorted(t for t in db.tables if t.startswith(("CUPTI_", "NVTX_", "OSRT_")))
        raise TraceError(f"{path}: Nsight Systems export without {KERNEL_TABLE} (no CUDA kernel was traced: record "
                         f"with `nsys profile --trace=cuda,nvtx`); it holds {', '.join(have) or 'no activity table'}")
    strings = dict(db.con.execute("SELECT id, value FROM StringIds")) if {"id", "value"} <= db.cols(
        "StringIds") else {}
    profile = Profile()
    counts: Counter[str] = Counter()

    def name_ids(values: list[Any], clean: Any = None) -> np.ndarray:
        """Profile string ids of nsys name columns (StringIds ids, or text in schemas that stored text)."""
        lut: dict[Any, int] = {}
        out = np.empty(len(values), dtype=np.int32)
        for i, v in enumerate(values):
            j = lut.get(v)
            if j is None:
                s = strings.get(v, "") if isinstance(v, int) else ("" if v is None else str(v))
                s = clean(s) if clean else s
                j = lut[v] = profile.intern(s) if s else -1
            out[i] = j
        return out

    profile.tables["runtime"] = _runtime(db, profile, name_ids, rank)
    profile.tables["ops"] = _nvtx(db, profile, strings, rank)
    profile.tables["kernels"] = _kernels(db, name_ids, rank)
    profile.tables["memcpy"] = _memcpy(db, profile, rank)
    profile.tables["memset"] = _memset(db, profile, rank)
    profile.tables["syncs"] = _syncs(db, profile, rank)
    processes = _processes_as_ranks(db, profile)
    ranks = sorted(processes) if processes else [rank]
    ops, runtime = profile.tables["ops"], profile.tables["runtime"]
    nest(ops)
    runtime["op_row"][:] = innermost_enclosing(ops, runtime["tid"], runtime["start_ns"])
    # CUPTI numbers correlations per process: a call and its GPU work are matched within one rank.
    shift = {t: profile.tables[t]["rank"].astype(np.int64) << 40 for t in ("runtime", "kernels", "memcpy", "memset")}
    for t, sh in shift.items():
        profile.tables[t]["correlation"] += sh
    for table in ("kernels", "memcpy", "memset"):
        link_by_correlation(profile.tables[table], runtime)
    for t, sh in shift.items():
        profile.tables[t]["correlation"] -= sh
    for table in ("kernels", "memcpy", "memset", "syncs", "runtime", "ops"):
        counts[table] = profile.rows(table)
    profile.devices = _devices(db, rank)
    if processes:
        k = profile.tables["kernels"]
        profile.devices = [replace(d, rank=r) for r in ranks for d in profile.devices
                           if np.any((k["rank"] == r) & (k["device"] == d.id))]
    meta = _export_meta(db)
    base = _scalar(db, "TARGET_INFO_SESSION_START_TIME", "utcEpochNs")
    profile.meta.update({
        "source": {"path": str(path), "format": "nsys-sqlite", **meta},
        "base_time_ns": int(base) if isinstance(base, int) else 0,
        "distributed": {}, "ranks": ranks, "device_vendor": "nvidia",
        "event_counts": dict(sorted(counts.items())),
    })
    if processes:
        profile.meta["processes"] = {str(r): pid for r, pid in processes.items()}
        profile.meta["source"]["notes"] = [
            f"{len(processes)} processes with GPU work in one export: each is a rank, numbered by the first GPU it "
            "used (then its process id); host work of processes without GPU work is left out"]
    spans = _gpu_metrics(db, profile, rank)
    if spans:
        profile.meta["sample_spans_ns"] = spans
        profile.meta["event_counts"]["samples"] = profile.rows("samples")
        if processes:  # a GPU's samples belong to the rank that used it
            first = {}
            for d in profile.devices:
                first.setdefault(d.id, d.rank)
            sm = profile.tables["samples"]
            sm["rank"][:] = [first.get(int(dev), rank) for dev in sm["device"].tolist()]
    for r in ranks:
        _nvtx_steps(profile, r)
    return profile


def _processes_as_ranks(db: _Db, profile: Profile) -> dict[int, int]:
    """When GPU work of several processes is in the export (``nsys profile torchrun …``): {rank: pid}, every
    table's ``rank`` set and the host rows of processes without GPU work dropped (before any row link exists).
    {} for one process."""
    gpu = [db.pids.get(t, np.empty(0, dtype=np.int64)) for t in ("kernels", "memcpy", "memset")]
    pids = np.unique(np.concatenate(gpu)) if gpu else np.empty(0, dtype=np.int64)
    pids = pids[pids >= 0]
    if pids.size < 2:
        return {}
    k = profile.tables["kernels"]
    kp = db.pids.get("kernels", np.empty(0, dtype=np.int64))

    def first_device(pid: int) -> int:
        dev = k["device"][kp == pid]
        return int(dev.min()) if dev.size else 1 << 30

    order = sorted((first_device(int(p)), int(p)) for p in pids)
    rank_of = {pid: r for r, (_, pid) in enumerate(order)}
    for name in ("runtime", "ops", "kernels", "memcpy", "memset", "syncs"):
        t = profile.tables[name]
        pid = db.pids.get(name)
        if pid is None or pid.size != t["rank"].size:
            continue
        keep = np.isin(pid, list(rank_of))
        if not keep.all():
            profile.tables[name] = t = {c: v[keep] for c, v in t.items()}
            pid = pid[keep]
        t["rank"][:] = np.array([rank_of[int(x)] for x in pid.tolist()], dtype=t["rank"].dtype)
    return {r: pid for pid, r in rank_of.items()}


def _gpu_metric_name(raw: str) -> str:
    m = _METRIC_UNIT.search(raw)
    base = raw[:m.start()] if m else raw
    unit = m.group("unit") if m else ""
    known = _GPU_METRIC_NAMES.get(base.strip().lower())
    if known and "%" in unit:
        return known
    return f"nsys:{raw.strip()}"


def _gpu_metrics(db: _Db, profile: Profile, rank: int) -> dict[str, int]:
    """``GPU_METRICS`` samples (nsys ``--gpu-metrics-devices``) into ``samples``, on the export's own clock.

    Each value is the metric averaged over the sampling period that ends at its time stamp; the period (the median
    distance between a metric's samples) is returned per metric, for the checks that compare samples with the
    trace. The GPU is the low byte of ``typeId`` (one metric set per GPU); with a single GPU in the export it is
    that GPU.
    """
    if not {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= db.tables or not {"timestamp", "typeId", "metricId",
                                                                           "value"} <= db.cols("GPU_METRICS"):
        return {}
    names = {int(m): str(n) for m, n in db.con.execute(
        "SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS") if m is not None and n is not None}
    rows = db.con.execute("SELECT timestamp, typeId, metricId, value FROM GPU_METRICS WHERE timestamp >= 0 "
                          "ORDER BY metricId, typeId, timestamp").fetchall()
    if not rows or not names:
        return {}
    ts, type_id, metric, value = (np.asarray(c) for c in zip(*rows, strict=True))
    keep = np.isin(metric, list(names))
    ts, type_id, metric = ts[keep].astype(np.int64), type_id[keep].astype(np.int64), metric[keep].astype(np.int64)
    value = value[keep].astype(np.float64)
    device = (type_id & 0xFF).astype(np.int16)
    only = [d.id for d in profile.devices]
    if np.unique(device).size == 1 and len(only) == 1:
        device[:] = only[0]
    label = {m: _gpu_metric_name(n) for m, n in names.items()}
    ids = {m: profile.intern(label[m]) for m in names}
    t = empty_table("samples", ts.size)
    t["rank"][:] = rank
    t["device"][:] = device
    t["ts_ns"][:] = ts
    t["metric_id"][:] = np.array([ids[int(m)] for m in metric], dtype=np.int32)
    t["value"][:] = value
    order = np.argsort(ts, kind="stable")
    profile.tables["samples"] = {k: v[order] for k, v in t.items()}
    spans: dict[str, int] = {}
    for m in np.unique(metric):
        sel = metric == m
        d = np.diff(ts[sel])
        d = d[d > 0]
        if d.size:
            spans[label[int(m)]] = int(np.median(d))
    return spans


def _scalar(db: _Db, table: str, col: str) -> Any:
    if col not in db.cols(table):
        return None
    row = db.con.execute(f'SELECT "{col}" FROM "{table}" LIMIT 1').fetchone()
    return row[0] if row else None


def _export_meta(db: _Db) -> dict[str, str]:
    """nsys version and export schema (``META_DATA_EXPORT`` in recent exports, ``EXPORT_META_DATA`` before)."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if {"name", "value"} <= db.cols(table):
            kv = {str(k): str(v) for k, v in db.con.execute(f'SELECT name, value FROM "{table}"')}
            out = {"nsys_version": kv.get("EXPORT_PRODUCT_VERSION", ""),
                   "export_schema_version": kv.get("EXPORT_SCHEMA_VERSION", "")}
            return {k: v for k, v in out.items() if v}
    return {}


def _i64(values: list[Any], default: int = -1) -> np.ndarray:
    return np.fromiter((default if v is None else int(v) for v in values), dtype=np.int64, count=len(values))


def _pid(global_ids: np.ndarray) -> np.ndarray:
    """Process id of nsys ``globalPid``/``globalTid`` values (bits 24-47; -1 where the column was missing)."""
    return np.where(global_ids >= 0, (global_ids >> 24) & 0xFFFFFF, -1)


def _u32(values: list[Any]) -> np.ndarray:
    """Ids nsys stores unsigned, where 2**32-1 means none: -1."""
    a = _i64(values)
    return np.where(a == _NONE32, -1, a)


def _timed(table: str, cols: dict[str, list[Any]], rank: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The canonical table with rank/start/dur filled, rows ordered by start; and that order."""
    start, end = _i64(cols["start"], 0), _i64(cols["end"], 0)
    order = np.argsort(start, kind="stable")
    t = empty_table(table, order.size)
    t["rank"][:] = rank
    t["start_ns"][:] = start[order]
    t["dur_ns"][:] = np.maximum(end - start, 0)[order]
    return t, order


_GPU_COLS = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
             "correlation": "correlationId"}


def _gpu(db: _Db, table: str, out: str, extra: dict[str, str], rank: int
         ) -> tuple[dict[str, np.ndarray], dict[str, list[Any]], np.ndarray]:
    wanted = {**_GPU_COLS, **extra, "gpid": "globalPid"}
    cols = db.select(table, wanted) if table in db.tables else {k: [] for k in wanted}
    t, order = _timed(out, cols, rank)
    db.pids[out] = _pid(_i64(cols["gpid"]))[order]
    t["device"][:] = _u32(cols["device"])[order]
    t["stream"][:] = _u32(cols["stream"])[order]
    t["correlation"][:] = _i64(cols["correlation"])[order]
    return t, cols, order


def _kernels(db: _Db, name_ids: Any, rank: int) -> dict[str, np.ndarray]:
    extra = {"name": "demangledName|shortName|mangledName", "gx": "gridX", "gy": "gridY", "gz": "gridZ",
             "bx": "blockX", "by": "blockY", "bz": "blockZ", "regs": "registersPerThread",
             "smem_s": "staticSharedMemory", "smem_d": "dynamicSharedMemory", "graph": "graphId"}
    t, cols, order = _gpu(db, KERNEL_TABLE, "kernels", extra, rank)
    t["name_id"][:] = name_ids(cols["name"])[order]
    for k, c in (("gx", "grid_x"), ("gy", "grid_y"), ("gz", "grid_z"), ("bx", "block_x"), ("by", "block_y"),
                 ("bz", "block_z"), ("regs", "registers_per_thread")):
        t[c][:] = _i64(cols[k])[order]
    s, d = _i64(cols["smem_s"]), _i64(cols["smem_d"])
    t["shared_memory_bytes"][:] = np.where((s >= 0) | (d >= 0), np.maximum(s, 0) + np.maximum(d, 0), -1)[order]
    graph = _i64(cols["graph"])
    t["graph_id"][:] = np.where(graph > 0, graph, -1)[order]
    return t


def _kind_lut(db: _Db, table: str, prefix: str, fallback: tuple[str, ...], names: dict[str, str],
              labels: tuple[str, ...]) -> dict[int, int]:
    enum = db.enum(table, prefix) or dict(enumerate(fallback))
    return {i: labels.index(names.get(n, "unknown")) if names.get(n, "unknown") in labels else 0
            for i, n in enum.items()}


def _memcpy(db: _Db, profile: Profile, rank: int) -> dict[str, np.ndarray]:
    t, cols, order = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy",
                          {"bytes": "bytes", "kind": "copyKind", "src": "srcKind", "dst": "dstKind"}, rank)
    copy = _kind_lut(db, "ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_", _COPY_KIND_IDS, _COPY_KINDS, MEMCPY_KINDS)
    mem = _kind_lut(db, "ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_", _MEM_KIND_IDS, _MEM_KINDS, MEMORY_KINDS)
    kind = np.array([copy.get(v, 0) for v in _i64(cols["kind"])[order].tolist()], dtype=np.int8)
    src = np.array([mem.get(v, 0) for v in _i64(cols["src"])[order].tolist()], dtype=np.int8)
    dst = np.array([mem.get(v, 0) for v in _i64(cols["dst"])[order].tolist()], dtype=np.int8)
    t["kind"][:], t["src_mem"][:], t["dst_mem"][:] = kind, src, dst
    t["bytes"][:] = _i64(cols["bytes"], 0)[order]
    # Named as CUPTI and Kineto name copies: "Memcpy HtoD (Pageable -> Device)".
    t["name_id"][:] = [profile.intern(f"Memcpy {MEMCPY_KINDS[k]} ({MEMORY_KINDS[s].capitalize()} -> "
                                      f"{MEMORY_KINDS[d].capitalize()})") for k, s, d in zip(kind, src, dst, strict=True)]
    return t


def _memset(db: _Db, profile: Profile, rank: int) -> dict[str, np.ndarray]:
    t, cols, order = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMSET", "memset", {"bytes": "bytes", "mem": "memKind"}, rank)
    mem = _kind_lut(db, "ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_", _MEM_KIND_IDS, _MEM_KINDS, MEMORY_KINDS)
    dst = np.array([mem.get(v, 0) for v in _i64(cols["mem"])[order].tolist()], dtype=np.int8)
    t["dst_mem"][:] = dst
    t["bytes"][:] = _i64(cols["bytes"], 0)[order]
    t["name_id"][:] = [profile.intern(f"Memset ({MEMORY_KINDS[d].capitalize()})") for d in dst]
    return t


def _syncs(db: _Db, profile: Profile, rank: int) -> dict[str, np.ndarray]:
    t, cols, order = _gpu(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncs", {"type": "syncType"}, rank)
    kinds = _i64(cols["type"], 0)[order]
    t["name_id"][:] = [profile.intern(_SYNC_NAMES[k] if 0 <= k < len(_SYNC_NAMES) else _SYNC_NAMES[0])
                       for k in kinds.tolist()]
    return t


def _runtime(db: _Db, profile: Profile, name_ids: Any, rank: int) -> dict[str, np.ndarray]:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    wanted = {"start": "start", "end": "end", "tid": "globalTid", "correlation": "correlationId", "name": "nameId"}
    cols = db.select(table, wanted) if table in db.tables else {k: [] for k in wanted}
    t, order = _timed("runtime", cols, rank)
    t["tid"][:] = (_i64(cols["tid"], 0) & 0xFFFFFF)[order]
    db.pids["runtime"] = _pid(_i64(cols["tid"]))[order]
    t["correlation"][:] = _i64(cols["correlation"])[order]
    ids = name_ids(cols["name"], lambda s: _API_VERSION.sub("", s))[order]
    t["name_id"][:] = ids
    uniq, inverse = np.unique(ids, return_inverse=True)
    names = [profile.name(int(u)) for u in uniq.tolist()]
    t["api_kind"][:] = np.array([api_kind(n) for n in names], dtype=np.int8)[inverse.reshape(-1)] if names else []
    t["driver"][:] = np.array([n.startswith("cu") and not n.startswith("cuda") for n in names],
                              dtype=bool)[inverse.reshape(-1)] if names else []
    return t


def _range_types(db: _Db) -> tuple[int, ...]:
    enum = db.enum("ENUM_NSYS_EVENT_TYPE", "")
    found = tuple(i for i, n in enum.items() if n.endswith(("PushPopRange", "StartEndRange")))
    return found or _NVTX_RANGE_TYPES


def _nvtx(db: _Db, profile: Profile, strings: dict[int, str], rank: int) -> dict[str, np.ndarray]:
    """NVTX push/pop and start/end ranges as ops on the thread that opened them."""
    table = "NVTX_EVENTS"
    if not {"start", "end", "eventType"} <= db.cols(table):
        return empty_table("ops", 0)
    types = ", ".join(map(str, _range_types(db)))
    cols = db.select(table, {"start": "start", "end": "end", "text": "text", "text_id": "textId",
                             "tid": "globalTid"},
                     where=f'WHERE "eventType" IN ({types}) AND "end" IS NOT NULL AND "end" >= "start"')
    texts = [t if t is not None else strings.get(i, "") if i is not None else ""
             for t, i in zip(cols["text"], cols["text_id"], strict=True)]
    start = _i64(cols["start"], 0)
    dur = np.maximum(_i64(cols["end"], 0) - start, 0)
    order = np.lexsort((-dur, start))  # parents (longer) before children that start together
    t = empty_table("ops", order.size)
    t["rank"][:] = rank
    t["start_ns"][:], t["dur_ns"][:] = start[order], dur[order]
    t["tid"][:] = (_i64(cols["tid"], 0) & 0xFFFFFF)[order]
    db.pids["ops"] = _pid(_i64(cols["tid"]))[order]
    seen: dict[str, tuple[int, int, int]] = {}
    for row, i in enumerate(order.tolist()):
        text = texts[i]
        got = seen.get(text)
        if got is None:
            m = _EMIT_NVTX.match(text)
            if m:  # a PyTorch op range of emit_nvtx: the op, its autograd sequence number
                got = (profile.intern(m["op"].strip()), OP_CATEGORIES.index("cpu_op"),
                       int(m["seq"]) if m["seq"] else -1)
            else:
                got = (profile.intern(text) if text else -1, OP_CATEGORIES.index("user_annotation"), -1)
            seen[text] = got
        t["name_id"][row], t["category"][row], t["sequence_nr"][row] = got
    return t


def _nvtx_steps(profile: Profile, rank: int) -> None:
    """Steps from a top-level NVTX range whose name repeats (``ProfilerStep#N`` counted as one name): the name
    with the most GPU work launched inside, its ranges disjoint. Else one step from a lone wrapper range
    (:func:`_lone_window`)."""
    ops = profile.tables["ops"]
    top = np.flatnonzero((ops["depth"] == 0) & (ops["category"] == OP_CATEGORIES.index("user_annotation"))
                         & (ops["rank"] == rank))
    if top.size == 0:
        return
    groups: dict[str, list[int]] = {}
    for r in top.tolist():
        groups.setdefault(_STEP_NUMBER.sub("", profile.name(int(ops["name_id"][r]))), []).append(r)
    runtime = profile.tables["runtime"]
    gpu_work = [API_KINDS.index(k) for k in ("launch", "memcpy", "memset", "graph_launch")]
    launches = np.sort(runtime["start_ns"][np.isin(runtime["api_kind"], gpu_work) & (runtime["rank"] == rank)])
    best: tuple[int, list[int]] | None = None
    for rows in groups.values():
        if len(rows) < 2:
            continue
        s = ops["start_ns"][rows]
        e = s + ops["dur_ns"][rows]
        order = np.argsort(s)
        if np.any(s[order][1:] < e[order][:-1]):
            continue  # overlapping ranges (several threads) do not cut a timeline into iterations
        inside = int(np.sum(np.searchsorted(launches, e[order]) - np.searchsorted(launches, s[order])))
        if inside and (best is None or inside > best[0]):
            best = (inside, [rows[i] for i in order.tolist()])
    if best is None:
        best = _lone_window(ops, top, launches)
    if best is None:
        return
    rows = np.asarray(best[1])
    starts = ops["start_ns"][rows]
    assign_steps(profile, starts, starts + ops["dur_ns"][rows], "marker", name_ids=ops["name_id"][rows], rank=rank)


def _lone_window(ops: dict[str, np.ndarray], top: np.ndarray, launches: np.ndarray) -> tuple[int, list[int]] | None:
    """One run of a wrapper range (TensorRT's ``ExecutionContext::execute`` around its per-layer ranges): a
    top-level range with ranges nested in it that holds at least half of all launches is one step, so that the
    ranges inside it are the layers."""
    if launches.size == 0:
        return None
    s = ops["start_ns"][top]
    inside = np.searchsorted(launches, s + ops["dur_ns"][top]) - np.searchsorted(launches, s)
    i = int(np.argmax(inside))
    has_children = bool(np.any(ops["parent_row"] == top[i]))
    return (int(inside[i]), [int(top[i])]) if has_children and 2 * inside[i] >= launches.size else None


def _devices(db: _Db, rank: int) -> list[DeviceInfo]:
    """Devices from ``TARGET_INFO_GPU`` (every nsys schema seen), completed by ``TARGET_INFO_CUDA_DEVICE``."""
    out: dict[int, dict[str, Any]] = {}
    gpu = {"id": "cuDevice|id", "row_id": "id", "name": "name", "compute_major": "computeMajor", "compute_minor": "computeMinor",
           "sm_count": "smCount", "memory_bytes": "totalMemory", "max_threads_per_block": "maxThreadsPerBlock",
           "regs_per_block": "maxRegistersPerBlock", "regs_per_sm": "maxRegistersPerSm",
           "warp_size": "threadsPerWarp", "shared_memory_per_block_bytes": "maxShmemPerBlock",
           "shared_memory_per_block_optin_bytes": "maxShmemPerBlockOptin",
           "shared_memory_per_sm_bytes": "maxShmemPerSm", "warps_per_sm": "maxWarpsPerSm"}
    cuda = {"id": "cudaId", "name": "name", "compute_major": "computeMajor", "compute_minor": "computeMinor",
            "sm_count": "numMultiprocessors", "memory_bytes": "totalGlobalMem",
            "max_threads_per_block": "maxThreadsPerBlock", "warp_size": "warpSize"}
    for table, wanted in (("TARGET_INFO_GPU", gpu), ("TARGET_INFO_CUDA_DEVICE", cuda)):
        if table not in db.tables or "id" not in {k for k, v in wanted.items()
                                                  if any(c in db.cols(table) for c in v.split("|"))}:
            continue
        cols = db.select(table, wanted)
        for i in range(len(cols["id"])):
            # cuDevice is NULL in some exports: the row's own device id then
            dev_id = cols["id"][i] if cols["id"][i] is not None else (cols.get("row_id") or [None] * (i + 1))[i]
            if dev_id is None:
                continue
            dev = out.setdefault(int(dev_id), {})
            for k in wanted:
                v = cols[k][i]
                if k not in ("id", "row_id") and v is not None and v != "" and k not in dev:
                    dev[k] = v
    devices = []
    for dev_id, d in sorted(out.items()):
        warps = d.pop("warps_per_sm", None)
        warp = int(d.get("warp_size", 32))
        if warps is not None:
            d["max_threads_per_sm"] = int(warps) * warp
        kw = {k: (str(v) if k == "name" else int(v)) for k, v in d.items()}
        devices.append(DeviceInfo(id=dev_id, rank=rank, vendor="nvidia", **kw))
    return devices
