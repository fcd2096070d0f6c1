"""Decoded Kineto events → canonical tables, one chunk of events at a time.

:class:`EventColumns` turns each chunk's events into compact numpy columns per category (in file order) and
forgets the events; :meth:`EventColumns.tables` then concatenates, sorts, interns names and links the tables
(nesting, innermost enclosing op, correlation, ``fwdbwd`` flows). The result does not depend on how the events
were chunked: rows are sorted stably from file order, and names are interned in the order of the sorted tables.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter
from typing import Any

import msgspec
import numpy as np

from dnnprof.ingest.collectives import CollectiveArgs, collectives_table
from dnnprof.ingest.column_spill import NAME_COLUMNS, LazyTable, SpilledColumns
from dnnprof.ingest.flow_points import NS_LIMIT, FlowPoints
from dnnprof.ingest.nesting import ThreadRows, innermost_enclosing, nest
from dnnprof.ingest.start_order import start_order
from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, MEMCPY_KINDS, MEMORY_KINDS, OP_CATEGORIES, empty_table, fill_value

#: Kineto category → canonical table.
TABLE_OF_CATEGORY = {
    **dict.fromkeys(OP_CATEGORIES, "ops"),
    "cuda_runtime": "runtime", "cuda_driver": "runtime",
    "kernel": "kernels", "Kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
    "gpu_user_annotation": "gpu_annotations", "cuda_sync": "syncs",
}
#: torch 1.8/1.9 Kineto categories → today's (``Kernel`` has a table of its own). Runtime calls and GPU activities of
#: those versions carry ``args.correlation`` as today's do, so launches link to kernels the same way.
LEGACY_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
#: Those versions filed ``record_function`` ranges (``ProfilerStep#5``, ``Optimizer.step#SGD.step``,
#: ``enumerate(DataLoader)#…``) as ``Operator`` too; today they are ``user_annotation``. Their names hold a ``#``,
#: which no ATen op or autograd node name has.
_LEGACY_ANNOTATION_MARK = "#"
#: Categories in the order their rows are concatenated before the stable sort of each table.
_SOURCES = {
    "ops": OP_CATEGORIES, "runtime": ("cuda_runtime", "cuda_driver"), "kernels": ("kernel", "Kernel"),
    "memcpy": ("gpu_memcpy",), "memset": ("gpu_memset",), "gpu_annotations": ("gpu_user_annotation",),
    "syncs": ("cuda_sync",),
}
_GPU_TABLES = ("kernels", "memcpy", "memset", "gpu_annotations", "syncs")
_LINKED = ("kernels", "memcpy", "memset")  # GPU tables linked to their launches by correlation id, in that order


def tid_of(v: Any) -> int:
    """Thread ids are ints, but some Kineto rows use strings ('stream 7 (sync)'): keep the first number."""
    if isinstance(v, int):
        return v if _INT64_MIN <= v <= _INT64_MAX else -1
    digits = "".join(ch if ch.isdigit() else " " for ch in str(v)).split()
    if not digits:
        return -1
    try:
        x = int(digits[0])
    except ValueError:  # superscript digits ("²") pass isdigit() but not int()
        return -1
    return x if x <= _INT64_MAX else -1


def _tids(values: list[Any]) -> np.ndarray:
    """int64 thread ids (ints, or strings holding a number)."""
    if str in map(type, values):
        values = [v if v.__class__ is int else tid_of(v) for v in values]
    return _ints(values)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _ints(values: list[Any], default: int = -1) -> np.ndarray:
    """int64 column from a list of ints/None (None, or a value beyond int64, → default)."""
    try:  # struct converts a list of ints about twice as fast as numpy's per-element dtype discovery
        return np.frombuffer(struct.pack(f"{len(values)}q", *values), dtype=np.int64)
    except struct.error:
        return np.fromiter([default if v is None or not _INT64_MIN <= v <= _INT64_MAX else v for v in values],
                           dtype=np.int64, count=len(values))


def _dims(values: list[Any]) -> np.ndarray:
    """(n, 3) int64 grid/block sizes; (-1, -1, -1) where missing or not three numbers."""
    try:
        if set(map(len, values)) <= {3}:
            flat = struct.pack(f"{3 * len(values)}q", *itertools.chain.from_iterable(values))
            return np.frombuffer(flat, dtype=np.int64).reshape(-1, 3)
    except (TypeError, struct.error):  # None (no len) or not ints
        pass
    return np.array([v if v is not None and len(v) == 3 and all(_INT64_MIN <= x <= _INT64_MAX for x in v)
                     else _GRID_UNKNOWN for v in values], dtype=np.int64).reshape(-1, 3)


def _floats(values: list[Any]) -> np.ndarray:
    """float64 column from a list of floats/None (None → NaN)."""
    try:
        return np.frombuffer(struct.pack(f"{len(values)}d", *values), dtype=np.float64)
    except struct.error:
        return np.fromiter(values, dtype=np.float64, count=len(values))


_GRID_UNKNOWN = (-1, -1, -1)


#: Rows gathered at a time when a table is filled in time order (8 MiB per 64-bit column).
_BLOCK_ROWS = 1 << 20
#: Tables of at least this many rows have their columns filled by several threads side by side (numpy lets go of
#: the interpreter while it gathers and converts); below, starting the threads would cost more than it saves.
PARALLEL_ROWS = 1 << 16
#: Threads that fill one table's columns, at most (each holds a few blocks of rows).
MAX_FILL_THREADS = 8
#: Rows a fill thread gathers at a time, and the calling thread's names while threads fill: small blocks keep the
#: threads' temporaries few (at 5 GB on 16 cores, blocks of 128 K rows per thread peaked at 489 MB, 32 K at 466 MB,
#: and ran a second faster).
_THREAD_BLOCK_ROWS = 1 << 15
_NAME_BLOCK_ROWS = 1 << 18


def _ns(values: np.ndarray) -> np.ndarray:
    x = values * 1000.0
    np.clip(x, -NS_LIMIT, NS_LIMIT, out=x)  # in place: one temporary of the column's size, not three
    np.rint(x, out=x)
    return x.astype(np.int64)


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


def _memset_kind(name: str) -> int:
    return _mem_kind(name[name.find("(") + 1: name.rfind(")")]) if "(" in name else 0


#: Host-blocking synchronisation (cudaStreamWaitEvent is a GPU-side dependency and counts as an event call).
_SYNC_APIS = ("Synchronize",)


def api_kind(name: str) -> int:
    """Index into API_KINDS of a CUDA runtime/driver call's name (shared by every reader of runtime calls)."""
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


class _NoArgs:
    """Stands in for a missing ``args`` object: every field None."""

    def __getattr__(self, name: str) -> None:
        return None


_NO_ARGS = _NoArgs()


class EventColumns:
    """Compact columns of the events seen so far, per Kineto category, in file order.

    Names are kept as ids into a local string table until :meth:`tables` interns them into the profile.
    """

    def __init__(self, spill: SpilledColumns | None = None) -> None:
        self._strings: dict[str, int] = {}
        self._parts: dict[str, list[dict[str, np.ndarray]]] = {}
        self._spill = spill  # where the columns go as they come, for big traces (None: kept in memory)
        self._memory: list[dict[str, np.ndarray]] = []  # columns of `[memory]` instants, per chunk
        self.flows = FlowPoints()  # fwdbwd flow points
        self.categories: Counter[str] = Counter()  # complete events per category as the file names it
        self.negative_durations = 0  # complete events with dur < 0, read as 0 long
        self.collectives = CollectiveArgs()  # torch.distributed's args of collective ops and kernels
        self._collective_rows: dict[str, tuple[np.ndarray, list[Any]]] = {}  # per table, set as it is sorted
        # Set by tables(): local string ids in order, local id → profile id ([-1] stays -1), the profile.
        self._keys: list[str] = []
        self._lut = np.empty(0, dtype=np.int32)
        self._profile = Profile()
        self._threads = 1  # set by tables(): threads that may fill a big table's columns
        self._pool: Any = None
        self._pending: list[Any] = []  # columns being filled by the threads
        self._unwritten: dict[int, np.ndarray] = {}  # the mapped columns of the table being made that no fill wrote

    # --- per chunk ------------------------------------------------------------------------------------------
    def add(self, buckets: dict[str, list[Any]]) -> None:
        """Columns of one chunk's complete ('X') events, grouped by category; categories without a table are
        ignored."""
        for cat, evs in buckets.items():
            self.categories[cat] += len(evs)
        if not LEGACY_CATEGORIES.keys().isdisjoint(buckets):
            buckets = modern_categories(buckets)
        for cat, evs in buckets.items():
            table = TABLE_OF_CATEGORY.get(cat)
            if table is None or not evs:
                continue
            dur = _floats([e.dur for e in evs])
            if (dur < 0).any():  # counted and clipped here, whichever decoding path the event took
                self.negative_durations += int((dur < 0).sum())
                dur = np.maximum(dur, 0.0)
            cols = {"ts": _floats([e.ts for e in evs]), "dur": dur, "name": self._ids(evs)}
            if table == "runtime":  # the most numerous: two args, read without a list of args in between
                cols["tid"] = _tids([e.tid for e in evs])
                try:
                    cols["correlation"] = _ints([e.args.correlation for e in evs])
                    cols["cbid"] = _ints([e.args.cbid for e in evs])
                except AttributeError:  # an event without args
                    cols["correlation"] = _ints([(e.args or _NO_ARGS).correlation for e in evs])
                    cols["cbid"] = _ints([(e.args or _NO_ARGS).cbid for e in evs])
            else:
                args = [e.args or _NO_ARGS for e in evs]
                if table == "ops":
                    self._op_columns(cols, evs, args)
                else:
                    self._gpu_columns(table, cols, evs, args)
                if table in ("ops", "kernels"):
                    self.collectives.add(cat, args)
            if self._spill is not None:
                self._spill.append(cat, _narrow(table, cols))
            else:
                self._parts.setdefault(cat, []).append(_narrow(table, cols))

    def extend(self, later: EventColumns) -> None:
        """Append the columns of ``later``, the events that follow this one's in the file (read elsewhere, e.g.
        by another process): the same columns as if one object had seen all the events."""
        d = self._strings
        remap = np.array([d.setdefault(k, len(d)) for k in later._strings] + [-1], dtype=np.int32)
        for cat, parts in later._parts.items():
            for cols in parts:
                for k in NAME_COLUMNS:
                    if k in cols:
                        cols[k] = remap[cols[k]]  # local id -1 (none) reads remap[-1] = -1
                if self._spill is not None:
                    self._spill.append(cat, cols)
                else:
                    self._parts.setdefault(cat, []).append(cols)
        if later._spill is not None:
            if self._spill is None:
                raise ValueError("columns spilled to disk can only extend columns spilled to disk")
            self._spill.extend(later._spill, remap)
        self._memory.extend(later._memory)
        self.flows.extend(later.flows)
        self.categories.update(later.categories)
        self.negative_durations += later.negative_durations
        self.collectives.extend(later.collectives)

    def add_flows(self, is_start: list[bool], evs: list[Any]) -> None:
        """One chunk's ``fwdbwd`` flow points (events with ``id``, ``tid`` and ``ts``), in file order."""
        self.flows.add(is_start, [e.id for e in evs], _tids([e.tid for e in evs]), [e.ts for e in evs])

    def add_memory(self, evs: list[Any]) -> None:
        """Columns of one chunk's ``[memory]`` instants (allocations > 0 bytes, frees < 0), in file order."""
        if not evs:
            return
        args = [e.args for e in evs]
        self._memory.append({
            "ts": _floats([e.ts for e in evs]), "tid": _tids([e.tid for e in evs]),
            "device_type": _ints([a.device_type for a in args]), "device": _ints([a.device_id for a in args]),
            "addr": _ints([a.addr for a in args]), "bytes": _ints([a.alloc_bytes for a in args], 0),
            "total_allocated_bytes": _ints([a.total_allocated for a in args]),
            "total_reserved_bytes": _ints([a.total_reserved for a in args]),
        })

    def _ids(self, evs: list[Any]) -> np.ndarray:
        """Local ids of the events' names."""
        d = self._strings
        try:
            return _ints([d[e.name] for e in evs])
        except KeyError:  # new names: few after the first chunks
            for e in evs:
                d.setdefault(e.name, len(d))
            return _ints([d[e.name] for e in evs])

    def _opt_ids(self, values: list[Any]) -> np.ndarray:
        d = self._strings
        sd = d.setdefault
        return _ints([-1 if v is None or v == "" else sd(str(v), len(d)) for v in values])

    def _op_columns(self, cols: dict[str, np.ndarray], evs: list[Any], args: list[Any]) -> None:
        cols["tid"] = _tids([e.tid for e in evs])
        cols["external_id"] = _ints([a.external_id for a in args])
        cols["sequence_nr"] = _ints([a.sequence_nr for a in args])
        cols["fwd_thread_id"] = _ints([a.fwd_thread_id for a in args])
        cols["module"] = self._opt_ids([a.module_hierarchy for a in args])
        cols["stack"] = self._opt_ids([a.call_stack for a in args])
        encode = msgspec.json.encode
        cols["dims"] = self._opt_ids([encode(d).decode() if (d := a.input_dims) else None for a in args])

    def _gpu_columns(self, table: str, cols: dict[str, np.ndarray], evs: list[Any], args: list[Any]) -> None:
        dev = _ints([a.device for a in args])
        if (dev < 0).any():
            dev = np.where(dev >= 0, dev, _tids([e.pid for e in evs]))
        stream = _ints([a.stream for a in args])
        if (stream < 0).any():
            stream = np.where(stream >= 0, stream, _tids([e.tid for e in evs]))
        cols["device"], cols["stream"] = dev, stream
        if table != "gpu_annotations":
            cols["correlation"] = _ints([a.correlation for a in args])
        if table == "kernels":
            cols["grid"] = _dims([a.grid for a in args])
            cols["block"] = _dims([a.block for a in args])
            cols["registers_per_thread"] = _ints([a.registers for a in args])
            cols["shared_memory_bytes"] = _ints([a.shared_memory for a in args])
            cols["blocks_per_sm"] = _floats([a.blocks_per_sm for a in args])
            cols["warps_per_sm"] = _floats([a.warps_per_sm for a in args])
            cols["est_occupancy_pct"] = _floats([a.est_occupancy for a in args])
            cols["graph_id"] = _ints([a.graph_id for a in args])
        elif table in ("memcpy", "memset"):
            cols["bytes"] = _ints([a.bytes for a in args], 0)

    # --- at the end -----------------------------------------------------------------------------------------
    def tables(self, profile: Profile, rank: int, threads: int = 1) -> dict[str, dict[str, np.ndarray]]:
        """The canonical tables of everything added, with names interned into ``profile``. The columns of a table
        of :data:`PARALLEL_ROWS` rows or more are filled by up to ``threads`` threads; the tables are the same."""
        self._keys = list(self._strings)
        self._lut = np.full(len(self._keys) + 1, -1, dtype=np.int32)  # local id → profile id; [-1] stays -1
        self._profile = profile
        self._threads = min(threads, MAX_FILL_THREADS)
        try:
            return self._tables(profile, rank)
        finally:
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)
                self._pool, self._pending = None, []

    def _tables(self, profile: Profile, rank: int) -> dict[str, dict[str, np.ndarray]]:
        # Spilled columns make tables of mapped columns, whose pages are given back as each column is done.
        done = self._done
        out = {"ops": self._ops(rank)}
        done()
        out["runtime"] = runtime = self._runtime(rank)
        self._wait()
        pairs = self.flows.pairs()  # before the thread index: the pairing's temporaries and its keys never add up
        looked_up = runtime["tid"].size or pairs[0].size
        threads = ThreadRows(out["ops"]) if out["ops"]["tid"].size and looked_up else None  # launches and flows
        runtime["op_row"][:] = innermost_enclosing(out["ops"], runtime["tid"], runtime["start_ns"],
                                                   self._pool_for(runtime["tid"].size), threads)
        fwdbwd(out["ops"], pairs, threads)
        del threads, pairs
        done()
        index = None  # the runtime by correlation id: made for the first linked table, dropped after the last
        for table in _GPU_TABLES:
            t = out[table] = self._gpu(table, rank)
            if table in _LINKED:
                self._written_later(t, "launch_row", "op_row")
            self._wait()
            if table in _LINKED:
                if index is None and runtime["correlation"].size and t["correlation"].size:
                    index = correlation_index(runtime)
                link_by_correlation(t, runtime, index)
                if table == _LINKED[-1]:
                    index = None
            done()
        out["memory_events"] = self._memory_events(out["ops"], rank)
        none = (np.empty(0, dtype=np.int64), [])
        out["collectives"] = collectives_table(profile, rank, self._collective_rows.pop("kernels", none),
                                               self._collective_rows.pop("ops", none))
        return out

    def _memory_events(self, ops: dict[str, np.ndarray], rank: int) -> dict[str, np.ndarray]:
        """The ``[memory]`` instants by time, each linked to the innermost op enclosing it on its thread."""
        parts, self._memory = self._memory, []
        if not parts:
            return empty_table("memory_events", 0)
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(cols["ts"], kind="stable")
        t = empty_table("memory_events", order.size)
        t["rank"][:] = rank
        t["ts_ns"][:] = _ns(cols["ts"][order])
        for k in ("tid", "device_type", "device", "addr", "bytes", "total_allocated_bytes", "total_reserved_bytes"):
            t[k][:] = cols[k][order]
        t["op_row"][:] = innermost_enclosing(ops, t["tid"], t["ts_ns"], self._pool_for(order.size))
        return t

    def _concat(self, table: str) -> tuple[Any, list[tuple[str, int]]]:
        """Columns of a table in category order (a dict of arrays, or a LazyTable over the spill that loads them
        one at a time), and (category, rows) per category."""
        if self._spill is not None:
            counts = [(c, self._spill.rows[c]) for c in _SOURCES[table] if self._spill.rows.get(c)]
            return (LazyTable(self._spill, [c for c, _ in counts]) if counts else {}), counts
        parts = [(c, p) for c in _SOURCES[table] for p in self._parts.pop(c, [])]
        counts: dict[str, int] = {}
        for c, p in parts:
            counts[c] = counts.get(c, 0) + p["ts"].size
        if not parts:
            return {}, []
        out = {}
        for k in list(parts[0][1]):  # column by column, each part's column dropped once copied: one copy at a time
            out[k] = np.concatenate([p[k] for _, p in parts])
            for _, p in parts:
                del p[k]
        return out, list(counts.items())

    def _intern(self, local: np.ndarray) -> np.ndarray:
        """Profile string ids for local ids (-1 stays -1), interning new strings in order of first use."""
        lut, keys, intern = self._lut, self._keys, self._profile.intern
        out = lut[local]
        new = local[(out < 0) & (local >= 0)]  # rows whose string is not interned yet: few after the first block
        if new.size:
            uniq, first = np.unique(new, return_index=True)
            for u in uniq[np.argsort(first, kind="stable")].tolist():
                lut[u] = intern(keys[u])
            out = lut[local]
        return out

    def _by_name(self, local: np.ndarray, fn: Any) -> np.ndarray:
        """fn(name) for every row of a block of local ids (>= 0, at least one; an int, or a tuple of ints), computed
        once per distinct name."""
        present = np.flatnonzero(np.bincount(local))
        values = np.array([fn(self._keys[u]) for u in present.tolist()], dtype=np.int64)
        table = np.zeros((int(present[-1]) + 1, *values.shape[1:]), dtype=np.int64)
        table[present] = values
        return table[local]

    def _done(self) -> None:
        """A column of a spilled read is complete: its pages (and its source's) leave the resident set."""
        if self._spill is not None:
            release_pages()

    def _fill(self, dst: np.ndarray, src: np.ndarray, order: np.ndarray, fn: Any = None) -> None:
        """``dst[i] = fn(src[order[i]])``, a block of rows at a time: no temporary of the table's length. In
        another thread for a big table (:meth:`_wait` waits for them all), so ``fn`` must not intern names."""
        self._unwritten.pop(id(dst), None)
        pool = self._pool_for(order.size)
        if pool is None:
            _fill_blocks(dst, src, order, fn, _BLOCK_ROWS, False)
            self._done()
        else:
            self._pending.append(pool.submit(self._fill_and_release, dst, src, order, fn))

    def _fill_names(self, dst: np.ndarray, src: np.ndarray, order: np.ndarray) -> None:
        """:meth:`_fill` interning names, in this thread: names are interned in the order of the calls."""
        self._unwritten.pop(id(dst), None)
        threaded = self._pool is not None
        _fill_blocks(dst, src, order, self._intern, _NAME_BLOCK_ROWS if threaded else _BLOCK_ROWS, threaded)
        self._done()

    def _fill_and_release(self, dst: np.ndarray, src: np.ndarray, order: np.ndarray, fn: Any) -> None:
        # A spilled read's pages go back block by block (this column's only: the other threads' stay resident while
        # they fill theirs).
        _fill_blocks(dst, src, order, fn, _THREAD_BLOCK_ROWS, self._spill is not None)

    def _pool_for(self, rows: int) -> Any:
        """The threads that fill a table of ``rows`` rows, started on the first big table; None: this thread."""
        if self._pool is None and self._threads > 1 and rows >= PARALLEL_ROWS:
            from concurrent.futures import ThreadPoolExecutor  # here: most reads have no big table

            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="dnnprof-fill")
        return self._pool if rows >= PARALLEL_ROWS else None

    def _written_later(self, t: dict[str, np.ndarray], *cols: str) -> None:
        """Columns of ``t`` that a later step writes in full (no fill value needed first)."""
        for c in cols:
            self._unwritten.pop(id(t[c]), None)

    def _wait(self) -> None:
        """Every column given to the threads is filled (the first error is raised), and the table's mapped columns
        that no fill wrote hold their fill value."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()
        if pending:
            self._done()  # the threads gave back their own columns' pages as they went; here the heap's too
        unwritten, self._unwritten = self._unwritten, {}
        for col in unwritten.values():
            col[:] = fill_value(col.dtype)
            self._done()

    def _start(self, table: str, cols: dict[str, np.ndarray], order: np.ndarray, rank: int) -> dict[str, np.ndarray]:
        """A table of ``order.size`` rows with rank, start and duration; the columns used are dropped from ``cols``
        (as every later one is, once copied in order: a table's input shrinks as its output grows)."""
        # A big table's mapped columns are made as zeros: those the fills write are written once (see _wait).
        t = empty_table(table, order.size, None if self._spill is None else self._spill.folder, prefill=False)
        assert not self._unwritten, "the previous table was not waited for"  # its unwritten columns: still zeros
        if self._spill is not None:
            self._unwritten = {id(c): c for c in t.values()}
            self._unwritten.pop(id(t["rank"]))
        t["rank"][:] = rank
        if order.size:
            self._fill(t["start_ns"], cols.pop("ts"), order, _ns)
            self._fill(t["dur_ns"], cols.pop("dur"), order, _duration_ns)
        return t

    def _ops(self, rank: int) -> dict[str, np.ndarray]:
        cols, counts = self._concat("ops")
        if not counts:
            return empty_table("ops", 0)
        # A stable sort by (ts, -dur) from category-then-file order: parents (longer) before children that start
        # together. (The previous reader concatenated categories in frozenset order, which varied between runs
        # when two ops of different categories tied on both; none of the recorded traces has such a tie.)
        # A big trace's ops are tens of millions: start_order sorts them a range of starts at a time.
        order = start_order(cols["ts"], cols["dur"])
        self._collective_rows["ops"] = self.collectives.rows_of(counts, order)
        t = self._start("ops", cols, order, rank)
        cats = np.concatenate([np.full(n, OP_CATEGORIES.index(c), dtype=np.int8) for c, n in counts])
        self._fill(t["tid"], cols.pop("tid"), order)
        self._fill_names(t["name_id"], cols.pop("name"), order)
        self._fill(t["category"], cats, order)
        for k in ("external_id", "sequence_nr", "fwd_thread_id"):
            self._fill(t[k], cols.pop(k), order)
        self._fill_names(t["module_id"], cols.pop("module"), order)
        self._fill_names(t["stack_id"], cols.pop("stack"), order)
        self._fill_names(t["input_dims_id"], cols.pop("dims"), order)
        self._written_later(t, "parent_row", "depth")
        self._wait()
        del order, cats  # the sort of every op, not held through the nesting
        release_pages()
        nest(t)
        return t

    def _runtime(self, rank: int) -> dict[str, np.ndarray]:
        cols, counts = self._concat("runtime")
        if not counts:
            return empty_table("runtime", 0)
        order = np.argsort(cols["ts"], kind="stable")
        t = self._start("runtime", cols, order, rank)
        self._fill(t["tid"], cols.pop("tid"), order)
        names = cols.pop("name")
        self._fill_names(t["name_id"], names, order)
        self._fill(t["api_kind"], names, order, lambda v: self._by_name(v, api_kind))
        del names
        self._fill(t["correlation"], cols.pop("correlation"), order)
        self._fill(t["cbid"], cols.pop("cbid"), order)
        driver = np.concatenate([np.full(n, c == "cuda_driver") for c, n in counts])
        self._fill(t["driver"], driver, order)
        self._written_later(t, "op_row")  # by tables(), once the ops are nested
        return t

    def _gpu(self, table: str, rank: int) -> dict[str, np.ndarray]:
        cols, counts = self._concat(table)
        if not counts:
            return empty_table(table, 0)
        order = np.argsort(cols["ts"], kind="stable")
        if table == "kernels":
            self._collective_rows[table] = self.collectives.rows_of(counts, order)
        t = self._start(table, cols, order, rank)
        self._fill(t["device"], cols.pop("device"), order)
        self._fill(t["stream"], cols.pop("stream"), order)
        names = cols.pop("name")
        self._fill_names(t["name_id"], names, order)
        if "correlation" in t:
            self._fill(t["correlation"], cols.pop("correlation"), order)
        if table == "kernels":
            for name in ("grid", "block"):
                dims = cols.pop(name)
                for i, axis in enumerate("xyz"):
                    self._fill(t[f"{name}_{axis}"], dims[:, i], order)
            for k in ("registers_per_thread", "shared_memory_bytes", "blocks_per_sm", "warps_per_sm",
                      "est_occupancy_pct", "graph_id"):
                self._fill(t[k], cols.pop(k), order)
        elif table == "memcpy":
            for i, k in enumerate(("kind", "src_mem", "dst_mem")):
                self._fill(t[k], names, order, lambda v, i=i: self._by_name(v, _memcpy_kind)[:, i])
            self._fill(t["bytes"], cols.pop("bytes"), order)
        elif table == "memset":
            self._fill(t["dst_mem"], names, order, lambda v: self._by_name(v, _memset_kind))
            self._fill(t["bytes"], cols.pop("bytes"), order)
        return t


#: Per-chunk columns kept in the dtype their table column has (the assignment into the table would cast the same
#: way, element by element), so the columns held until the end take half the memory. Times, durations and ids that
#: are sorted or compared before the cast stay 64-bit.
_NARROW = {
    "name": np.int32, "module": np.int32, "stack": np.int32, "dims": np.int32, "cbid": np.int32,
    "device": np.int16, "stream": np.int32, "grid": np.int32, "block": np.int32, "registers_per_thread": np.int16,
    "shared_memory_bytes": np.int32, "blocks_per_sm": np.float32, "warps_per_sm": np.float32,
    "est_occupancy_pct": np.float32,
}


def _fill_blocks(dst: np.ndarray, src: np.ndarray, order: np.ndarray, fn: Any, rows: int, release: bool) -> None:
    """``dst[i] = fn(src[order[i]])`` ``rows`` rows at a time; ``release``: mapped columns' pages given back after
    each block (with several columns filled at once, each would otherwise become resident whole)."""
    for i in range(0, order.size, rows):
        o = order[i:i + rows]
        v = src[o]
        dst[i:i + o.size] = v if fn is None else fn(v)
        if release:
            release_pages_of(dst, src)


def _duration_ns(values: np.ndarray) -> np.ndarray:
    return np.maximum(_ns(values), 0)


def _narrow(table: str, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for k, dt in _NARROW.items():
        if k in cols:
            cols[k] = cols[k].astype(dt)
    return cols


def modern_categories(buckets: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Events bucketed by category with the legacy (torch 1.8/1.9) categories renamed (:data:`LEGACY_CATEGORIES`),
    ``record_function`` ranges among legacy ``Operator`` events moved to ``user_annotation``; file order kept."""
    out: dict[str, list[Any]] = {}
    for cat, evs in buckets.items():
        new = LEGACY_CATEGORIES.get(cat)
        if new is None:
            out.setdefault(cat, []).extend(evs)
        elif cat == "Operator":
            for e in evs:
                out.setdefault("user_annotation" if _LEGACY_ANNOTATION_MARK in e.name else new, []).append(e)
        else:
            out.setdefault(new, []).extend(evs)
    return out


def correlation_index(runtime: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The runtime calls' rows by correlation id, and their ids in that order (for :func:`link_by_correlation`)."""
    order = np.argsort(runtime["correlation"], kind="stable")
    if order.size < 2**31:
        order = order.astype(np.int32)  # 12 bytes a call held, not 16
    return order, runtime["correlation"][order]


def link_by_correlation(gpu: dict[str, np.ndarray], runtime: dict[str, np.ndarray],
                        index: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """launch_row/op_row of GPU activities from the runtime call with the same correlation id (``index``: the
    runtime's :func:`correlation_index`, when it serves several tables)."""
    corr = runtime["correlation"]
    if corr.size == 0 or gpu["correlation"].size == 0:
        gpu["launch_row"][:] = -1
        gpu["op_row"][:] = -1
        return
    order, sc = correlation_index(runtime) if index is None else index
    for a in range(0, gpu["correlation"].size, _BLOCK_ROWS):  # a big trace's activities: a block's temporaries
        b = a + _BLOCK_ROWS
        c = gpu["correlation"][a:b]
        i = np.clip(np.searchsorted(sc, c), 0, sc.size - 1)
        hit = (sc[i] == c) & (c >= 0)
        launch = gpu["launch_row"][a:b]
        launch[:] = np.where(hit, order[i], -1)
        gpu["op_row"][a:b] = np.where(hit, runtime["op_row"][np.clip(launch, 0, None)], -1)
        # the mapped columns' pages: the runtime's op rows are read all over, the activities' in order
        release_pages_of(gpu["correlation"], gpu["launch_row"], gpu["op_row"], runtime["op_row"])


def fwdbwd(ops: dict[str, np.ndarray], pairs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
           threads: ThreadRows | None = None) -> None:
    """fwd_row of backward ops from `fwdbwd` flow pairs (start 's' at the forward op, end 'f' at the backward op):
    ``pairs`` as :meth:`FlowPoints.pairs` gives them. ``threads``: the ops' rows by thread, when the caller has
    them."""
    fwd_tid, fwd_ts, bwd_tid, bwd_ts = pairs
    if fwd_tid.size == 0 or ops["start_ns"].size == 0:
        return
    threads = ThreadRows(ops) if threads is None else threads
    fwd_rows = innermost_enclosing(ops, fwd_tid, fwd_ts, threads=threads)
    bwd_rows = innermost_enclosing(ops, bwd_tid, bwd_ts, threads=threads)
    ok = (fwd_rows >= 0) & (bwd_rows >= 0)
    ops["fwd_row"][bwd_rows[ok]] = fwd_rows[ok]
