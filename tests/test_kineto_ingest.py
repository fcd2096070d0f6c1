"""Kineto ingest on real H200 traces: numbers checked against the raw JSON, and format drift."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from conftest import CPU_MLP, DEEPSPEECH, GPT2, load_raw
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.schema import MEMCPY_KINDS, MEMORY_KINDS


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH])
def test_per_kernel_totals_equal_raw_durations(path: Path) -> None:
    raw = load_raw(path)
    expected: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e in raw["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            expected[e["name"]] += e["dur"]
            calls[e["name"]] += 1
    p = read_kineto(path)
    k = p.tables["kernels"]
    names = p.names(k["name_id"])
    assert k["start_ns"].size == sum(calls.values())
    for name, total_us in expected.items():
        got = k["dur_ns"][names == name].sum() / 1000.0
        assert got == pytest.approx(total_us, abs=1e-3 * calls[name])
        assert (names == name).sum() == calls[name]


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH, CPU_MLP])
def test_step_count_and_self_check(path: Path) -> None:
    raw = load_raw(path)
    n_steps = sum(1 for e in raw["traceEvents"]
                  if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    p = read_kineto(path)
    assert p.tables["steps"]["number"].size == n_steps
    assert p.self_check() == []


def test_launch_links_and_fwdbwd() -> None:
    p = read_kineto(GPT2)
    k = p.tables["kernels"]
    rt = p.tables["runtime"]
    linked = k["launch_row"] >= 0
    assert linked.mean() > 0.99
    # A kernel and its launching call share the correlation id, and the launch happens before the kernel.
    assert np.array_equal(rt["correlation"][k["launch_row"][linked]], k["correlation"][linked])
    assert np.all(rt["start_ns"][k["launch_row"][linked]] <= k["start_ns"][linked])
    ops = p.tables["ops"]
    bwd = np.flatnonzero(ops["fwd_row"] >= 0)
    assert bwd.size > 100
    names = p.names(ops["name_id"][bwd]).astype(str)
    assert all("Backward" in n for n in names)


def test_memcpy_kinds_from_real_names() -> None:
    p = read_kineto(DEEPSPEECH)
    m = p.tables["memcpy"]
    kinds = {(MEMCPY_KINDS[k], MEMORY_KINDS[s], MEMORY_KINDS[d])
             for k, s, d in zip(m["kind"], m["src_mem"], m["dst_mem"], strict=True)}
    assert ("HtoD", "pageable", "device") in kinds
    assert ("DtoH", "device", "pageable") in kinds


def test_devices_and_meta() -> None:
    p = read_kineto(GPT2)
    d = p.devices[0]
    assert (d.name, d.compute_capability, d.sm_count) == ("NVIDIA H200", "9.0", 132)
    assert d.shared_memory_per_sm_bytes == 233472
    assert p.meta["base_time_ns"] == 1790857026000000000


def test_absolute_timestamps_give_the_same_profile(variant) -> None:
    def to_absolute(doc: dict) -> None:
        base_us = doc.pop("baseTimeNanoseconds") / 1000.0
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] = e["ts"] + base_us

    rel = read_kineto(DEEPSPEECH)
    ab = read_kineto(variant(DEEPSPEECH, to_absolute))
    assert ab.meta["base_time_ns"] == 0
    # Float µs at epoch scale carry ~0.25 ns of rounding: durations must agree to the nanosecond.
    assert np.abs(ab.tables["kernels"]["dur_ns"] - rel.tables["kernels"]["dur_ns"]).max() <= 1
    assert ab.tables["steps"]["number"].tolist() == rel.tables["steps"]["number"].tolist()


def test_drifted_field_types_take_the_lenient_path(variant) -> None:
    def drift(doc: dict) -> None:
        for e in doc["traceEvents"]:
            args = e.get("args", {})
            if "External id" in args:
                args["External id"] = str(args["External id"])  # some exporters write ids as strings
            if e.get("cat") == "kernel":
                e["cat"] = "Kernel"  # the capitalised category of some Kineto versions
                args["grid"] = [str(x) for x in args["grid"]]

    strict = read_kineto(GPT2)
    lenient = read_kineto(variant(GPT2, drift))
    assert lenient.tables["kernels"]["start_ns"].size == strict.tables["kernels"]["start_ns"].size
    assert np.array_equal(lenient.tables["kernels"]["grid_x"], strict.tables["kernels"]["grid_x"])
    assert lenient.self_check() == []


def test_unknown_category_and_bare_event_array(variant) -> None:
    def odd(doc: dict) -> None:
        doc["traceEvents"].append({"ph": "X", "cat": "some_future_category", "name": "x", "pid": 1, "tid": 1,
                                   "ts": 1.0, "dur": 1.0})

    p = read_kineto(variant(GPT2, odd))
    assert p.tables["kernels"]["start_ns"].size > 0

    def bare(doc: dict) -> None:
        events = doc["traceEvents"]
        doc.clear()
        doc["__list__"] = events

    path = variant(GPT2, bare)
    import json

    path.write_text(json.dumps(json.loads(path.read_text())["__list__"]))
    assert read_kineto(path).tables["kernels"]["start_ns"].size > 0


def test_distributed_info_sets_rank(variant) -> None:
    p = read_kineto(CPU_MLP)
    assert p.meta["distributed"]["backend"] == "gloo"
    assert p.ranks == [0]

    def rank3(doc: dict) -> None:
        doc["distributedInfo"]["rank"] = 3

    assert read_kineto(variant(CPU_MLP, rank3)).ranks == [3]


def test_cpu_only_trace() -> None:
    p = read_kineto(CPU_MLP)
    assert not p.has_gpu_activity
    assert p.devices == []
    assert p.tables["ops"]["start_ns"].size > 50


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty file"),
    (b'{"traceEvents": [', "invalid JSON"),
    (b'{"hello": 1}', "not a Chrome/Kineto trace"),
    (b"\x1f\x8b\x08\x00garbage", "gzip"),
    (b"PK\x03\x04zip", "not JSON"),
])
def test_bad_inputs_raise_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_kineto(path)
    assert str(path) in str(info.value)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = GPT2.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        read_kineto(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        read_kineto(tmp_path / "nope.json")
