"""Hostile Kineto traces: values no profiler writes are read as unknown with a note, or stop with one clear line;
and the streamed profile never depends on where the read chunks fall."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CPU_MLP, DATA, DEEPSPEECH
from dnnprof.cli.main import main
from dnnprof.ingest import kineto
from dnnprof.ingest.errors import TraceError
from test_kineto_stream import assert_same_profile, whole

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
FIXTURES = sorted(DATA.glob("*/trace.json.gz"))
FOREIGN_TRACES = [FOREIGN / n for n in ("hta__alexnet_critical_path.json.gz", "hta__mi250_minitoy_train.json.gz",
                                        "hta__cpu_only_rank34.json.gz", "kineto__docs_before_fix_trace.json",
                                        "hta__cupti_profiler_counters.json.gz")]
#: Chunk sizes that put the cuts in different places: tiny, odd, small, the default.
CHUNKS = (997, 8192, 65536, kineto.CHUNK_BYTES)
I64_OVER = 2**63 + 5


def _events(doc: dict[str, Any], cat: str, key: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and (key is None or key in e.get("args", {}))]


def _ext_id(doc: dict[str, Any]) -> None:
    _events(doc, "cpu_op", "External id")[3]["args"]["External id"] = I64_OVER


def _ext_id_huge(doc: dict[str, Any]) -> None:
    _events(doc, "cpu_op", "External id")[3]["args"]["External id"] = 10**30


def _grid(doc: dict[str, Any]) -> None:
    _events(doc, "kernel")[3]["args"]["grid"] = [2**64 - 1, 1, 1]


def _tid(doc: dict[str, Any]) -> None:
    _events(doc, "cpu_op")[3]["tid"] = "stream 99999999999999999999"


def _tid_int(doc: dict[str, Any]) -> None:
    _events(doc, "kernel")[3]["tid"] = 2**70


def _flow(doc: dict[str, Any]) -> None:
    doc["traceEvents"] += [{"ph": "s", "cat": "fwdbwd", "id": 10**9, "pid": 1, "tid": 1, "ts": 9.3e15},
                           {"ph": "f", "cat": "fwdbwd", "id": 10**9, "pid": 1, "tid": 1, "ts": 9.3e15, "bp": "e"}]


def _device_props(doc: dict[str, Any]) -> None:
    doc["deviceProperties"] = [1, *doc.get("deviceProperties", [])]


def _base_time(doc: dict[str, Any]) -> None:
    doc["baseTimeNanoseconds"] = 2**64


def _rank(value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": value}
    return change


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "external-id-u64": (_ext_id, "1 numbers beyond the 64-bit range"),
    "external-id-huge": (_ext_id_huge, "1 numbers beyond the 64-bit range"),
    "grid-2^64-1": (_grid, "1 numbers beyond the 64-bit range"),
    "tid-string": (_tid, ""),
    "tid-int": (_tid_int, "1 numbers beyond the 64-bit range"),
    "fwdbwd-ts": (_flow, ""),
    "device-properties-[1]": (_device_props, "1 deviceProperties entries that are not objects were ignored"),
    "base-time": (_base_time, ""),
    "rank-9.3e15": (_rank(9.3e15), "distributedInfo.rank is not a rank"),  # found by the fuzz run: int16 overflow
    "rank-70000": (_rank(70000), "distributedInfo.rank is not a rank"),
    "rank--1": (_rank(-1), "distributedInfo.rank is not a rank"),
}


def _write(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("name", list(HOSTILE))
def test_out_of_range_values_are_unknown_with_a_note(tmp_path: Path, name: str) -> None:
    mutate, note = HOSTILE[name]
    doc = json.loads(gzip.decompress(DEEPSPEECH.read_bytes()))
    mutate(doc)
    path = _write(tmp_path / "t.json", json.dumps(doc).encode())
    reference = whole(path)
    clean = whole(DEEPSPEECH)
    assert reference.rows("kernels") == clean.rows("kernels") and reference.rows("ops") == clean.rows("ops")
    notes = reference.meta["source"].get("notes") or []
    assert any(n.startswith(note) for n in notes) if note else "notes" not in reference.meta["source"]
    for chunk in (997, 65536):
        assert_same_profile(kineto._read_profile(path, None, chunk_bytes=chunk), reference)
    assert main(["analyze", str(path), "--quiet", "--json", str(tmp_path / "s.json")]) == 0
    if name == "external-id-u64":
        assert -1 in reference.tables["ops"]["external_id"].tolist()
    if name == "grid-2^64-1":
        assert (reference.tables["kernels"]["grid_x"] == -1).sum() == 1


def test_invalid_utf8_is_replaced_and_said(tmp_path: Path) -> None:
    raw = gzip.decompress(CPU_MLP.read_bytes())
    i = raw.index(b'"name": "aten::') + len(b'"name": "')
    path = _write(tmp_path / "t.json", raw[:i] + b"\xff\xfe" + raw[i:])
    reference = whole(path)
    assert any("\ufffd\ufffdaten::" in s for s in reference.strings)
    assert reference.meta["source"]["notes"] == [
        "invalid UTF-8 in the trace was read as U+FFFD (the replacement character)"]
    for chunk in (97, 4096, kineto.CHUNK_BYTES):
        assert_same_profile(kineto._read_profile(path, None, chunk_bytes=chunk), reference)


@pytest.mark.parametrize("depth", [1000, 20000])
@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_nesting_too_deep_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], depth: int,
                                             opener: str) -> None:
    # The depth at which decoding gives up follows Python's recursion limit: Dynamo raises it when torch.compile
    # ran in this process (other tests do), so the test runs at the interpreter's default.
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _too_deep(tmp_path, capsys, depth, opener)
    finally:
        sys.setrecursionlimit(limit)


def _too_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str], depth: int, opener: str) -> None:
    raw = gzip.decompress(CPU_MLP.read_bytes())
    closer = "]" if opener == "[" else "}"
    deep = (opener * depth + "1" + closer * depth).encode()
    path = _write(tmp_path / "t.json", raw.replace(b'"External id"', b'"Input Dims": ' + deep + b', "External id"', 1))
    for chunk in (4096, kineto.CHUNK_BYTES):
        with pytest.raises(TraceError, match="nested too deeply"):
            kineto._read_profile(path, None, chunk_bytes=chunk)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "nested too deeply" in err[0]


@pytest.mark.parametrize("path", [*FIXTURES, *FOREIGN_TRACES], ids=lambda p: p.parent.name + "/" + p.name)
def test_the_profile_does_not_depend_on_the_chunk_size(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name}: the foreign trace corpus (shared/foreign) is not checked out")
    reference = whole(path)
    for chunk in CHUNKS:
        assert_same_profile(kineto._read_profile(path, None, chunk_bytes=chunk), reference)


def _plant(doc: dict[str, Any], seed: int) -> None:
    """Values that take the lenient path, spread over the trace, plus ties on ``ts`` with a negative duration:
    which chunk takes which path changes with the chunk size, the profile must not."""
    rng = random.Random(seed)
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for e in rng.sample(complete, 6):
        args = e.setdefault("args", {})
        kind = rng.randrange(5)
        if kind == 0:
            args["External id"] = I64_OVER
        elif kind == 1:
            e["dur"] = -5.0
        elif kind == 2:
            e["cat"] = "an_unknown_category"
        elif kind == 3:
            args["correlation"] = str(args.get("correlation", 1))
        else:
            e["tid"] = 2**64
    ops = [e for e in complete if e.get("cat") in ("cpu_op", "user_annotation")]
    for e in rng.sample(ops, min(6, len(ops))):  # a copy with the same ts, one shorter than 0
        twin = json.loads(json.dumps(e))
        twin["dur"], twin["name"] = -1.0, twin.get("name", "") + "#twin"
        doc["traceEvents"].insert(rng.randrange(len(doc["traceEvents"])), twin)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("path", [CPU_MLP, DEEPSPEECH], ids=lambda p: p.parent.name)
def test_mutated_traces_read_the_same_whatever_the_chunk_size(tmp_path: Path, path: Path, seed: int) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    _plant(doc, seed)
    target = _write(tmp_path / "t.json", json.dumps(doc).encode())
    reference = whole(target)
    for chunk in (997, 8192, 65536):
        assert_same_profile(kineto._read_profile(target, None, chunk_bytes=chunk), reference)
    assert not np.any(reference.tables["ops"]["dur_ns"] < 0)


def test_a_name_of_megabytes_costs_its_size_not_its_size_per_row(tmp_path: Path) -> None:
    """String tests on name columns (the optimizer and data-loader annotations, blocking copies, allocation calls)
    look at each distinct name once: a fixed-width copy of the column would take the longest name's size per row
    (10 MB × every annotation: hundreds of MB, the fuzzer's worker ran out of memory on such a trace)."""
    import tracemalloc

    from dnnprof.runs.report import report

    doc = json.loads(gzip.decompress(DEEPSPEECH.read_bytes()))
    notes = _events(doc, "user_annotation")
    first = notes[0]
    doc["traceEvents"] += [{**first, "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                            "ts": first["ts"] + 10 * i, "dur": 1.0} for i in range(100)]
    first["name"] = "enumerate(DataLoader)#" + "x" * 10_000_000
    path = tmp_path / "long_name.json"
    path.write_text(json.dumps(doc))
    profile = kineto.read_kineto(path)
    tracemalloc.start()
    try:
        _, summary = report(profile)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary["kernels"]
    assert peak < 250e6, f"{peak / 1e6:.0f} MB traced while analysing a trace with one 10 MB name"
