"""A profile as a trace for the Perfetto UI (ui.perfetto.dev) or chrome://tracing, with counter tracks.

Every rank of the profile, each as its own processes. Tracks, in the Chrome trace event format (JSON; Perfetto
imports it as is):

* process ``rank R · host``: one thread per host thread with its CPU ops (nested by time) and CUDA runtime/driver
  calls, and a ``steps`` thread with one slice per iteration;
* process ``rank R · GPU D``: one thread per CUDA stream with its kernels, copies and memsets. A kernel's slice is
  named by its short name and carries its layer, phase, launching op, grid, block, registers, shared memory and
  its Nsight Compute counters when the profile has them; a flow arrow joins each launch call to its kernel;
* counter tracks on the GPU process: every sampled metric (NVML/GPM: ``gpu_util_pct``, ``sm_active_pct``,
  ``power_w`` …) and the caching allocator's allocated/reserved bytes from the memory events; on the host process,
  host memory allocated.

Times are microseconds from the profile's first event (``displayTimeUnit`` ns keeps the nanoseconds); rank R's
processes are numbered from ``R * RANK_PID_STRIDE``.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from dnnprof.analysis.attribution import PHASES, Attribution
from dnnprof.analysis.kernel_names import short_name
from dnnprof.model.profile import Profile

HOST_PID, GPU_PID = 1, 100
RANK_PID_STRIDE = 1000
STEPS_TID = 0  # the steps track (host thread ids are the OS's, never 0)
#: ``args`` keys of a kernel slice, from the kernels table.
_KERNEL_ARGS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_memory_bytes",
                "correlation", "step")


def _rows(t: dict[str, np.ndarray], rank: int) -> np.ndarray:
    return np.flatnonzero(t["rank"] == rank) if t["rank"].size else np.zeros(0, dtype=np.int64)


def _origin_ns(profile: Profile) -> int:
    starts = [profile.tables[name]["start_ns"] for name in ("ops", "runtime", "kernels", "memcpy", "memset", "steps")]
    starts += [profile.tables["samples"]["ts_ns"], profile.tables["memory_events"]["ts_ns"]]
    valid = [s[s > 0] for s in starts if s.size]
    valid = [s for s in valid if s.size]
    return int(min(s.min() for s in valid)) if valid else 0


#: Events built before they are handed on (written out): a big trace's are millions, a dict each.
BATCH_EVENTS = 1 << 16


class _Builder:
    def __init__(self, profile: Profile, rank: int, t0: int, sink: Callable[[list[dict[str, Any]]], None]) -> None:
        self.p, self.rank, self.t0 = profile, rank, t0
        self.base = rank * RANK_PID_STRIDE
        self.host = self.base + HOST_PID
        self.events: list[dict[str, Any]] = []
        self.sink = sink
        self.threads: set[tuple[int, int]] = set()
        self.counter_pids: set[int] = set()
        self.flows = 0

    def add(self, ev: dict[str, Any]) -> None:
        self.events.append(ev)
        if ev["ph"] == "C":
            self.counter_pids.add(ev["pid"])
        if len(self.events) >= BATCH_EVENTS:
            self.flush()

    def flush(self) -> None:
        """Hand the events built so far on, in order."""
        if self.events:
            self.sink(self.events)
            self.events = []

    def gpu(self, device: Any) -> int:
        return self.base + GPU_PID + max(int(device), 0)

    def us(self, ns: Any) -> float:
        return round((int(ns) - self.t0) / 1000.0, 3)

    def slice(self, name: str, cat: str, pid: int, tid: int, start_ns: Any, dur_ns: Any,
              args: dict[str, Any] | None = None) -> None:
        self.threads.add((pid, tid))
        ev: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": self.us(start_ns),
                              "dur": round(max(int(dur_ns), 0) / 1000.0, 3)}
        if args:
            ev["args"] = args
        self.add(ev)

    def metadata(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        pids = sorted({pid for pid, _ in self.threads} | self.counter_pids)
        for pid in pids:
            label = (f"rank {self.rank} · host" if pid == self.host
                     else f"rank {self.rank} · GPU {pid - self.base - GPU_PID}")
            out.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        for pid, tid in sorted(self.threads):
            if pid == self.host:
                label = "steps" if tid == STEPS_TID else f"thread {tid}"
            else:
                label = f"stream {tid}"
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                        "args": {"sort_index": -1 if tid == STEPS_TID else tid}})
        return out


def _steps(b: _Builder) -> None:
    t = b.p.tables["steps"]
    for i in _rows(t, b.rank):
        b.slice(f"step {int(t['number'][i])}", "step", b.host, STEPS_TID, t["start_ns"][i], t["dur_ns"][i],
                {"number": int(t["number"][i])})


def _host(b: _Builder) -> None:
    for table, cat in (("ops", "cpu_op"), ("runtime", "cuda_runtime")):
        t = b.p.tables[table]
        rows = _rows(t, b.rank)
        for a in range(0, rows.size, BATCH_EVENTS):  # a block of rows' columns at a time, as Python values
            r = rows[a:a + BATCH_EVENTS]
            names = b.p.names(t["name_id"][r]).tolist()
            tid, start, dur, step = (t[c][r].tolist() for c in ("tid", "start_ns", "dur_ns", "step"))
            for j, name in enumerate(names):
                args = {"step": step[j]} if step[j] >= 0 else None
                b.slice(str(name), cat, b.host, tid[j], start[j], dur[j], args)


def _counters_by_kernel(p: Profile) -> dict[int, dict[str, float]]:
    c = p.tables["counters"]
    out: dict[int, dict[str, float]] = {}
    if not c["kernel_row"].size:
        return out
    metrics = p.names(c["metric_id"])
    for row, metric, value in zip(c["kernel_row"].tolist(), metrics, c["value"].tolist(), strict=True):
        if row >= 0:
            out.setdefault(row, {})[str(metric)] = value
    return out


def _gpu(b: _Builder, attribution: Attribution | None) -> None:
    p = b.p
    counters = _counters_by_kernel(p)
    runtime = p.tables["runtime"]
    for table, cat in (("kernels", "kernel"), ("memcpy", "gpu_memcpy"), ("memset", "gpu_memset")):
        t = p.tables[table]
        rows = _rows(t, b.rank)
        shown = [k for k in _KERNEL_ARGS if k in t] if table == "kernels" else []
        for a in range(0, rows.size, BATCH_EVENTS):  # a block of rows' columns at a time, as Python values
            r = rows[a:a + BATCH_EVENTS]
            names = p.names(t["name_id"][r]).tolist()
            col = {c: t[c][r].tolist() for c in ("device", "stream", "start_ns", "dur_ns", "bytes", *shown) if c in t}
            launch = t["launch_row"][r]
            linked = (launch >= 0) & (launch < runtime["start_ns"].size)
            at = np.where(linked, launch, 0)
            launch_tid = runtime["tid"][at].tolist() if runtime["tid"].size else [0] * r.size
            launch_ns = runtime["start_ns"][at].tolist() if runtime["start_ns"].size else [0] * r.size
            linked_list = linked.tolist()
            for j, i in enumerate(r.tolist()):
                full = str(names[j])
                args: dict[str, Any] = {}
                if table == "kernels":
                    args["name"] = full
                    args.update({k: col[k][j] for k in shown})
                    if attribution is not None and i < attribution.layer.size:
                        args.update(layer=str(attribution.layer[i]), phase=PHASES[int(attribution.phase[i])],
                                    op=str(attribution.op_name[i]))
                    if i in counters:
                        args["ncu"] = counters[i]
                elif "bytes" in col:
                    args["bytes"] = col["bytes"][j]
                pid, tid = b.gpu(col["device"][j]), col["stream"][j]
                b.slice(short_name(full) if table == "kernels" else full, cat, pid, tid, col["start_ns"][j],
                        col["dur_ns"][j], args)
                if linked_list[j]:
                    b.flows += 1
                    fid = b.base * 10_000_000 + b.flows
                    b.add({"ph": "s", "id": fid, "name": "launch", "cat": "launch", "pid": b.host,
                           "tid": launch_tid[j], "ts": b.us(launch_ns[j])})
                    b.add({"ph": "f", "bp": "e", "id": fid, "name": "launch", "cat": "launch", "pid": pid,
                           "tid": tid, "ts": b.us(col["start_ns"][j])})


def _counter_tracks(b: _Builder) -> None:
    p = b.p
    s = p.tables["samples"]
    rows = _rows(s, b.rank)
    if rows.size:
        metrics = p.names(s["metric_id"][rows])
        for i, metric in zip(rows.tolist(), metrics, strict=True):
            b.add({"ph": "C", "name": str(metric), "pid": b.gpu(s["device"][i]), "ts": b.us(s["ts_ns"][i]),
                             "args": {"value": float(s["value"][i])}})
    m = p.tables["memory_events"]
    for i in _rows(m, b.rank).tolist():
        device = int(m["device"][i])
        if device >= 0:  # the caching allocator of a GPU
            args = {"allocated": int(m["total_allocated_bytes"][i]), "reserved": int(m["total_reserved_bytes"][i])}
            b.add({"ph": "C", "name": "cuda_memory_bytes", "pid": b.gpu(device), "ts": b.us(m["ts_ns"][i]),
                             "args": args})
        else:  # host memory (the profiler reports allocated bytes only)
            b.add({"ph": "C", "name": "host_memory_bytes", "pid": b.host, "ts": b.us(m["ts_ns"][i]),
                             "args": {"allocated": int(m["total_allocated_bytes"][i])}})


def perfetto_trace(profile: Profile, ranks: list[int] | None = None,
                   attribution: Attribution | None = None) -> dict[str, Any]:
    """The trace document of ``ranks`` (default: every rank; see the module docstring); ``attribution`` (of the
    whole kernels table) names kernels' layers and phases. Every event in memory: a big trace's are better written
    by :func:`write_perfetto_trace`."""
    events: list[dict[str, Any]] = []
    meta, other = _trace(profile, ranks, attribution, events.extend)
    return {"traceEvents": meta + events, "displayTimeUnit": "ns", "otherData": other}


def _trace(profile: Profile, ranks: list[int] | None, attribution: Attribution | None,
           sink: Callable[[list[dict[str, Any]]], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Hand every rank's events to ``sink`` a batch at a time, in order; returns the processes' and threads'
    metadata events and the ``otherData`` of the document."""
    t0 = _origin_ns(profile)
    meta: list[dict[str, Any]] = []
    for rank in profile.ranks if ranks is None else ranks:
        b = _Builder(profile, rank, t0, sink)
        _steps(b)
        _host(b)
        _gpu(b, attribution)
        _counter_tracks(b)
        b.flush()
        meta += b.metadata()
    return meta, {"ranks": profile.ranks if ranks is None else ranks, "origin_ns": t0, "source": "dnnprof"}


def write_perfetto_trace(profile: Profile, path: Path, ranks: list[int] | None = None,
                         attribution: Attribution | None = None) -> None:
    """Write the document of :func:`perfetto_trace` to ``path`` (JSON, gzip-compressed when it ends in ``.gz``,
    atomically), :data:`BATCH_EVENTS` events at a time: never the whole trace in memory. The processes' and
    threads' names come after the events (the trace event format reads them anywhere)."""
    from dnnprof.model.outputs import atomic_file

    encode = msgspec.json.Encoder().encode
    with atomic_file(path, option="--perfetto") as (_, raw):
        out: Any = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if path.suffix == ".gz" else raw
        out.write(b'{"traceEvents":[')
        written = [0]

        def sink(events: list[dict[str, Any]]) -> None:
            if events:
                out.write((b"," if written[0] else b"") + encode(events)[1:-1])
                written[0] += len(events)

        meta, other = _trace(profile, ranks, attribution, sink)
        sink(meta)
        out.write(b'],"displayTimeUnit":"ns","otherData":' + encode(other) + b"}")
        if out is not raw:
            out.close()  # the gzip trailer; the file itself is closed by atomic_file

