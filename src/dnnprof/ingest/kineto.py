"""Kineto / torch.profiler Chrome-trace JSON → canonical Profile.

Format drift across torch 2.0–2.11 is handled here and nowhere else:
* ``ts``/``dur`` are µs floats, relative to ``baseTimeNanoseconds`` (torch ≥ 2.3) or absolute epoch µs (older);
* the kernel category is ``kernel`` or ``Kernel``; ``pid``/``tid`` may be ints or strings;
* ``distributedInfo`` may be missing (single process), as may ``deviceProperties`` (CPU-only traces);
* args appear and disappear between versions (``Record function id``, ``graph id``, ``occupancy`` …);
* torch 1.8/1.9 wrote other category names (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``, with
  ``record_function`` ranges under ``Operator``): :data:`~dnnprof.ingest.kineto_tables.LEGACY_CATEGORIES`;
* ROCm and MTIA builds write the same format for other vendors' devices (:mod:`dnnprof.ingest.vendor`).

The file is streamed: gunzipped in pieces, split into arrays of a few thousand whole events
(:mod:`dnnprof.ingest.trace_stream`), each decoded with msgspec typed structs for the fields dnnprof needs and
turned into compact columns at once (:mod:`dnnprof.ingest.kineto_tables`). Events are a union tagged by ``ph``:
complete ('X') events carry what the tables need, every other phase only what a ``fwdbwd`` flow needs, so the
~half of all events that are ``ac2g`` flows cost little. When a field's type
drifted in a way the strict structs reject, that chunk is decoded again with lenient structs and coerced here.
A document the splitter cannot handle is decoded as one buffer, with the same structs and the same result.
"""

from __future__ import annotations

import contextlib
import gc
import tempfile
import zlib
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import msgspec
import numpy as np

from dnnprof.ingest import progress
from dnnprof.ingest.column_spill import SpilledColumns
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.graph_replays import match_captured_replays
from dnnprof.ingest.kineto_split import PARALLEL_MIN_BYTES, read_in_parallel, read_workers, worth_splitting
from dnnprof.ingest.kineto_tables import EventColumns
from dnnprof.ingest.nesting import distinct
from dnnprof.ingest.trace_stream import CHUNK_BYTES, SplitError, read_pieces, split_events
from dnnprof.ingest.vendor import vendor_of_events, vendor_of_name
from dnnprof.model.device import DeviceInfo
from dnnprof.model.mapped_columns import (
    gather,
    large_blocks_returned_on_free,
    release_pages,
    rows_where,
)
from dnnprof.model.profile import Profile
from dnnprof.model.schema import OP_CATEGORIES
from dnnprof.model.steps import assign_steps

_F = msgspec.field
#: An integer the tables can hold. A larger one (an ``External id`` beyond int64, a grid of 2**64-1) fails the
#: strict decode, so its chunk takes the lenient path, where it is read as unknown and counted in a note —
#: whichever events share its chunk.
#: From this file size (gzip: compressed) the columns go to a temporary folder as they are read, not to memory.
SPILL_MIN_BYTES = 64 << 20

_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Args(msgspec.Struct, gc=False):
    # Fields in the order Kineto writes them: msgspec looks each key up from the field after the last match.
    external_id: _I64 | None = _F(name="External id", default=None)
    sequence_nr: _I64 | None = _F(name="Sequence number", default=None)
    fwd_thread_id: _I64 | None = _F(name="Fwd thread id", default=None)
    input_dims: Any = _F(name="Input Dims", default=None)
    call_stack: str | None = _F(name="Call stack", default=None)
    module_hierarchy: str | None = _F(name="Module Hierarchy", default=None)
    cbid: _I64 | None = None
    device: _I64 | None = None
    stream: _I64 | None = None
    correlation: _I64 | None = None
    registers: _I64 | None = _F(name="registers per thread", default=None)
    shared_memory: _I64 | None = _F(name="shared memory", default=None)
    blocks_per_sm: float | None = _F(name="blocks per SM", default=None)
    warps_per_sm: float | None = _F(name="warps per SM", default=None)
    grid: list[_I64] | None = None
    block: list[_I64] | None = None
    est_occupancy: float | None = _F(name="est. achieved occupancy %", default=None)
    bytes: _I64 | None = None
    graph_id: _I64 | None = _F(name="graph id", default=None)
    # a collective's description (torch.distributed), on its record_param_comms op and NCCL kernel: any JSON type,
    # read by ingest.collectives
    seq: Any = _F(name="Seq", default=None)
    coll_name: Any = _F(name="Collective name", default=None)
    in_nelems: Any = _F(name="In msg nelems", default=None)
    out_nelems: Any = _F(name="Out msg nelems", default=None)
    group_size: Any = _F(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = _F(name="Process Group Name", default=None)
    pg_desc: Any = _F(name="Process Group Description", default=None)
    pg_ranks: Any = _F(name="Process Group Ranks", default=None)


class _LenientArgs(msgspec.Struct, gc=False):
    external_id: Any = _F(name="External id", default=None)
    sequence_nr: Any = _F(name="Sequence number", default=None)
    fwd_thread_id: Any = _F(name="Fwd thread id", default=None)
    input_dims: Any = _F(name="Input Dims", default=None)
    call_stack: Any = _F(name="Call stack", default=None)
    module_hierarchy: Any = _F(name="Module Hierarchy", default=None)
    cbid: Any = None
    device: Any = None
    stream: Any = None
    correlation: Any = None
    registers: Any = _F(name="registers per thread", default=None)
    shared_memory: Any = _F(name="shared memory", default=None)
    blocks_per_sm: Any = _F(name="blocks per SM", default=None)
    warps_per_sm: Any = _F(name="warps per SM", default=None)
    grid: Any = None
    block: Any = None
    est_occupancy: Any = _F(name="est. achieved occupancy %", default=None)
    bytes: Any = None
    graph_id: Any = _F(name="graph id", default=None)
    seq: Any = _F(name="Seq", default=None)
    coll_name: Any = _F(name="Collective name", default=None)
    in_nelems: Any = _F(name="In msg nelems", default=None)
    out_nelems: Any = _F(name="Out msg nelems", default=None)
    group_size: Any = _F(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = _F(name="Process Group Name", default=None)
    pg_desc: Any = _F(name="Process Group Description", default=None)
    pg_ranks: Any = _F(name="Process Group Ranks", default=None)
    total_reserved: Any = _F(name="Total Reserved", default=None)
    total_allocated: Any = _F(name="Total Allocated", default=None)
    alloc_bytes: Any = _F(name="Bytes", default=None)
    device_id: Any = _F(name="Device Id", default=None)
    device_type: Any = _F(name="Device Type", default=None)
    addr: Any = _F(name="Addr", default=None)


class _MemoryArgs(msgspec.Struct, gc=False):
    """Args of a ``[memory]`` instant (an allocation or a free), in the order Kineto writes them."""

    total_reserved: _I64 | None = _F(name="Total Reserved", default=None)
    total_allocated: _I64 | None = _F(name="Total Allocated", default=None)
    alloc_bytes: _I64 | None = _F(name="Bytes", default=None)
    device_id: _I64 | None = _F(name="Device Id", default=None)
    device_type: _I64 | None = _F(name="Device Type", default=None)
    addr: _I64 | None = _F(name="Addr", default=None)


#: Every ``ph`` of the Chrome trace format and every Kineto category: decoded as Literals, they are shared
#: string objects instead of one new string per event. An unknown value sends the chunk down the lenient path.
_Phase = Literal["X", "B", "E", "i", "I", "s", "t", "f", "M", "C", "b", "n", "e", "P", "O", "N", "D", "R", "c", ""]
_Category = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel", "Kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function", "overhead",
    "mtia_runtime", "mtia_ccp_events", "mtia_insight", "cuda_sync", "cuda_event", "mtia_counters", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "xpu_scope_profiler", "xpu_sync", "hardware_counters", "ac2g", "fwdbwd", "Trace",
    "async_cpu_to_gpu", "forward_backward", "Memset", "Memcpy", "Runtime", "Operator", "",
]


class _Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete ('X') event: an op, a runtime call, a kernel, a copy …"""

    cat: _Category = ""
    name: str = ""
    pid: _I64 | str = 0
    tid: _I64 | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


class _Marker(msgspec.Struct, tag_field="ph", gc=False):
    """Any other phase (flows, instants, metadata, counters …), with only the fields a ``fwdbwd`` flow needs."""

    cat: _Category = ""
    id: int | str | None = None
    tid: _I64 | str = 0
    ts: float = 0.0


class _Instant(_Marker, tag="i", gc=False):
    """An instant ('i') event: torch.profiler's ``[memory]`` allocations and frees carry their sizes in args."""

    name: str = ""
    args: _MemoryArgs | None = None


#: One tagged subclass per phase; the lenient path gives unknown phases the untagged-in-practice base class.
_MARKERS: dict[str, type[_Marker]] = {
    ph: _Instant if ph == "i" else msgspec.defstruct(f"_Marker_{i}", [], bases=(_Marker,), tag=ph, gc=False)
    for i, ph in enumerate(get_args(_Phase)) if ph != "X"
}
_FLOW_START = _MARKERS["s"]
#: The name torch.profiler gives allocation/free instants (recorded with ``profile_memory=True``).
MEMORY_EVENT = "[memory]"
_Event = Union[(_Complete, *_MARKERS.values())]  # a union of runtime-built types


class _LenientEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = 0.0
    dur: Any = 0.0
    id: Any = None
    args: _LenientArgs | None = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event]  # type: ignore[valid-type]
    deviceProperties: list[Any] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: _I64 | None = None
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


_EVENTS = msgspec.json.Decoder(list[_Event])  # type: ignore[valid-type]
_LENIENT_EVENTS = msgspec.json.Decoder(list[_LenientEvent])


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


def _decode(path: Path, data: bytes, tally: Counter[str] | None = None) -> _Trace:
    """The whole document in one buffer → strict events (lenient ones coerced); every error message."""
    stripped = data[:4096].lstrip()
    if not stripped:
        if not data.strip():
            raise TraceError(f"{path}: empty file")
        stripped = data.lstrip()
    bare = stripped[:1] == b"["
    if bare:  # the Chrome trace format also allows a bare array of events
        data = b'{"traceEvents":' + data + b"}"
    elif stripped[:1] != b"{":
        raise TraceError(f"{path}: not JSON (starts with {stripped[:16]!r})")
    try:
        return msgspec.json.decode(data, type=_Trace)
    except UnicodeDecodeError:
        if tally is not None:
            tally["bad_utf8"] = 1
        return _decode(path, valid_utf8(data), tally)
    except msgspec.ValidationError as strict_error:
        if "missing required field `traceEvents`" in str(strict_error):
            raise TraceError(f"{path}: JSON but not a Chrome/Kineto trace (no 'traceEvents')") from None
        try:
            return _coerce(msgspec.json.decode(data, type=_LenientTrace), tally)
        except UnicodeDecodeError:
            if tally is not None:
                tally["bad_utf8"] = 1
            return _decode(path, valid_utf8(data), tally)
        except msgspec.ValidationError as e:
            if bare and "$.traceEvents[" in str(e):
                raise TraceError(f"{path}: a JSON array whose items are not trace events: not a Chrome/Kineto trace "
                                 "(torch.profiler's export_memory_timeline raw output is such an array)") from None
            raise TraceError(f"{path}: JSON but not a Chrome/Kineto trace ({e})") from None
        except msgspec.DecodeError as e:
            raise TraceError(f"{path}: invalid JSON ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None


def _decode_events(chunk: bytes | memoryview, tally: Counter[str] | None = None) -> list[Any]:
    """One JSON array of events → strict events, lenient ones coerced.

    Raises:
        msgspec.DecodeError: not valid JSON (including a lenient decode that fails on syntax).
        SplitError: valid JSON that is not an array of events (the whole-buffer path words the error).
    """
    try:
        return _EVENTS.decode(chunk)
    except msgspec.ValidationError:
        try:
            return _coerce_events(_LENIENT_EVENTS.decode(chunk), tally)
        except msgspec.ValidationError:
            raise SplitError("not an array of events") from None
        except UnicodeDecodeError:
            pass
    except UnicodeDecodeError:
        pass
    if tally is not None:
        tally["bad_utf8"] = 1
    return _decode_events(valid_utf8(chunk), tally)


def valid_utf8(data: bytes | memoryview) -> bytes:
    """``data`` with every invalid UTF-8 sequence replaced by U+FFFD (names stay readable, the rest is kept)."""
    return bytes(data).decode("utf-8", "replace").encode()


#: Ranks the profile's int16 rank column holds.
RANK_LIMIT = 2**15


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
    """An int64 from a number or numeric string; ``default`` for anything else, NaN, ±inf or a value out of range."""
    x = _num(v, default)
    return int(x) if x == x and -(2**63) <= x < 2**63 else default


def _counted_int(v: Any, default: int, tally: Counter[str]) -> int:
    """``_int``, counting a number beyond int64 (``out_of_range``): it is read as ``default`` (unknown)."""
    x = _int(v, default)
    if x == default and isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != default:
        tally["out_of_range"] += 1
    return x


# ---------------------------------------------------------------------------------------------------------------
def _coerce_args(a: _LenientArgs | None, tally: Counter[str]) -> _Args | None:
    if a is None:
        return None
    ints = ("external_id", "correlation", "device", "stream", "registers", "shared_memory", "bytes", "cbid",
            "sequence_nr", "fwd_thread_id", "graph_id")
    floats = ("blocks_per_sm", "warps_per_sm", "est_occupancy")
    kw: dict[str, Any] = {}
    for f in ints:
        v = getattr(a, f)
        kw[f] = None if v is None else _counted_int(v, -1, tally)
    for f in floats:
        v = getattr(a, f)
        kw[f] = None if v is None else float(_num(v, np.nan))
    for f in ("grid", "block"):
        v = getattr(a, f)
        if not isinstance(v, (list, tuple)):
            kw[f] = None
            continue
        big = sum(isinstance(x, int) and not -(2**63) <= x < 2**63 for x in v)
        tally["out_of_range"] += big
        kw[f] = None if big else [_int(x, 1) for x in v]  # a size beyond int64: the launch's grid is unknown
    for f in ("call_stack", "module_hierarchy"):
        v = getattr(a, f)
        kw[f] = None if v is None else str(v)
    kw["input_dims"] = a.input_dims
    for f in ("seq", "coll_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_desc", "pg_ranks"):
        kw[f] = getattr(a, f)  # any JSON type: ingest.collectives reads them leniently
    return _Args(**kw)


def _coerce_memory_args(a: _LenientArgs | None, tally: Counter[str]) -> _MemoryArgs | None:
    if a is None:
        return None
    fields = ("total_reserved", "total_allocated", "alloc_bytes", "device_id", "device_type", "addr")
    return _MemoryArgs(**{f: None if (v := getattr(a, f)) is None else _counted_int(v, -1, tally) for f in fields})


def _thread(v: Any, tally: Counter[str]) -> int | str:
    """A pid/tid as the strict struct holds it: an int64 or a string; anything else 0, an int beyond int64 -1."""
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return _counted_int(v, -1, tally)
    return 0


def _coerce_events(events: list[_LenientEvent], tally: Counter[str] | None = None) -> list[Any]:
    """Lenient (drifted) events → strict events, coercing every field once. A complete event without a valid
    timestamp is left out, one without a valid duration gets 0; ``tally`` counts both (``no_ts``, ``no_dur``).
    A negative duration is kept, as the strict path keeps it: the columns count and clip those, whichever path an
    event took (its chunk's other events decide that)."""
    out: list[Any] = []
    tally = Counter() if tally is None else tally
    for e in events:
        ph, tid = str(e.ph), _thread(e.tid, tally)
        eid = e.id if isinstance(e.id, (int, str)) else None
        if ph == "X":
            ts, dur = float(_num(e.ts, np.nan)), float(_num(e.dur, np.nan))
            if not np.isfinite(ts):
                tally["no_ts"] += 1
                continue
            if not np.isfinite(dur):
                tally["no_dur"] += 1
                dur = 0.0
            out.append(_Complete(cat=str(e.cat), name=str(e.name), pid=_thread(e.pid, tally), tid=tid, ts=ts, dur=dur,
                                 args=_coerce_args(e.args, tally)))
        elif ph == "i":
            out.append(_Instant(cat=str(e.cat), id=eid, tid=tid, ts=float(_num(e.ts, 0)), name=str(e.name),
                                args=_coerce_memory_args(e.args, tally)))
        else:
            out.append(_MARKERS.get(ph, _Marker)(cat=str(e.cat), id=eid, tid=tid, ts=float(_num(e.ts, 0))))
    return out


def _coerce(trace: _LenientTrace, tally: Counter[str] | None = None) -> _Trace:
    """Lenient (drifted) document → strict, coercing every field once."""
    base = trace.baseTimeNanoseconds
    return _Trace(traceEvents=_coerce_events(trace.traceEvents, tally), deviceProperties=trace.deviceProperties if isinstance(
        trace.deviceProperties, list) else None, distributedInfo=trace.distributedInfo if isinstance(
        trace.distributedInfo, dict) else None, baseTimeNanoseconds=base if isinstance(base, int) and not isinstance(
        base, bool) and -(2**63) <= base < 2**63 else None, schemaVersion=trace.schemaVersion, trace_id=trace.trace_id,
        cuda_driver_version=trace.cuda_driver_version, cuda_runtime_version=trace.cuda_runtime_version,
        cupti_version=trace.cupti_version)


def _add_events(cols: EventColumns, events: list[Any]) -> None:
    """Bucket complete events by category into ``cols``; keep ``fwdbwd`` flow points (any other phase) and
    ``[memory]`` instants."""
    buckets: defaultdict[str, list[Any]] = defaultdict(list)
    flows: list[Any] = []
    instants: list[Any] = []
    complete, instant = _Complete, _Instant
    for e in events:
        if type(e) is complete:
            buckets[e.cat].append(e)
        elif e.cat == "fwdbwd":
            flows.append(e)
        elif type(e) is instant:
            instants.append(e)
    cols.add(buckets)
    if flows:
        cols.add_flows([type(e) is _FLOW_START for e in flows], flows)
    if instants:
        cols.add_memory([e for e in instants if e.name == MEMORY_EVENT and e.args is not None])


def _devices(props: list[Any] | None, rank: int, tally: Counter[str]) -> list[DeviceInfo]:
    out = []
    for d in props or []:
        if not isinstance(d, dict):
            tally["bad_device"] += 1
            continue
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


def read_kineto(path: str | Path, rank: int | None = None, workers: int | None = None) -> Profile:
    """Read one Kineto trace file (``.json`` or ``.json.gz``) into a canonical :class:`Profile`.

    Args:
        path: the trace file.
        rank: rank to record; default: ``distributedInfo.rank`` when present, else 0.
        workers: processes that read a big plain file, this one included; default: the cores this process may
            use, at most 8, or ``DNNPROF_READ_WORKERS`` (:func:`dnnprof.ingest.kineto_split.read_workers`).

    Raises:
        TraceError: missing or unreadable file, bad gzip, invalid JSON, JSON that is not a trace.
    """
    return _read_profile(Path(path), rank, workers=workers)


def _read_profile(path: Path, rank: int | None, chunk_bytes: int = CHUNK_BYTES, stream: bool = True,
                  parallel_min_bytes: int = PARALLEL_MIN_BYTES, spill_min_bytes: int = SPILL_MIN_BYTES,
                  workers: int | None = None) -> Profile:
    """read_kineto with the knobs the tests turn: chunk size, streaming or one buffer, from which size a plain
    file is read by several processes (and by how many), from which file size the columns are spilled to a
    temporary folder while reading."""
    with contextlib.ExitStack() as stack:
        spill = None
        if stream and _size(path) >= spill_min_bytes:
            spill = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dnnprof-read-")))
            large_blocks_returned_on_free()
        return _read_profile_in(path, rank, chunk_bytes, stream, parallel_min_bytes, spill, workers)


def _read_profile_in(path: Path, rank: int | None, chunk_bytes: int, stream: bool, parallel_min_bytes: int,
                     spill: Path | None, workers: int | None) -> Profile:
    # Many small, acyclic objects: the cyclic GC would only rescan them over and over.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        tally: Counter[str] = Counter()
        cols, trace = _stream(path, chunk_bytes, tally, parallel_min_bytes, spill, workers) if stream else (None, None)
        if cols is None or trace is None:
            tally.clear()
            cols, trace = EventColumns(), _decode(path, read_bytes(path), tally)
            _add_events(cols, trace.traceEvents)
            trace.traceEvents = []
        # A spilled (big) trace's tables are filled by as many threads as a big plain trace is read by processes.
        threads = 1 if spill is None else read_workers() if workers is None else workers
        profile = _build(path, rank, cols, trace, tally, threads)
        match_captured_replays(profile)
        release_pages()  # a big trace's mapped tables, touched by the steps: none resident when the read returns
        tally["no_dur"] += cols.negative_durations
        notes = [f"{tally['no_ts']:,} events without a valid timestamp were left out"] if tally["no_ts"] else []
        if tally["no_dur"]:
            notes.append(f"{tally['no_dur']:,} events without a valid duration were read as 0 long")
        if tally["out_of_range"]:
            notes.append(f"{tally['out_of_range']:,} numbers beyond the 64-bit range (ids, sizes, threads) were "
                         "read as unknown")
        if tally["bad_rank"]:
            notes.append(f"distributedInfo.rank is not a rank from 0 to {RANK_LIMIT - 1:,}: read as rank 0")
        if tally["bad_device"]:
            notes.append(f"{tally['bad_device']:,} deviceProperties entries that are not objects were ignored")
        if tally["bad_utf8"]:
            notes.append("invalid UTF-8 in the trace was read as U+FFFD (the replacement character)")
        if notes:
            profile.meta["source"]["notes"] = notes
        return profile
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply to read (an event or field nests hundreds of levels; "
                         "Kineto writes a few)") from None
    finally:
        if was_enabled:
            gc.enable()


def _stream(path: Path, chunk_bytes: int, tally: Counter[str] | None = None, parallel_min_bytes: int | None = None,
            spill: Path | None = None, workers: int | None = None) -> tuple[EventColumns | None, _Trace | None]:
    """Columns and the document without its events, decoded chunk by chunk (by several processes for a plain file
    of at least ``parallel_min_bytes``); (None, None) when the document does not split (the caller then decodes the whole
    buffer). File and gzip errors are raised as they are found."""
    tally = Counter() if tally is None else tally
    listener = progress.current()
    total = _size(path) if listener is not None else 0

    def report(done: int, events: int) -> None:
        if listener is not None:
            listener(path, done, total, events)

    if parallel_min_bytes is not None and worth_splitting(path, parallel_min_bytes, workers):
        parts = read_in_parallel(path, _decode_events, _add_events, chunk_bytes, tally, report if listener else None,
                                 spill, workers)
        if parts is not None:
            try:
                return parts[0], _decode_envelope(parts[1])
            except SplitError:
                pass
        tally.clear()

    cols = EventColumns(None if spill is None else SpilledColumns(spill / "one-piece"))
    seen = [0, 0]

    def on_read(n: int) -> None:
        seen[0] = n

    def on_chunk(chunk: memoryview) -> None:
        events = _decode_events(chunk, tally)
        _add_events(cols, events)
        if listener is not None:
            seen[1] += len(events)
            report(*seen)

    with contextlib.closing(read_pieces(path, chunk_bytes, on_read)) as pieces:
        try:
            envelope = split_events(pieces, on_chunk, chunk_bytes)
            return cols, _decode_envelope(envelope)
        except SplitError:
            return None, None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _decode_envelope(data: bytes) -> _Trace:
    try:
        return msgspec.json.decode(data, type=_Trace)
    except msgspec.ValidationError:
        try:
            return _coerce(msgspec.json.decode(data, type=_LenientTrace))
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise SplitError("document fields") from None
    except UnicodeDecodeError:  # the whole-buffer path replaces it and says so
        raise SplitError("invalid UTF-8 in the document fields") from None


def _build(path: Path, rank: int | None, cols: EventColumns, trace: _Trace, tally: Counter[str],
           threads: int = 1) -> Profile:
    info = trace.distributedInfo or {}
    if rank is None:
        rank = _int(info.get("rank"), 0) if isinstance(info, dict) else 0
        if not 0 <= rank < RANK_LIMIT:  # the rank column is int16: a rank no launcher gives is unknown, rank 0
            tally["bad_rank"] += 1
            rank = 0
    profile = Profile()
    profile.tables.update(cols.tables(profile, rank, threads))
    profile.devices = _devices(trace.deviceProperties, rank, tally)
    _vendor(profile, cols)
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


def _vendor(profile: Profile, cols: EventColumns) -> None:
    """Record who made the accelerator (``DeviceInfo.vendor``, ``meta["device_vendor"]``) and how many complete
    events each category had (``meta["event_counts"]``: what the trace holds beyond the tables, such as CUPTI
    range-profiler records or MTIA device events)."""
    def names(table: str) -> list[str]:
        return [profile.strings[i] for i in distinct(profile.tables[table]["name_id"]).tolist() if i >= 0]

    from_events = vendor_of_events(cols.categories, names("runtime"), names("kernels"))
    profile.devices = [replace(d, vendor=vendor_of_name(d.name) or from_events) for d in profile.devices]
    profile.meta["device_vendor"] = next((d.vendor for d in profile.devices if d.vendor), from_events)
    profile.meta["event_counts"] = dict(sorted(cols.categories.items()))


def _profiler_steps(profile: Profile, rank: int) -> None:
    """Steps from ``ProfilerStep#N`` annotations on the host, when the trace has them."""
    ops = profile.tables["ops"]
    if ops["name_id"].size == 0:
        return
    release_pages()  # the tables' pages, touched while they were made
    step_ids = np.array([i for i, s in enumerate(profile.strings) if s.startswith("ProfilerStep#")], dtype=np.int32)
    if step_ids.size == 0:
        return
    annotation = OP_CATEGORIES.index("user_annotation")
    rows = rows_where(ops["name_id"].size,  # a big trace's ops are tens of millions: a block at a time
                      lambda lo, hi: (ops["category"][lo:hi] == annotation) & np.isin(ops["name_id"][lo:hi], step_ids),
                      ops["category"], ops["name_id"])
    if rows.size == 0:
        return
    # each row read maps its neighbours' pages too: the rows are gathered a block of the columns at a time
    starts, ends, names = gather(ops["start_ns"], rows), gather(ops["dur_ns"], rows), gather(ops["name_id"], rows)
    ends += starts
    numbers = np.array([_int(profile.strings[i].rsplit("#", 1)[1], -1) for i in names.tolist()], dtype=np.int32)
    if (numbers < 0).any() or distinct(numbers).size != numbers.size:
        numbers = np.arange(rows.size, dtype=np.int32)
    assign_steps(profile, starts, ends, "profiler_step", numbers=numbers, name_ids=names, rank=rank)
