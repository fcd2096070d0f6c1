"""torch.profiler memory events (``profile_memory=True``) → the ``memory_events`` table, and on to the summary.

The fixture is a real CPU recording (tests/data/cpu_mlp_memory: a small MLP training loop, three ProfilerSteps,
with shapes, stacks and modules, as a ``--full`` window records it). CPU and CUDA memory events share one format
(``[memory]`` instants whose args carry the sizes), so every check is on values read back from the raw JSON.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CPU_MLP, DATA, GPT2, load_raw
from dnnprof.analysis.summary import LARGEST_ALLOCATIONS, summarize
from dnnprof.ingest import kineto
from dnnprof.ingest.kineto import read_kineto
from dnnprof.ingest.ranks import merge_ranks
from dnnprof.model.profile import Profile
from dnnprof.model.schema import DEVICE_TYPES, TABLES

MEMORY = DATA / "cpu_mlp_memory" / "trace.json.gz"


def raw_memory_events(path: Path = MEMORY) -> list[dict[str, Any]]:
    """The ``[memory]`` events of a trace, in the order the table keeps them (by time, file order on ties)."""
    ev = [e for e in load_raw(path)["traceEvents"] if e.get("name") == "[memory]"]
    return sorted(ev, key=lambda e: e["ts"])


@pytest.fixture(scope="module")
def profile() -> Profile:
    return read_kineto(MEMORY)


def test_every_memory_event_becomes_a_row_with_its_raw_values(profile: Profile) -> None:
    raw = raw_memory_events()
    m = profile.tables["memory_events"]
    assert len(raw) > 100 and profile.rows("memory_events") == len(raw)
    a = [e["args"] for e in raw]
    assert m["bytes"].tolist() == [x["Bytes"] for x in a]
    assert m["total_allocated_bytes"].tolist() == [x["Total Allocated"] for x in a]
    assert m["total_reserved_bytes"].tolist() == [x["Total Reserved"] for x in a]
    assert m["addr"].tolist() == [x["Addr"] for x in a]
    assert m["device"].tolist() == [x["Device Id"] for x in a]
    assert m["device_type"].tolist() == [x["Device Type"] for x in a]
    assert m["tid"].tolist() == [e["tid"] for e in raw]
    assert m["ts_ns"].tolist() == [round(e["ts"] * 1000) for e in raw]
    assert (m["bytes"] > 0).any() and (m["bytes"] < 0).any()  # allocations and frees
    assert DEVICE_TYPES[int(m["device_type"][0])] == "cpu"
    assert (m["rank"] == 0).all() and profile.self_check() == []


def test_memory_events_get_steps_and_their_enclosing_ops(profile: Profile) -> None:
    raw = raw_memory_events()
    windows = {int(e["name"].split("#")[1]): (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
               for e in load_raw(MEMORY)["traceEvents"]
               if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    expect = [next((n for n, (lo, hi) in windows.items() if lo <= round(e["ts"] * 1000) < hi), -1) for e in raw]
    m = profile.tables["memory_events"]
    assert m["step"].tolist() == expect
    assert set(expect) == {2, 3, 4}
    ops = profile.tables["ops"]
    rows = m["op_row"]
    assert (rows >= 0).all()  # every allocation and free of this loop happens inside some op
    assert (ops["start_ns"][rows] <= m["ts_ns"]).all()
    assert (m["ts_ns"] < ops["start_ns"][rows] + ops["dur_ns"][rows]).all()
    assert (ops["tid"][rows] == m["tid"]).all()
    # Innermost: no op nested in the linked one also holds the event.
    for r, t in zip(rows.tolist(), m["ts_ns"].tolist(), strict=True):
        children = np.flatnonzero(ops["parent_row"] == r)
        inside = (ops["start_ns"][children] <= t) & (t < ops["start_ns"][children] + ops["dur_ns"][children])
        assert not inside.any()
    allocating = set(profile.names(ops["name_id"][rows[m["bytes"] > 0]]).tolist())
    assert {"aten::addmm", "aten::mm"} <= allocating


@pytest.mark.parametrize("chunk_bytes", [1 << 10, 7919, 1 << 19])
def test_streamed_and_whole_buffer_reads_agree(profile: Profile, chunk_bytes: int) -> None:
    cols, _ = kineto._stream(MEMORY, chunk_bytes)
    assert cols is not None
    for other in (kineto._read_profile(MEMORY, None, chunk_bytes=chunk_bytes),
                  kineto._read_profile(MEMORY, None, stream=False)):
        for c, v in profile.tables["memory_events"].items():
            assert np.array_equal(v, other.tables["memory_events"][c]), c


def test_drifted_arg_types_take_the_lenient_path_and_keep_the_values(tmp_path: Path, profile: Profile) -> None:
    doc = load_raw(MEMORY)
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Bytes"] = str(e["args"]["Bytes"])  # a string where an int belongs
    path = tmp_path / "drift.json"
    path.write_text(json.dumps(doc))
    p = read_kineto(path)
    for c, v in profile.tables["memory_events"].items():
        assert np.array_equal(v, p.tables["memory_events"][c]), c


@pytest.mark.parametrize("path", [GPT2, CPU_MLP], ids=["gpt2_h200", "cpu_mlp"])
def test_traces_without_memory_events_have_an_empty_table(path: Path) -> None:
    p = read_kineto(path)
    assert p.rows("memory_events") == 0
    assert set(p.tables["memory_events"]) == {c.name for c in TABLES["memory_events"]}
    assert "memory_events" not in summarize(p)


def test_save_load_round_trip_and_old_profiles_without_the_table(tmp_path: Path, profile: Profile) -> None:
    back = Profile.load(profile.save(tmp_path / "p"))
    for c, v in profile.tables["memory_events"].items():
        assert v.dtype == back.tables["memory_events"][c].dtype and np.array_equal(v, back.tables["memory_events"][c])
    assert back.self_check() == []
    # A profile saved before the table existed: no memory_events.parquet.
    (tmp_path / "p" / "memory_events.parquet").unlink()
    old = Profile.load(tmp_path / "p")
    assert old.rows("memory_events") == 0 and old.self_check() == []
    assert old.rows("ops") == profile.rows("ops")


def test_merging_ranks_keeps_every_event_in_time_order_with_valid_links(tmp_path: Path) -> None:
    doc = load_raw(MEMORY)
    paths = []
    for rank in (0, 1):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "gloo"}
        doc["baseTimeNanoseconds"] += rank * 1_000  # the second rank's clock base 1 µs later
        paths.append(tmp_path / f"rank{rank}.json.gz")
        paths[-1].write_bytes(gzip.compress(json.dumps(doc).encode()))
    parts = [read_kineto(p) for p in paths]
    merged = merge_ranks(parts)
    m = merged.tables["memory_events"]
    n = parts[0].rows("memory_events")
    assert merged.rows("memory_events") == 2 * n and merged.self_check() == []
    assert (np.diff(m["ts_ns"]) >= 0).all()
    for rank, part in enumerate(parts):
        mine = m["rank"] == rank
        assert sorted(m["bytes"][mine].tolist()) == sorted(part.tables["memory_events"]["bytes"].tolist())
        shifted = part.tables["memory_events"]["ts_ns"] + rank * 1_000
        assert sorted(m["ts_ns"][mine].tolist()) == sorted(shifted.tolist())
        ops = merged.tables["ops"]
        rows = m["op_row"][mine]
        assert (ops["rank"][rows] == rank).all()
        assert (ops["start_ns"][rows] <= m["ts_ns"][mine]).all()


def test_summary_memory_events(profile: Profile) -> None:
    raw = raw_memory_events()
    doc = summarize(profile)
    s = doc["memory_events"]
    b = [e["args"]["Bytes"] for e in raw]
    assert s["events"] == len(raw)
    assert s["allocations"] == sum(x > 0 for x in b) and s["frees"] == sum(x < 0 for x in b)
    assert s["allocated_bytes"] == sum(x for x in b if x > 0) and s["freed_bytes"] == -sum(x for x in b if x < 0)
    (dev,) = s["devices"]
    assert dev["device_type"] == "cpu" and dev["device"] is None and dev["events"] == len(raw)
    assert dev["peak_total_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in raw)
    assert dev["peak_total_reserved_bytes"] == max(e["args"]["Total Reserved"] for e in raw)
    top = s["largest_allocations"]
    assert len(top) == LARGEST_ALLOCATIONS
    assert [a["bytes"] for a in top] == sorted((x for x in b if x > 0), reverse=True)[:LARGEST_ALLOCATIONS]
    # The largest: a weight gradient of the first Linear (64 -> 128 floats), made by aten::mm in the backward pass.
    assert top[0]["bytes"] == 64 * 128 * 4
    assert top[0]["op"] == "aten::mm" and top[0]["phase"] == "backward" and top[0]["layer"] == "Linear_0"
    assert all(a["step"] in (2, 3, 4) for a in top)
    assert {a["phase"] for a in top} >= {"forward", "backward"}
    jsonschema = pytest.importorskip("jsonschema")
    from dnnprof import render as render_pkg

    schema = Path(render_pkg.__file__).parent / "schemas" / "summary-1.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))


def test_the_terminal_report_has_a_memory_events_line(profile: Profile) -> None:
    from io import StringIO

    from rich.console import Console

    from dnnprof.render.terminal import render

    buf = StringIO()
    render(summarize(profile), console=Console(file=buf, width=200, force_terminal=False))
    line = next(ln for ln in buf.getvalue().splitlines() if ln.startswith("memory events:"))
    n = len(raw_memory_events())
    allocs = sum(1 for e in raw_memory_events() if e["args"]["Bytes"] > 0)
    assert line.startswith(f"memory events: {n:,} ({allocs:,} allocations") and "largest" in line and "cpu peak" in line
