"""Memory events of a ``--full`` run land in the run's profile: joined from the full-detail window on a GPU, read
from the only window on a CPU.

GPU: the run directory of test_collect_assemble (a real H200 GPT-2 trace split into a timing window and a
full-detail window) with ``[memory]`` instants planted in the full-detail window, in torch.profiler's format, inside
real ops. CPU: ``dnnprof run --full`` of a plain training script.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dnnprof.analysis.summary import summarize
from dnnprof.ingest.assemble import assemble
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile
from test_collect_assemble import make_run

SCRIPTS = Path(__file__).parent / "data" / "scripts"
PLANTED = 24


def _plant_memory_events(trace: Path) -> list[tuple[str, int, int, int]]:
    """Add CUDA ``[memory]`` instants halfway through leaf aten ops of ``trace``; returns (op name, ts_ns, ns into
    the op, bytes) per event."""
    p = read_kineto(trace)
    ops = p.tables["ops"]
    leaf = np.ones(ops["start_ns"].size, dtype=bool)
    leaf[ops["parent_row"][ops["parent_row"] >= 0]] = False
    names = p.names(ops["name_id"])
    rows = [r for r in np.flatnonzero(leaf & (ops["dur_ns"] > 2_000)).tolist() if names[r].startswith("aten::")]
    rows = rows[:: max(len(rows) // PLANTED, 1)][:PLANTED]
    assert len(rows) == PLANTED
    doc = json.loads(gzip.open(trace).read())
    planted, total = [], 1 << 30
    for i, r in enumerate(rows):
        ts_ns = int(ops["start_ns"][r] + ops["dur_ns"][r] // 2)
        size = (i + 1) * 4096 * (1 if i % 3 else -1)
        total += size
        doc["traceEvents"].append({
            "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": int(ops["tid"][r]),
            "ts": ts_ns / 1000, "args": {"Total Reserved": 2 << 30, "Total Allocated": total, "Bytes": size,
                                         "Device Id": 0, "Device Type": 1, "Addr": 0x7F0000000000 + i * 8192,
                                         "finished": False, "Ev Idx": i}})
        planted.append((str(names[r]), ts_ns, ts_ns - int(ops["start_ns"][r]), size))
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return planted


def test_full_detail_window_memory_events_are_joined_onto_the_timing_window(tmp_path: Path) -> None:
    col = make_run(tmp_path, detail="full")
    planted = _plant_memory_events(tmp_path / "trace" / "full.json.gz")
    profile, info = assemble(tmp_path, col)
    assert profile.self_check() == []
    assert info["attribution"]["memory_events"] == PLANTED
    m = profile.tables["memory_events"]
    assert profile.rows("memory_events") == PLANTED
    assert (m["step"] == -1).all()  # like the joined ops: recorded after the timed steps, not timed
    assert (m["device_type"] == 1).all() and (m["device"] == 0).all()
    ops = profile.tables["ops"]
    rows = m["op_row"]
    assert (rows >= 0).all()
    # Each event is linked to the op it was planted in, and sits as far into it as it was planted: the events
    # were moved onto the timing window's clock exactly as the ops were.
    by_ts = sorted(planted, key=lambda x: x[1])
    assert profile.names(ops["name_id"][rows]).tolist() == [x[0] for x in by_ts]
    assert (m["ts_ns"] - ops["start_ns"][rows]).tolist() == [x[2] for x in by_ts]
    assert m["bytes"].tolist() == [x[3] for x in by_ts]
    assert (ops["step"][rows] == -1).all()
    s = summarize(profile)["memory_events"]
    assert s["events"] == PLANTED and s["devices"][0]["device_type"] == "cuda" and s["devices"][0]["device"] == 0
    assert s["devices"][0]["peak_total_reserved_bytes"] == 2 << 30
    allocs = sorted((x[3] for x in planted if x[3] > 0), reverse=True)
    assert [a["bytes"] for a in s["largest_allocations"]] == allocs[:len(s["largest_allocations"])]
    assert all(a["step"] is None and a["op"] for a in s["largest_allocations"])


def test_cpu_run_full_profile_has_memory_events(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    r = subprocess.run([sys.executable, "-m", "dnnprof", "run", "--full", "--warmup-steps", "2", "--steps", "2",
                        "--out", str(out), "--", sys.executable, str(SCRIPTS / "train_plain.py"), "--steps", "8",
                        "--batch-size", "8"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
                       check=False)
    assert r.returncode == 0, r.stderr
    raw = json.loads(gzip.open(out / "trace" / "full.json.gz").read())["traceEvents"]
    n_raw = sum(e.get("name") == "[memory]" for e in raw)
    profile = Profile.load(out / "profile")
    assert profile.self_check() == []
    m = profile.tables["memory_events"]
    assert n_raw > 0 and profile.rows("memory_events") == n_raw
    assert set(m["step"].tolist()) - {-1} == set(profile.tables["steps"]["number"].tolist())
    assert (m["op_row"] >= 0).mean() > 0.9
    summary = json.loads((out / "summary.json").read_text())
    assert summary["memory_events"]["events"] == n_raw
    assert summary["memory_events"]["devices"][0]["device_type"] == "cpu"
    jsonschema = pytest.importorskip("jsonschema")
    from dnnprof import render as render_pkg

    schema = Path(render_pkg.__file__).parent / "schemas" / "summary-1.schema.json"
    jsonschema.validate(summary, json.loads(schema.read_text()))
