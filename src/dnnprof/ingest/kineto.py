"""Kineto / torch.profiler Chrome-trace JSON → canonical Profile.

Format drift across torch 2.0–2.11 is handled here and nowhere else:
* ``ts``/``dur`` are µs floats, relative to ``baseTimeNanoseconds`` (torch ≥ 2.3) or absolute epoch µs (older);
* the kernel category is ``kernel`` or ``Kernel``; ``pid``/``tid`` may be ints or strings;
* ``distributedInfo`` may be missing (single process), as may ``deviceProperties`` (CPU-only traces);
* args appear and disappear between versions (``Record function id``, ``graph id``, ``occupancy`` …).

Decoding uses msgspec typed structs for the fields dnnprof needs (fast, small); when a field's type drifted in a
way the strict structs reject, the whole file is decoded again with lenient structs and coerced here.
"""

from __future__ import annotations

import gc
import zlib
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from dnnprof.ingest.errors import TraceError
from dnnprof.model.device import DeviceInfo
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, MEMCPY_KINDS, MEMORY_KINDS, OP_CATEGORIES, empty_table
from dnnprof.model.steps import assign_steps

_F = msgspec.field


class _Args(msgspec.Struct, gc=False):
    external_id: int | None = _F(name="External id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    registers: int | None = _F(name="registers per thread", default=None)
    shared_memory: int | None = _F(name="shared memory", default=None)
    blocks_per_sm: float | None = _F(name="blocks per SM", default=None)
    warps_per_sm: float | None = _F(name="warps per SM", default=None)
    est_occupancy: float | None = _F(name="est. achieved occupancy %", default=None)
    grid: list[int] | None = None
    block: list[int] | None = None
    bytes: int | None = None
    cbid: int | None = None
    sequence_nr: int | None = _F(name="Sequence number", default=None)
    fwd_thread_id: int | None = _F(name="Fwd thread id", default=None)
    call_stack: str | None = _F(name="Call stack", default=None)
    module_hierarchy: str | None = _F(name="Module Hierarchy", default=None)
    input_dims: Any = _F(name="Input Dims", default=None)
    graph_id: int | None = _F(name="graph id", default=None)
    name: str | None = None
    labels: str | None = None


class _LenientArgs(msgspec.Struct, gc=False):
    external_id: Any = _F(name="External id", default=None)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    registers: Any = _F(name="registers per thread", default=None)
    shared_memory: Any = _F(name="shared memory", default=None)
    blocks_per_sm: Any = _F(name="blocks per SM", default=None)
    warps_per_sm: Any = _F(name="warps per SM", default=None)
    est_occupancy: Any = _F(name="est. achieved occupancy %", default=None)
    grid: Any = None
    block: Any = None
    bytes: Any = None
    cbid: Any = None
    sequence_nr: Any = _F(name="Sequence number", default=None)
    fwd_thread_id: Any = _F(name="Fwd thread id", default=None)
    call_stack: Any = _F(name="Call stack", default=None)
    module_hierarchy: Any = _F(name="Module Hierarchy", default=None)
    input_dims: Any = _F(name="Input Dims", default=None)
    graph_id: Any = _F(name="graph id", default=None)
    name: Any = None
    labels: Any = None


#: Every ``ph`` of the Chrome trace format and every Kineto category: decoded as Literals, they are shared
#: string objects instead of one new string per event. An unknown value sends the file down the lenient path.
_Phase = Literal["X", "B", "E", "i", "I", "s", "t", "f", "M", "C", "b", "n", "e", "P", "O", "N", "D", "R", "c", ""]
_Category = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel", "Kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function", "overhead",
    "mtia_runtime", "mtia_ccp_events", "mtia_insight", "cuda_sync", "cuda_event", "mtia_counters", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "xpu_scope_profiler", "xpu_sync", "hardware_counters", "ac2g", "fwdbwd", "Trace",
    "async_cpu_to_gpu", "forward_backward", "Memset", "Memcpy", "Runtime", "Operator", "",
]


class _Event(msgspec.Struct, gc=False):
    ph: _Phase = ""
    cat: _Category = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    id: int | str | None = None
    bp: str | None = None
    args: _Args | None = None


class _LenientEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = 0.0
    dur: Any = 0.0
    id: Any = None
    bp: Any = None
    args: _LenientArgs | None = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event]
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: int | None = None
    schemaVersion: Any = None
    trace_id: Any = None
    cuda_driver_version: Any = None
    cuda_runtime_version: Any = None
    cupti_version: Any = None


class _LenientTrace(_Trace, gc=False):
    traceEvents: list[_LenientEvent]  # type: ignore[assignment]
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


# ---------------------------------------------------------------------------------------------------------------
def read_bytes(path: Path) -> bytes:
    """File contents, gunzipped when the file is gzip (by magic number, not extension)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    if raw[:2] == b"\x1f\x8b":
        # One-shot inflate (wbits 31 = gzip framing) avoids the chunk list that gzip.decompress builds.
        d = zlib.decompressobj(31)
        try:
            out = d.decompress(raw)
        except zlib.error as e:
            raise TraceError(f"{path}: corrupt gzip ({e})") from None
        if not d.eof:
            raise TraceError(f"{path}: truncated gzip (the file ends before the compressed data does)")
        return out
    return raw


def _decode(path: Path, data: bytes) -> _Trace:
    stripped = data[:4096].lstrip()
    if not stripped:
        if not data.strip():
            raise TraceError(f"{path}: empty file")
        stripped = data.lstrip()
    if stripped[:1] == b"[":  # the Chrome trace format also allows a bare array of events
        data = b'{"traceEvents":' + data + b"}"
    elif stripped[:1] != b"{":
        raise TraceError(f"{path}: not JSON (starts with {stripped[:16]!r})")
    try:
        return msgspec.json.decode(data, type=_Trace)
    except msgspec.ValidationError as strict_error:
        if "traceEvents" in str(strict_error) and "missing required field" in str(strict_error):
            raise TraceError(f"{path}: JSON but not a Chrome/Kineto trace (no 'traceEvents')") from None
        try:
            return _coerce(msgspec.json.decode(data, type=_LenientTrace))
        except msgspec.ValidationError as e:
            raise TraceError(f"{path}: JSON but not a Chrome/Kineto trace ({e})") from None
        except msgspec.DecodeError as e:
            raise TraceError(f"{path}: invalid JSON ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None


def _num(v: Any, default: float = -1) -> float:
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def _int(v: Any, default: int = -1) -> int:
    x = _num(v, default)
    return int(x) if x == x else default


def _tids(values: list[Any]) -> list[int]:
    return [v if v.__class__ is int else _tid(v) for v in values]


def _tid(v: Any) -> int:
    """Thread ids are ints, but some Kineto rows use strings ('stream 7 (sync)'): keep the first number."""
    if isinstance(v, int):
        return v
    digits = "".join(ch if ch.isdigit() else " " for ch in str(v)).split()
    return int(digits[0]) if digits else -1


def _ns(values: list[float]) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) * 1000.0).astype(np.int64)


def _memcpy_kind(name: str) -> tuple[int, int, int]:
    """(kind, src_mem, dst_mem) from a CUPTI memcpy name like 'Memcpy HtoD (Pageable -> Device)'."""
    kind = next((i for i, k in enumerate(MEMCPY_KINDS) if i and f" {k}" in name), 0)
    src = dst = 0
    if "(" in name and "->" in name:
        inner = name[name.index("(") + 1: name.rindex(")")] if ")" in name else name[name.index("(") + 1:]
        a, _, b = inner.partition("->")
        src, dst = _mem_kind(a), _mem_kind(b)
    return kind, src, dst


def _mem_kind(s: str) -> int:
    s = s.strip().lower()
    return MEMORY_KINDS.index(s) if s in MEMORY_KINDS else 0


#: Host-blocking synchronisation (cudaStreamWaitEvent is a GPU-side dependency and counts as an event call).
_SYNC_APIS = ("Synchronize",)


def _api_kind(name: str) -> int:
    if "Graph" in name and "Launch" in name:
        return API_KINDS.index("graph_launch")
    if "LaunchKernel" in name or "LaunchCooperativeKernel" in name or name.startswith("cuLaunch"):
        return API_KINDS.index("launch")
    if "Memcpy" in name:
        return API_KINDS.index("memcpy")
    if "Memset" in name:
        return API_KINDS.index("memset")
    if any(s in name for s in _SYNC_APIS):
        return API_KINDS.index("sync")
    if "Event" in name:
        return API_KINDS.index("event")
    return API_KINDS.index("other")


# ---------------------------------------------------------------------------------------------------------------
def _coerce_args(a: _LenientArgs | None) -> _Args | None:
    if a is None:
        return None
    ints = ("external_id", "correlation", "device", "stream", "registers", "shared_memory", "bytes", "cbid",
            "sequence_nr", "fwd_thread_id", "graph_id")
    floats = ("blocks_per_sm", "warps_per_sm", "est_occupancy")
    kw: dict[str, Any] = {}
    for f in ints:
        v = getattr(a, f)
        kw[f] = None if v is None else _int(v, -1)
    for f in floats:
        v = getattr(a, f)
        kw[f] = None if v is None else float(_num(v, np.nan))
    for f in ("grid", "block"):
        v = getattr(a, f)
        kw[f] = [_int(x, 1) for x in v] if isinstance(v, (list, tuple)) else None
    for f in ("call_stack", "module_hierarchy", "name", "labels"):
        v = getattr(a, f)
        kw[f] = None if v is None else str(v)
    kw["input_dims"] = a.input_dims
    return _Args(**kw)


def _coerce(trace: _LenientTrace) -> _Trace:
    """Lenient (drifted) events → strict events, coercing every field once."""
    events = [
        _Event(ph=str(e.ph), cat=str(e.cat), name=str(e.name), pid=e.pid if isinstance(e.pid, (int, str)) else 0,
               tid=e.tid if isinstance(e.tid, (int, str)) else 0, ts=float(_num(e.ts, 0)),
               dur=float(_num(e.dur, 0)), id=e.id if isinstance(e.id, (int, str)) else None,
               bp=None if e.bp is None else str(e.bp), args=_coerce_args(e.args))
        for e in trace.traceEvents
    ]
    return _Trace(traceEvents=events, deviceProperties=trace.deviceProperties if isinstance(
        trace.deviceProperties, list) else None, distributedInfo=trace.distributedInfo if isinstance(
        trace.distributedInfo, dict) else None, baseTimeNanoseconds=trace.baseTimeNanoseconds if isinstance(
        trace.baseTimeNanoseconds, int) else None, schemaVersion=trace.schemaVersion, trace_id=trace.trace_id,
        cuda_driver_version=trace.cuda_driver_version, cuda_runtime_version=trace.cuda_runtime_version,
        cupti_version=trace.cupti_version)


def _ints(values: list[Any], default: int = -1) -> np.ndarray:
    """int64 column from a list of ints/None (None → default)."""
    return np.array([default if v is None else v for v in values], dtype=np.int64)


def _floats(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.float64)


class _Builder:
    """Turns decoded (strict) events into canonical tables for one rank."""

    def __init__(self, profile: Profile, rank: int) -> None:
        self.p = profile
        self.rank = rank

    def ids(self, names: list[str]) -> np.ndarray:
        intern = self.p.intern
        cache: dict[str, int] = {}
        out = np.empty(len(names), dtype=np.int32)
        for i, n in enumerate(names):
            v = cache.get(n)
            if v is None:
                v = cache[n] = intern(n)
            out[i] = v
        return out

    def opt_ids(self, values: list[Any]) -> np.ndarray:
        intern = self.p.intern
        return np.fromiter((intern(str(v)) if v not in (None, "") else -1 for v in values),
                           dtype=np.int32, count=len(values))

    def _times(self, t: dict[str, np.ndarray], evs: list[_Event]) -> None:
        t["rank"][:] = self.rank
        t["start_ns"][:] = _ns([e.ts for e in evs])
        t["dur_ns"][:] = np.maximum(_ns([e.dur for e in evs]), 0)

    def ops(self, evs: list[_Event]) -> dict[str, np.ndarray]:
        evs.sort(key=lambda e: (e.ts, -e.dur))
        t = empty_table("ops", len(evs))
        self._times(t, evs)
        t["tid"][:] = _tids([e.tid for e in evs])
        t["name_id"][:] = self.ids([e.name for e in evs])
        cats = {c: i for i, c in enumerate(OP_CATEGORIES)}
        t["category"][:] = [cats[e.cat] for e in evs]
        args = [e.args or _NO_ARGS for e in evs]
        t["external_id"][:] = _ints([a.external_id for a in args])
        t["sequence_nr"][:] = _ints([a.sequence_nr for a in args])
        t["fwd_thread_id"][:] = _ints([a.fwd_thread_id for a in args])
        t["module_id"][:] = self.opt_ids([a.module_hierarchy for a in args])
        t["stack_id"][:] = self.opt_ids([a.call_stack for a in args])
        t["input_dims_id"][:] = self.opt_ids([msgspec.json.encode(a.input_dims).decode() if a.input_dims else None for a in args])
        _nest(t)
        return t

    def runtime(self, evs: list[_Event], driver: list[bool]) -> dict[str, np.ndarray]:
        order = np.argsort(np.array([e.ts for e in evs], dtype=np.float64), kind="stable")
        evs = [evs[i] for i in order]
        t = empty_table("runtime", len(evs))
        self._times(t, evs)
        t["tid"][:] = _tids([e.tid for e in evs])
        names = [e.name for e in evs]
        t["name_id"][:] = self.ids(names)
        args = [e.args or _NO_ARGS for e in evs]
        t["correlation"][:] = _ints([a.correlation for a in args])
        t["cbid"][:] = _ints([a.cbid for a in args])
        kinds = {n: _api_kind(n) for n in set(names)}
        t["api_kind"][:] = [kinds[n] for n in names]
        t["driver"][:] = np.asarray(driver, dtype=bool)[order]
        return t

    def gpu(self, table: str, evs: list[_Event]) -> dict[str, np.ndarray]:
        evs.sort(key=lambda e: e.ts)
        t = empty_table(table, len(evs))
        self._times(t, evs)
        args = [e.args or _NO_ARGS for e in evs]
        dev = _ints([a.device for a in args])
        t["device"][:] = np.where(dev >= 0, dev, _tids([e.pid for e in evs]))
        stream = _ints([a.stream for a in args])
        t["stream"][:] = np.where(stream >= 0, stream, _tids([e.tid for e in evs]))
        names = [e.name for e in evs]
        t["name_id"][:] = self.ids(names)
        if "correlation" in t:
            t["correlation"][:] = _ints([a.correlation for a in args])
        if table == "kernels":
            for name, attr in (("grid", "grid"), ("block", "block")):
                dims = np.array([v if v is not None and len(v) == 3 else (-1, -1, -1)
                                 for v in (getattr(a, attr) for a in args)], dtype=np.int64).reshape(-1, 3)
                for i, axis in enumerate("xyz"):
                    t[f"{name}_{axis}"][:] = dims[:, i]
            t["registers_per_thread"][:] = _ints([a.registers for a in args])
            t["shared_memory_bytes"][:] = _ints([a.shared_memory for a in args])
            t["blocks_per_sm"][:] = _floats([a.blocks_per_sm for a in args])
            t["warps_per_sm"][:] = _floats([a.warps_per_sm for a in args])
            t["est_occupancy_pct"][:] = _floats([a.est_occupancy for a in args])
            t["graph_id"][:] = _ints([a.graph_id for a in args])
        elif table == "memcpy":
            kinds = {n: _memcpy_kind(n) for n in set(names)}
            t["kind"][:] = [kinds[n][0] for n in names]
            t["src_mem"][:] = [kinds[n][1] for n in names]
            t["dst_mem"][:] = [kinds[n][2] for n in names]
            t["bytes"][:] = _ints([a.bytes for a in args], 0)
        elif table == "memset":
            kinds_m = {n: _mem_kind(n[n.find("(") + 1: n.rfind(")")]) if "(" in n else 0 for n in set(names)}
            t["dst_mem"][:] = [kinds_m[n] for n in names]
            t["bytes"][:] = _ints([a.bytes for a in args], 0)
        return t


_NO_ARGS = _Args()


def _nest(t: dict[str, np.ndarray]) -> None:
    """parent_row/depth per thread; rows are sorted by (start, -dur) so parents come before children."""
    n = t["start_ns"].size
    parent = t["parent_row"]
    depth = t["depth"]
    ends = t["start_ns"] + t["dur_ns"]
    stacks: dict[int, list[int]] = {}
    starts_l = t["start_ns"].tolist()
    ends_l = ends.tolist()
    tids = t["tid"].tolist()
    for i in range(n):
        stack = stacks.setdefault(tids[i], [])
        s = starts_l[i]
        while stack and ends_l[stack[-1]] <= s:
            stack.pop()
        # A child that outlives its parent (clock jitter) is still nested if it starts inside it.
        if stack:
            parent[i] = stack[-1]
            depth[i] = len(stack)
        else:
            parent[i] = -1
            depth[i] = 0
        stack.append(i)


def _innermost_enclosing(ops: dict[str, np.ndarray], tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row of the innermost op on the same thread whose [start, end) holds each time, -1 when none."""
    out = np.full(t.shape, -1, dtype=np.int32)
    if ops["start_ns"].size == 0 or t.size == 0:
        return out
    starts, ends, parent = ops["start_ns"], ops["start_ns"] + ops["dur_ns"], ops["parent_row"]
    for th in np.unique(tid):
        rows = np.flatnonzero(ops["tid"] == th)
        if rows.size == 0:
            continue
        q = np.flatnonzero(tid == th)
        i = np.searchsorted(starts[rows], t[q], side="right") - 1
        cand = np.where(i >= 0, rows[np.clip(i, 0, None)], -1)
        for _ in range(256):  # walk up the nesting until the candidate encloses the time
            bad = (cand >= 0) & (ends[np.clip(cand, 0, None)] <= t[q])
            if not bad.any():
                break
            cand = np.where(bad, parent[np.clip(cand, 0, None)], cand)
        out[q] = cand
    return out


def _link_by_correlation(gpu: dict[str, np.ndarray], runtime: dict[str, np.ndarray]) -> None:
    corr = runtime["correlation"]
    if corr.size == 0 or gpu["correlation"].size == 0:
        return
    order = np.argsort(corr, kind="stable")
    sc = corr[order]
    i = np.clip(np.searchsorted(sc, gpu["correlation"]), 0, sc.size - 1)
    hit = (sc[i] == gpu["correlation"]) & (gpu["correlation"] >= 0)
    gpu["launch_row"][:] = np.where(hit, order[i], -1)
    gpu["op_row"][:] = np.where(hit, runtime["op_row"][np.clip(gpu["launch_row"], 0, None)], -1)


def _fwdbwd(ops: dict[str, np.ndarray], flows: list[Any]) -> None:
    """fwd_row of backward ops from `fwdbwd` flow pairs (start 's' at the forward op, end 'f' at the backward op)."""
    if not flows or ops["start_ns"].size == 0:
        return
    start: dict[Any, tuple[int, int]] = {}
    end: dict[Any, tuple[int, int]] = {}
    for f in flows:
        point = (_tid(f.tid), int(round(_num(f.ts, 0) * 1000)))
        (start if f.ph == "s" else end)[f.id] = point
    pairs = [(start[k], end[k]) for k in start.keys() & end.keys()]
    if not pairs:
        return
    fwd_tid = np.array([p[0][0] for p in pairs])
    fwd_ts = np.array([p[0][1] for p in pairs], dtype=np.int64)
    bwd_tid = np.array([p[1][0] for p in pairs])
    bwd_ts = np.array([p[1][1] for p in pairs], dtype=np.int64)
    fwd_rows = _innermost_enclosing(ops, fwd_tid, fwd_ts)
    bwd_rows = _innermost_enclosing(ops, bwd_tid, bwd_ts)
    ok = (fwd_rows >= 0) & (bwd_rows >= 0)
    ops["fwd_row"][bwd_rows[ok]] = fwd_rows[ok]


def _devices(props: list[dict[str, Any]] | None, rank: int) -> list[DeviceInfo]:
    out = []
    for d in props or []:
        out.append(DeviceInfo(
            id=_int(d.get("id"), 0), name=str(d.get("name", "")), rank=rank,
            compute_major=_int(d.get("computeMajor")), compute_minor=_int(d.get("computeMinor")),
            sm_count=_int(d.get("numSms")), memory_bytes=_int(d.get("totalGlobalMem")),
            max_threads_per_block=_int(d.get("maxThreadsPerBlock")),
            max_threads_per_sm=_int(d.get("maxThreadsPerMultiprocessor")),
            regs_per_block=_int(d.get("regsPerBlock")), regs_per_sm=_int(d.get("regsPerMultiprocessor")),
            warp_size=_int(d.get("warpSize"), 32),
            shared_memory_per_block_bytes=_int(d.get("sharedMemPerBlock")),
            shared_memory_per_block_optin_bytes=_int(d.get("sharedMemPerBlockOptin")),
            shared_memory_per_sm_bytes=_int(d.get("sharedMemPerMultiprocessor", d.get("maxSharedMemoryPerMultiProcessor"))),
        ))
    return out


_OP_CATS = frozenset(OP_CATEGORIES)
_GPU_CATS = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def read_kineto(path: str | Path, rank: int | None = None) -> Profile:
    """Read one Kineto trace file (``.json`` or ``.json.gz``) into a canonical :class:`Profile`.

    Args:
        path: the trace file.
        rank: rank to record; default: ``distributedInfo.rank`` when present, else 0.

    Raises:
        TraceError: missing or unreadable file, bad gzip, invalid JSON, JSON that is not a trace.
    """
    path = Path(path)
    # Millions of small, acyclic objects: the cyclic GC would only rescan them over and over.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(path, rank)
    finally:
        if was_enabled:
            gc.enable()


def _read(path: Path, rank: int | None) -> Profile:
    trace = _decode(path, read_bytes(path))
    info = trace.distributedInfo or {}
    if rank is None:
        rank = _int(info.get("rank"), 0) if isinstance(info, dict) else 0
    profile = Profile()
    b = _Builder(profile, rank)

    buckets: dict[str, list[Any]] = {}
    flows: list[Any] = []
    for e in trace.traceEvents:
        if e.ph == "X":
            lst = buckets.get(e.cat)
            if lst is None:
                lst = buckets[e.cat] = []
            lst.append(e)
        elif e.cat == "fwdbwd":
            flows.append(e)
    if "Kernel" in buckets:
        buckets.setdefault("kernel", []).extend(buckets.pop("Kernel"))
    del trace.traceEvents[:]

    ops = b.ops([e for c in _OP_CATS for e in buckets.get(c, [])])
    rt_events = buckets.get("cuda_runtime", []) + buckets.get("cuda_driver", [])
    driver = [False] * len(buckets.get("cuda_runtime", [])) + [True] * len(buckets.get("cuda_driver", []))
    runtime = b.runtime(rt_events, driver)
    runtime["op_row"][:] = _innermost_enclosing(ops, runtime["tid"], runtime["start_ns"])
    _fwdbwd(ops, flows)
    profile.tables["ops"] = ops
    profile.tables["runtime"] = runtime
    for cat, table in _GPU_CATS.items():
        t = b.gpu(table, buckets.get(cat, []))
        _link_by_correlation(t, runtime)
        profile.tables[table] = t
    profile.tables["gpu_annotations"] = b.gpu("gpu_annotations", buckets.get("gpu_user_annotation", []))
    syncs = b.gpu("syncs", buckets.get("cuda_sync", []))
    profile.tables["syncs"] = syncs

    profile.devices = _devices(trace.deviceProperties, rank)
    base = trace.baseTimeNanoseconds
    profile.meta.update({
        "source": {"path": str(path), "format": "kineto"},
        "base_time_ns": int(base) if isinstance(base, int) else 0,
        "trace_schema_version": trace.schemaVersion,
        "trace_id": trace.trace_id,
        "cuda_driver_version": trace.cuda_driver_version,
        "cuda_runtime_version": trace.cuda_runtime_version,
        "cupti_version": trace.cupti_version,
        "distributed": info if isinstance(info, dict) else {},
        "ranks": [rank],
    })
    _profiler_steps(profile, rank)
    return profile


def _profiler_steps(profile: Profile, rank: int) -> None:
    """Steps from ``ProfilerStep#N`` annotations on the host, when the trace has them."""
    ops = profile.tables["ops"]
    if ops["name_id"].size == 0:
        return
    names = profile.names(ops["name_id"])
    is_step = (ops["category"] == OP_CATEGORIES.index("user_annotation")) & np.char.startswith(
        names.astype(str), "ProfilerStep#")
    rows = np.flatnonzero(is_step)
    if rows.size == 0:
        return
    numbers = np.array([_int(s.rsplit("#", 1)[1], -1) for s in names[rows]], dtype=np.int32)
    if (numbers < 0).any() or np.unique(numbers).size != numbers.size:
        numbers = np.arange(rows.size, dtype=np.int32)
    starts = ops["start_ns"][rows]
    assign_steps(profile, starts, starts + ops["dur_ns"][rows], "profiler_step", numbers=numbers,
                 name_ids=ops["name_id"][rows], rank=rank)
