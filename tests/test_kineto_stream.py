"""Streaming Kineto ingest: chunked decoding gives exactly the profile of whole-buffer decoding.

The whole-buffer path (one msgspec decode of the gunzipped document) is the reference; the streamed path cuts
the event array at guessed boundaries, so these tests put the cuts everywhere: tiny chunks, writers that put
all events on one line, strings and nested objects that look like event boundaries, drifted field types.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from conftest import CPU_MLP, DATA, DEEPSPEECH, GPT2, load_raw
from dnnprof.ingest import kineto
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.trace_stream import SplitError, read_pieces, split_events
from dnnprof.model.profile import Profile

RECORDED = sorted((DATA / "h200_recorded").glob("*.json.gz"))


def assert_same_profile(a: Profile, b: Profile) -> None:
    assert a.strings == b.strings
    assert a.devices == b.devices
    assert a.meta == b.meta
    assert a.tables.keys() == b.tables.keys()
    for name, cols in a.tables.items():
        assert cols.keys() == b.tables[name].keys(), name
        for col, arr in cols.items():
            other = b.tables[name][col]
            assert arr.dtype == other.dtype, (name, col)
            assert np.array_equal(arr, other, equal_nan=arr.dtype.kind == "f"), (name, col)


def streamed(path: Path, chunk_bytes: int) -> Profile:
    """The streamed profile, after checking the document really streamed (no whole-buffer fallback)."""
    cols, _ = kineto._stream(path, chunk_bytes)
    assert cols is not None, "fell back to the whole-buffer path"
    return kineto._read_profile(path, None, chunk_bytes=chunk_bytes)


def whole(path: Path) -> Profile:
    return kineto._read_profile(path, None, stream=False)


def write(path: Path, doc: Any, gz: bool = False, **dumps: Any) -> Path:
    data = json.dumps(doc, **dumps).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH, CPU_MLP, *RECORDED], ids=lambda p: p.parent.name + "/" + p.name)
def test_real_traces_stream_to_the_same_profile(path: Path) -> None:
    reference = whole(path)
    assert reference.tables["ops"]["start_ns"].size > 0
    assert_same_profile(streamed(path, 4096), reference)
    assert_same_profile(kineto.read_kineto(path), reference)  # default chunk size


@pytest.mark.parametrize("chunk_bytes", [1, 97, 1000])
def test_tiny_chunks_cut_everywhere(chunk_bytes: int) -> None:
    assert_same_profile(streamed(CPU_MLP, chunk_bytes), whole(CPU_MLP))


@pytest.mark.parametrize("dumps", [{}, {"separators": (",", ":")}, {"indent": 1}], ids=["spaces", "compact", "indent1"])
def test_other_writers_formatting(tmp_path: Path, dumps: dict[str, Any]) -> None:
    """json.dumps puts every event on one line (or one field per line): boundaries are not lines."""
    path = write(tmp_path / "t.json", load_raw(GPT2), **dumps)
    reference = whole(path)
    assert_same_profile(streamed(path, 2048), reference)
    original = whole(GPT2)  # the same events, as Kineto formatted them
    assert reference.strings == original.strings
    assert all(np.array_equal(a, original.tables["kernels"][c], equal_nan=True)
               for c, a in reference.tables["kernels"].items())


def _tricky_doc() -> dict[str, Any]:
    """Events whose strings and nested args look like event boundaries and array ends."""
    events: list[dict[str, Any]] = []
    for i in range(60):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op}}, {{ ] {i}", "pid": 1, "tid": 1 + i % 2,
                       "ts": 10.0 * i, "dur": 25.0 - i % 7,
                       "args": {"External id": i, "Call stack": 'f.py(1): g}, {"ph": "X"}, ]',
                                "Input Dims": [[2, 3], [], [{"k": [1, {"z": "}, {"}]}, {"k2": 2}]],
                                "Module Hierarchy": "" if i % 3 else f"m{i % 4}",
                                "nested": [{"a": 1}, {"b": "]"}, {"c": [{"d": "}, {"}]}]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 10.0 * i + 1, "dur": 2.0, "args": {"cbid": 211, "correlation": 100 + i}})
        events.append({"ph": "s" if i % 2 == 0 else "f", "cat": "fwdbwd", "id": i // 2, "pid": 1,
                       "tid": 1 + i % 2, "ts": 10.0 * i, "name": "fwdbwd", "bp": "e"})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i % 5}", "pid": 0, "tid": 7, "ts": 10.0 * i + 3,
                       "dur": 4.0, "args": {"device": 0, "stream": 7, "correlation": 100 + i, "grid": [i + 1, 1, 1],
                                            "block": [128, 1, 1], "registers per thread": 32}})
        events.append({"ph": "f", "cat": "ac2g", "id": 100 + i, "pid": 0, "tid": 7, "ts": 10.0 * i + 3})
        if i % 9 == 4:  # no args at all, or empty args
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                           "ts": 10.0 * i + 5, "dur": 1.0})
            events.append({"ph": "X", "cat": "kernel", "name": "k_noargs", "pid": 0, "tid": 7, "ts": 10.0 * i + 6,
                           "dur": 1.0, "args": {} if i % 2 else None})
    return {"schemaVersion": 1, "note": 'a "traceEvents" lookalike ]', "traceEvents": events,
            "traceName": "x]}", "extra": [{"a": "]"}, [1, 2]], "baseTimeNanoseconds": 1000}


@pytest.mark.parametrize("dumps", [{}, {"separators": (",", ":")}, {"indent": 2}], ids=["spaces", "compact", "indent"])
def test_boundaries_inside_strings_and_nested_objects(tmp_path: Path, dumps: dict[str, Any]) -> None:
    path = write(tmp_path / "t.json.gz", _tricky_doc(), gz=True, **dumps)
    reference = whole(path)
    assert reference.tables["ops"]["start_ns"].size == 60
    assert (reference.tables["ops"]["fwd_row"] >= 0).sum() == 30
    assert reference.tables["ops"]["input_dims_id"].min() >= 0
    assert reference.meta["base_time_ns"] == 1000
    for chunk_bytes in (1, 50, 333, 4096):
        # Cuts inside nested objects either decode to the same events or fall back: never a different profile.
        assert_same_profile(kineto._read_profile(path, None, chunk_bytes=chunk_bytes), reference)
    assert_same_profile(streamed(path, 100_000), reference)


def test_drifted_field_types_stream_through_the_lenient_path(tmp_path: Path) -> None:
    doc = load_raw(GPT2)
    for e in doc["traceEvents"][::50]:
        args = e.get("args", {})
        if "External id" in args:
            args["External id"] = str(args["External id"])
        if e.get("cat") == "kernel":
            e["cat"] = "Kernel"
            args["grid"] = [str(x) for x in args["grid"]]
    path = write(tmp_path / "t.json", doc)
    assert_same_profile(streamed(path, 8192), whole(path))
    # And both agree with the undrifted trace, row for row.
    assert np.array_equal(whole(path).tables["kernels"]["grid_x"], whole(GPT2).tables["kernels"]["grid_x"])


def test_events_without_a_time_or_duration_are_said_not_hidden(tmp_path: Path) -> None:
    """A kernel without ``dur`` is read as 0 long and one without ``ts`` is left out; the profile says how many,
    streamed or not, and the summary and terminal carry the note."""
    doc = load_raw(GPT2)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[:5]:
        e["dur"] = None
    kernels[5]["ts"] = "n/a"
    path = write(tmp_path / "t.json", doc)
    for p in (streamed(path, 8192), whole(path)):
        assert p.meta["source"]["notes"] == ["1 events without a valid timestamp were left out",
                                             "5 events without a valid duration were read as 0 long"]
        assert p.rows("kernels") == whole(GPT2).rows("kernels") - 1
        assert (p.tables["kernels"]["dur_ns"] == 0).sum() >= 5
    assert "notes" not in whole(GPT2).meta["source"]
    from dnnprof.analysis.summary import summarize
    from dnnprof.render.html_report import render_html

    doc = summarize(whole(path))
    assert doc["source"]["notes"][1].startswith("5 events")
    assert "note: 5 events without a valid duration" in render_html(doc)


def test_numbers_out_of_int64_range_are_unknown_not_a_crash(tmp_path: Path) -> None:
    doc = load_raw(GPT2)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})]
    ops[0]["args"]["External id"] = 1e30
    ops[1]["args"]["Sequence number"] = -1e300
    path = write(tmp_path / "t.json", doc)
    p = whole(path)
    assert p.rows("ops") == whole(GPT2).rows("ops")
    assert -1 in p.tables["ops"]["external_id"].tolist()
    assert_same_profile(streamed(path, 8192), p)


def test_bare_array_and_empty_array(tmp_path: Path) -> None:
    events = load_raw(CPU_MLP)["traceEvents"]
    bare = write(tmp_path / "bare.json", events)
    assert_same_profile(streamed(bare, 1024), whole(bare))
    empty = write(tmp_path / "empty.json", {"traceEvents": [], "baseTimeNanoseconds": 5})
    p = streamed(empty, 1024)
    assert p.tables["ops"]["start_ns"].size == 0 and p.meta["base_time_ns"] == 5


def test_events_without_ph_in_a_document_that_does_not_split(tmp_path: Path) -> None:
    """The whole-buffer path meets a missing 'ph' as a drifted event, not as a missing 'traceEvents'."""
    doc = load_raw(CPU_MLP)
    doc["traceEvents"].insert(3, {"cat": "cpu_op", "name": "no phase", "ts": 1.0, "dur": 1.0})
    plain = write(tmp_path / "plain.json", doc)
    doc["meta"] = {"traceEvents": "a second key the splitter will not guess about"}
    odd = write(tmp_path / "odd.json", doc)
    assert kineto._stream(odd, 1024)[0] is None  # falls back
    a, b = whole(odd), streamed(plain, 1024)
    assert a.tables["ops"]["start_ns"].size == b.tables["ops"]["start_ns"].size > 0
    assert a.strings == b.strings


@pytest.mark.parametrize("make", [
    lambda raw: raw[: len(raw) // 2] + b"@@" + raw[len(raw) // 2 + 2:],   # broken somewhere in the events
    lambda raw: raw + b" trailing",
    lambda raw: raw[:-200],
    lambda raw: raw.replace(b'"ph": "X"', b'"ph": 5', 1),                  # valid JSON, not an event
    lambda raw: b'{"traceEvents": [1, 2]}',
    lambda raw: b'{"traceEvents": {"a": 1}}',
    lambda raw: b'{"meta": {"traceEvents": [{"ph": "X"}]}, "traceEvents": []}',
    lambda raw: b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a"}], "traceEvents": []}',
    lambda raw: b"  ",
    lambda raw: b'{"hello": 1}',
], ids=["mid", "trailing", "cut", "not-event", "numbers", "object", "nested", "duplicate", "blank", "no-events"])
@pytest.mark.parametrize("gz", [False, True])
def test_streaming_gives_the_same_result_or_error_as_one_buffer(tmp_path: Path, make: Callable[[bytes], bytes],
                                                                gz: bool) -> None:
    raw = make(gzip.decompress(CPU_MLP.read_bytes()))
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    outcomes = []
    for run in (lambda: whole(path), lambda: kineto._read_profile(path, None, chunk_bytes=512)):
        try:
            outcomes.append(run())
        except TraceError as e:
            outcomes.append(str(e))
    if isinstance(outcomes[0], str):
        assert outcomes[1] == outcomes[0]
        assert str(path) in outcomes[0]
    else:
        assert_same_profile(outcomes[1], outcomes[0])


@pytest.mark.parametrize("cut", [10, 5000, -3])
def test_truncated_and_corrupt_gzip_while_streaming(tmp_path: Path, cut: int) -> None:
    data = GPT2.read_bytes()
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[:cut])
    with pytest.raises(TraceError, match="truncated gzip"):
        kineto._read_profile(path, None, chunk_bytes=4096)
    bad = bytearray(data)
    bad[len(bad) // 2: len(bad) // 2 + 64] = bytes(64)
    path.write_bytes(bytes(bad))
    with pytest.raises(TraceError, match=r"gzip|JSON") as info:
        kineto.read_kineto(path)
    with pytest.raises(TraceError) as reference:
        whole(path)
    assert str(info.value) == str(reference.value)


def test_missing_file_while_streaming(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        kineto._read_profile(tmp_path / "nope.json.gz", None)
    with pytest.raises(TraceError, match="is a directory"):
        kineto._read_profile(tmp_path, None)


# --- the splitter on its own ------------------------------------------------------------------------------------
def _split(doc: bytes, chunk_bytes: int = 1) -> tuple[list[Any], bytes]:
    arrays: list[Any] = []

    def on_chunk(chunk: memoryview) -> None:
        arrays.append(msgspec.json.decode(chunk))

    pieces = (doc[i:i + 3] for i in range(0, len(doc), 3))
    envelope = split_events(pieces, on_chunk, chunk_bytes)
    return arrays, envelope


def test_split_events_yields_whole_events_and_the_envelope() -> None:
    arrays, envelope = _split(b'{"a": [1, "]"], "traceEvents" : [ {"x": "}, {"}, {"y": [{"z": 1}, {}]} ,{} ], "b": "]"}')
    assert [e for a in arrays for e in a] == [{"x": "}, {"}, {"y": [{"z": 1}, {}]}, {}]
    assert msgspec.json.decode(envelope) == {"a": [1, "]"], "traceEvents": [], "b": "]"}
    arrays, envelope = _split(b' [{"x": 1}, {"x": 2}] ')
    assert [e for a in arrays for e in a] == [{"x": 1}, {"x": 2}]
    assert msgspec.json.decode(envelope) == {"traceEvents": []}


@pytest.mark.parametrize("doc", [
    b'{"meta": {"traceEvents": [{}]}, "traceEvents": []}',   # the first key is not at the top level
    b'{"traceEvents": [{}], "traceEvents": []}',             # a second key would win
    b'{"traceEvents": [{}, 5}',                              # never closed
    b'{"traceEvents": {}}',
    b'"traceEvents"',
    b"",
])
def test_split_events_refuses_what_it_cannot_prove(doc: bytes) -> None:
    with pytest.raises(SplitError):
        _split(doc)


def test_read_pieces_inflates_in_bounded_pieces(tmp_path: Path) -> None:
    raw = gzip.decompress(GPT2.read_bytes())
    pieces = list(read_pieces(GPT2, 65536))
    assert b"".join(pieces) == raw
    assert max(len(p) for p in pieces) <= 65536
    plain = tmp_path / "t.json"
    plain.write_bytes(raw[:100_000])
    assert b"".join(read_pieces(plain, 4096)) == raw[:100_000]


# --- the vectorised nesting against the stack walk it replaces -----------------------------------------------------
def _nest_reference(tid: list[int], start: list[int], dur: list[int]) -> tuple[list[int], list[int]]:
    """The plain per-thread stack walk (rows sorted by start, longer first); then an op that outlives the op it
    started in by more than the tolerance climbs to the first ancestor that holds its end (it crosses the others)."""
    from dnnprof.ingest.nesting import CROSSING_TOLERANCE_NS as tol

    parent, stacks = [], {}
    for i, (th, s) in enumerate(zip(tid, start, strict=True)):
        stack = stacks.setdefault(th, [])
        while stack and start[stack[-1]] + dur[stack[-1]] <= s:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
    end = [s + d for s, d in zip(start, dur, strict=True)]
    for i in range(len(parent)):
        while parent[i] >= 0 and end[i] > end[parent[i]] + tol:
            parent[i] = parent[parent[i]]
    depth = []
    for i in range(len(parent)):
        depth.append(0 if parent[i] < 0 else depth[parent[i]] + 1)
    return parent, depth


def test_a_step_marker_opened_inside_an_optimizer_range_is_not_its_child() -> None:
    """An optimizer step post-hook opens ``ProfilerStep#N+1`` inside ``Optimizer.step#`` (``dnnprof run`` does):
    the marker crosses the optimizer range, and the next step's forward must not sit under the optimizer."""
    from dnnprof.ingest.nesting import nest
    from dnnprof.model.schema import empty_table

    # step 5 [0, 85) closed by the hook at 85, inside its optimizer [80, 90); step 6 opened there, to 185; the hook's
    # own tail op [86, 88); step 6's forward op [95, 120) with a child [96, 110). Neither the optimizer range nor
    # the next marker nests in what it outlives.
    rows = [(0, 85_000), (80_000, 10_000), (85_000, 100_000), (86_000, 2_000), (95_000, 25_000), (96_000, 14_000)]
    t = empty_table("ops", len(rows))
    t["tid"][:] = 1
    t["start_ns"][:] = [r[0] for r in rows]
    t["dur_ns"][:] = [r[1] for r in rows]
    nest(t)
    assert t["parent_row"].tolist() == [-1, -1, -1, 2, 2, 4]
    assert t["depth"].tolist() == [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("rounds", [8, 0])  # 0: every thread takes the stack-walk fallback
@pytest.mark.parametrize("seed", range(40))
def test_nest_matches_the_stack_walk_with_jitter_and_ties(seed: int, rounds: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.ingest import nesting
    from dnnprof.ingest.nesting import nest
    from dnnprof.model.schema import empty_table

    monkeypatch.setattr(nesting, "_POP_ROUNDS", rounds)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    start = np.sort(rng.integers(0, 60 if seed % 2 else 5000, n))  # small ranges: many equal starts
    dur = rng.integers(0, 80 if seed % 3 else 3000, n)
    dur[rng.random(n) < 0.1] = 0
    order = np.lexsort((-dur, start))
    t = empty_table("ops", n)
    t["tid"][:] = rng.integers(1, 4, n)[order] if seed % 4 else 7
    t["start_ns"][:], t["dur_ns"][:] = start[order], dur[order]
    nest(t)
    parent, depth = _nest_reference(t["tid"].tolist(), t["start_ns"].tolist(), t["dur_ns"].tolist())
    assert t["parent_row"].tolist() == parent
    assert t["depth"].tolist() == depth


def test_nest_of_a_long_chain_of_overlapping_ranges() -> None:
    """Ranges that overlap without nesting (each ends after the next starts) defeat the vectorised rounds;
    the fallback must give the stack walk's answer, fast."""
    from dnnprof.ingest.nesting import nest
    from dnnprof.model.schema import empty_table

    n = 20_000
    t = empty_table("ops", n)
    t["tid"][:] = 1
    t["start_ns"][:] = np.arange(n)
    t["dur_ns"][:] = 10
    nest(t)
    parent, depth = _nest_reference(t["tid"].tolist(), t["start_ns"].tolist(), t["dur_ns"].tolist())
    assert t["parent_row"].tolist() == parent
    assert t["depth"].tolist() == depth
    assert max(depth) > 1000  # a deep chain: nothing ever closes before its successor


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH, *RECORDED[:3]], ids=lambda p: p.parent.name + "/" + p.name)
def test_nest_matches_the_stack_walk_on_real_traces(path: Path) -> None:
    ops = whole(path).tables["ops"]
    parent, depth = _nest_reference(ops["tid"].tolist(), ops["start_ns"].tolist(), ops["dur_ns"].tolist())
    assert ops["parent_row"].tolist() == parent
    assert ops["depth"].tolist() == depth
