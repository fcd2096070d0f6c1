"""``dnnprof analyze SOURCE --perfetto PATH``: the profile as a Perfetto trace, on real recorded data."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

from dnnprof.analysis.summary import analyse
from dnnprof.cli.main import main
from dnnprof.ingest.kineto import read_kineto
from dnnprof.render.perfetto import GPU_PID, HOST_PID, RANK_PID_STRIDE, perfetto_trace

DATA = Path(__file__).parent / "data"
GPT2 = DATA / "gpt2_bf16_train_h200" / "trace.json.gz"


def test_every_row_becomes_a_slice_and_every_launch_a_flow(tmp_path: Path) -> None:
    out = tmp_path / "gpt2.json.gz"
    assert main(["analyze", str(GPT2), "--perfetto", str(out), "--quiet"]) == 0
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    p = analyse(read_kineto(GPT2)).profile
    cats = Counter(e.get("cat") for e in events if e["ph"] == "X")
    assert cats == {"cpu_op": p.rows("ops"), "cuda_runtime": p.rows("runtime"), "kernel": p.rows("kernels"),
                    "gpu_memset": p.rows("memset"), "step": p.rows("steps")} and p.rows("memcpy") == 0
    starts = Counter(e["id"] for e in events if e["ph"] == "s")
    ends = Counter(e["id"] for e in events if e["ph"] == "f")
    launched = sum(int((p.tables[t]["launch_row"] >= 0).sum()) for t in ("kernels", "memcpy", "memset"))
    assert starts == ends and len(starts) == launched > 2000
    assert all(e["ts"] >= 0 and e.get("dur", 0) >= 0 for e in events if e["ph"] != "M")
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(HOST_PID, "rank 0 · host"), (GPU_PID, "rank 0 · GPU 0")}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert all(e["pid"] == GPU_PID and e["args"]["name"] and e["args"]["phase"] in
               ("forward", "backward", "optimizer", "other") for e in kernels)
    attributed = [e for e in kernels if e["args"]["layer"]]
    assert len(attributed) / len(kernels) > 0.9  # as the summary's attribution says for this trace
    gemm = next(e for e in kernels if "gemm" in e["args"]["name"].lower() or "nvjet" in e["args"]["name"])
    assert gemm["args"]["grid_x"] >= 1 and gemm["args"]["registers_per_thread"] > 0


def test_sampled_metrics_become_counter_tracks(tmp_path: Path) -> None:
    """The NVML/GPM samples of a real H100 run directory, on the trace clock of its kernels."""
    from dnnprof.ingest.assemble import assemble, load_collector

    run = tmp_path / "run"
    shutil.copytree(DATA / "run_gpt2_infer_h100", run)
    profile, _ = assemble(run, load_collector(run))
    doc = perfetto_trace(profile)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    by_name = Counter(e["name"] for e in counters)
    assert {"gpu_util_pct", "sm_active_pct", "power_w"} <= set(by_name), by_name
    assert by_name["gpu_util_pct"] == int((profile.tables["samples"]["metric_id"]
                                           == profile.string_id("gpu_util_pct")).sum())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    first, last = min(e["ts"] for e in kernels), max(e["ts"] + e["dur"] for e in kernels)
    inside = [e for e in counters if e["name"] == "gpu_util_pct" and first <= e["ts"] <= last]
    assert inside and all(0 <= e["args"]["value"] <= 100 for e in inside)  # NVML every 50 ms, ~117 ms of kernels


def test_memory_events_become_allocator_tracks() -> None:
    """A real CPU trace with memory events (host allocations); then the same events as a GPU's, each event one
    counter value, all at or after the trace's time 0 even when an allocation comes before every op."""
    profile = read_kineto(DATA / "cpu_mlp_memory" / "trace.json.gz")
    m = profile.tables["memory_events"]
    n = int(m["ts_ns"].size)
    doc = perfetto_trace(profile)
    host = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "host_memory_bytes"]
    assert len(host) == n > 100 and all(e["pid"] == HOST_PID for e in host)
    assert max(e["args"]["allocated"] for e in host) == int(m["total_allocated_bytes"].max())
    m["device"][:] = 0  # as if the allocations were on GPU 0
    first = int(min(profile.tables["ops"]["start_ns"].min(), m["ts_ns"].min()))
    m["ts_ns"][0] = first - 5_000
    events = perfetto_trace(profile)["traceEvents"]
    gpu = [e for e in events if e["ph"] == "C" and e["name"] == "cuda_memory_bytes"]
    assert len(gpu) == n and all(e["pid"] == GPU_PID and "reserved" in e["args"] for e in gpu)
    assert min(e["ts"] for e in events if "ts" in e) == 0


def test_every_rank_gets_its_own_processes(tmp_path: Path) -> None:
    for rank in (0, 1):
        doc = json.loads(gzip.decompress((GPT2).read_bytes()))
        doc.setdefault("distributedInfo", {})["rank"] = rank
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "both.json"
    assert main(["analyze", str(tmp_path), "--perfetto", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {HOST_PID: "rank 0 · host", GPU_PID: "rank 0 · GPU 0",
                     RANK_PID_STRIDE + HOST_PID: "rank 1 · host", RANK_PID_STRIDE + GPU_PID: "rank 1 · GPU 0"}
    kernels = Counter(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert kernels[GPU_PID] == kernels[RANK_PID_STRIDE + GPU_PID] > 2000
    flows = [e["id"] for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(flows) == len(set(flows)) == 2 * len([e for e in doc["traceEvents"] if e["ph"] == "s"
                                                     and e["pid"] == HOST_PID])
    assert doc["otherData"]["ranks"] == [0, 1]


def test_the_written_trace_is_the_document_a_batch_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """The file is written a batch of events at a time (a big trace's are millions): the document's events, the
    processes' and threads' names after them; the same whatever the batch, gzip or not, and with a stable header."""
    import pytest

    from dnnprof.render import perfetto

    analysis = analyse(read_kineto(GPT2))
    doc = perfetto_trace(analysis.profile, attribution=analysis.attribution)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert doc["traceEvents"][:len(meta)] == meta  # the document names them first
    expected = {**doc, "traceEvents": doc["traceEvents"][len(meta):] + meta}
    for batch in (7, 1000, 1 << 16):
        monkeypatch.setattr(perfetto, "BATCH_EVENTS", batch)
        for name in ("t.json", "t.json.gz"):
            out = tmp_path / f"{batch}-{name}"
            perfetto.write_perfetto_trace(analysis.profile, out, attribution=analysis.attribution)
            raw = out.read_bytes()
            assert json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw) == expected
    a, b = (tmp_path / "7-t.json.gz").read_bytes(), (tmp_path / "1000-t.json.gz").read_bytes()
    assert a[:10] == b[:10] and a[3] == 0  # no file name in the gzip header, mtime 0: the same bytes each time
    empty = perfetto_trace(perfetto.Profile())
    perfetto.write_perfetto_trace(perfetto.Profile(), tmp_path / "empty.json")
    assert json.loads((tmp_path / "empty.json").read_text()) == empty
    with pytest.raises(ZeroDivisionError):  # a failure midway leaves nothing behind
        monkeypatch.setattr(perfetto, "_counter_tracks", lambda b: 1 / 0)
        perfetto.write_perfetto_trace(analysis.profile, tmp_path / "failed.json")
    assert not list(tmp_path.glob("*failed*"))
