"""From a run directory (collector results + raw traces) to the canonical profile and summary extras.

The run directory is derived from a real H200 GPT-2 trace with two steps: step 4 becomes the timing window (CUDA
activity and user ranges only: ``ProfilerStep#4`` and a ``dnnprof.clock_sync`` range, no ops), step 5 the
attribution window (with a ``dnnprof.clock_sync`` range and a module range recorded as the fast ``cpu_op`` kind).
``legacy=True`` makes the timing window of older dnnprof runs instead: CUDA activity only, no ranges, a
``cudaDeviceSynchronize`` clock probe, steps from the collector's boundary times.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import GPT2, load_raw
from dnnprof.analysis import run_metrics as metrics
from dnnprof.ingest.assemble import AssembleError, assemble, clock_offset
from dnnprof.model.schema import OP_CATEGORIES

US = 1000
CUDA_CATS = {"kernel", "gpu_memset", "gpu_memcpy", "cuda_runtime", "cuda_driver"}


def _write(path: Path, doc: dict[str, Any], events: list[dict[str, Any]]) -> None:
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = events
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(out).encode()))


def make_run(tmp: Path, wall_lag_ns: int = 0, legacy: bool = False, detail: str = "attribution") -> dict[str, Any]:
    """A run dir whose wall clock runs ``wall_lag_ns`` behind the trace clock."""
    doc = load_raw(GPT2)
    ev = doc["traceEvents"]
    base = int(doc["baseTimeNanoseconds"])
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    def in_step(e: dict[str, Any], n: int) -> bool:
        if e.get("ph") == "M" or "ts" not in e:
            return True
        t = launch_ts.get(e.get("args", {}).get("correlation")) if e.get("cat") in CUDA_CATS - {
            "cuda_runtime", "cuda_driver"} else e["ts"]
        return t is not None and steps[n][0] <= t < steps[n][1]

    end4 = steps[4][1]
    s4 = steps[4][0]
    probe_ts = end4 + 50 if legacy else s4 - 40  # µs: cudaDeviceSynchronize before the stop / clock_sync at start
    timing = [e for e in ev if (e.get("cat") in CUDA_CATS or e.get("ph") == "M") and in_step(e, 4)]
    if legacy:
        timing.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                       "ts": probe_ts, "dur": 20.0, "args": {"correlation": 99_999_999, "cbid": 165}})
    else:  # user ranges only: the step range and the clock probe (no aten op is recorded)
        timing += [e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == "ProfilerStep#4"]
        timing.append({"ph": "X", "cat": "user_annotation", "name": "dnnprof.clock_sync", "pid": 1, "tid": 1,
                       "ts": probe_ts, "dur": 1.0, "args": {}})
    attrib = [e for e in ev if e.get("cat") not in ("ac2g", "gpu_user_annotation") and in_step(e, 5)]
    s5 = steps[5][0]
    attrib.append({"ph": "X", "cat": "user_annotation", "name": "dnnprof.clock_sync", "pid": 1, "tid": 1,
                   "ts": s5 + 1, "dur": 1.0, "args": {}})
    # One module range around the whole step, as the collector records it (RecordFunctionFast -> cpu_op).
    attrib.append({"ph": "X", "cat": "cpu_op", "name": "dnnprof.module:GPT2LMHeadModel|GPT2LMHeadModel",
                   "pid": 1, "tid": next(e["tid"] for e in ev if e.get("name") == "ProfilerStep#5"),
                   "ts": s5 + 5, "dur": steps[5][1] - s5 - 10, "args": {}})
    _write(tmp / "trace" / "timing.json.gz", doc, timing)
    _write(tmp / "trace" / f"{detail}.json.gz", doc, attrib)

    def wall(ts_us: float) -> int:
        return base + int(ts_us * US) - wall_lag_ns

    starts = [wall(steps[4][0]) - (4 - i) * 60_000_000 for i in range(4)] + [wall(steps[4][0]), wall(s5)]
    ends = [s + 50_000_000 for s in starts[:4]] + [wall(end4), wall(steps[5][1])]
    col = {
        "status": "complete", "step_source": "optimizer", "step_start_ns": starts, "step_end_ns": ends,
        "step_items": [8 * 512] * 6,
        "plan": {"warmup": 4, "steps": 1, "attribution": 1, "baseline_after": 0, "pre_baseline": [2, 4],
                 "post_baseline": [7, 7]},
        "windows": [
            {"kind": "timing", "first_step": 4, "last_step": 4, "trace": "trace/timing.json.gz",
             "started_ns": starts[4] - 100_000, "stopped_ns": ends[4] + 1_000_000,
             "clock_probe": {"method": "cuda_sync", "name": "cudaDeviceSynchronize",
                             "t0_ns": wall(probe_ts) - 2_000, "t1_ns": wall(probe_ts + 20) + 3_000} if legacy else
             {"method": "record_function", "name": "dnnprof.clock_sync",
              "t0_ns": wall(probe_ts) - 500, "t1_ns": wall(probe_ts + 1) + 500}},
            {"kind": detail, "first_step": 5, "last_step": 5, "trace": f"trace/{detail}.json.gz",
             "started_ns": starts[5], "stopped_ns": ends[5],
             "clock_probe": {"method": "record_function", "name": "dnnprof.clock_sync",
                             "t0_ns": wall(s5 + 1) - 500, "t1_ns": wall(s5 + 2) + 500}},
        ],
        "samples_file": "samples.json",
        "nvml": {"nvml": "ok"},
        "memory": {"device": 0, "per_step": {"step": [2, 3, 4, 5], "peak_allocated_bytes": [9, 9, 10, 12],
                                             "peak_reserved_bytes": [20, 20, 20, 21]},
                   "static": {"weights_bytes": 4, "gradients_bytes": 2, "optimizer_state_bytes": 1},
                   "device_total_bytes": 100},
    }
    mid = (starts[4] + ends[4]) // 2
    (tmp / "samples.json").write_text(json.dumps({
        "metrics": ["gpu_util_pct", "sm_active_pct"], "device": [0, 0, 0, 0],
        "ts_ns": [mid, mid, starts[0] - 10**10, mid + 1], "metric": [0, 1, 0, 1], "value": [99.0, 71.5, 5.0, 73.5]}))
    (tmp / "collector.json").write_text(json.dumps(col))
    return col


def test_assemble_default_mode_run(tmp_path: Path) -> None:
    col = make_run(tmp_path)
    profile, info = assemble(tmp_path, col)
    assert profile.self_check() == []
    assert info["windows"] == ["attribution", "timing"]
    assert info["clock"]["found"] and info["clock"]["offset_ns"] == 0
    assert info["attribution_clock"]["offset_ns"] == 0
    # The timed step comes from the collector's boundaries: the kernels of step 4, nothing else.
    steps = profile.tables["steps"]
    assert steps["number"].tolist() == [4]
    assert steps["source"].tolist() == [2]  # optimizer
    k = profile.tables["kernels"]
    assert (k["step"] == 4).sum() == k["step"].size > 1000
    assert info["attribution"]["matched_kernels_pct"] == 100.0
    ops = profile.tables["ops"]
    # The timing window's own ranges stay, timed; the attribution ops follow with step -1 and own the kernels.
    step4 = ops["name_id"] == profile.string_id("ProfilerStep#4")
    assert step4.sum() == 1 and ops["step"][step4].tolist() == [4]
    assert (ops["step"] == -1).sum() == ops["step"].size - 1  # all but ProfilerStep#4 (the probe is before it)
    assert (ops["step"][k["op_row"]] == -1).all()
    # Module ranges were relabelled as the user annotations they are.
    mod = ops["name_id"] == profile.string_id("dnnprof.module:GPT2LMHeadModel|GPT2LMHeadModel")
    assert mod.sum() == 1
    assert ops["category"][mod][0] == OP_CATEGORIES.index("user_annotation")
    # Samples on the trace clock, only those near the windows.
    s = profile.tables["samples"]
    assert s["ts_ns"].size == 3
    assert profile.names(s["metric_id"]).tolist() == ["gpu_util_pct", "sm_active_pct", "sm_active_pct"]
    t0 = steps["start_ns"][0]
    assert t0 <= s["ts_ns"][0] <= t0 + steps["dur_ns"][0]


def test_legacy_cuda_only_timing_window_gets_steps_from_boundaries(tmp_path: Path) -> None:
    col = make_run(tmp_path, legacy=True)
    profile, info = assemble(tmp_path, col)
    assert profile.self_check() == []
    assert info["clock"]["found"] and info["clock"]["method"] == "cuda_sync"
    assert profile.tables["steps"]["number"].tolist() == [4] and info["timed_steps"] == [4]
    k = profile.tables["kernels"]
    assert (k["step"] == 4).sum() == k["step"].size > 1000
    assert info["attribution"]["matched_kernels_pct"] == 100.0 and "invalid" not in info


def test_timing_trace_without_gpu_times_is_reported(tmp_path: Path) -> None:
    """What Kineto wrote (PyTorch 2.11, H100) for a timing trace saved after the attribution session had started:
    every GPU/runtime event at ts = dur = 0."""
    col = make_run(tmp_path, legacy=True)
    path = tmp_path / "trace" / "timing.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in CUDA_CATS:
            e["ts"], e["dur"] = 0.0, 0.0
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    _, info = assemble(tmp_path, col)
    assert "all with zero start and duration" in info["invalid"]
    assert info["attribution"]["kernels_in_timed_steps"] == 0


def test_summary_extras_from_collector_results(tmp_path: Path) -> None:
    col = make_run(tmp_path)
    samples = json.loads((tmp_path / "samples.json").read_text())
    extras = metrics.run_extras(col, samples)
    t = extras["throughput"]
    dur = col["step_end_ns"][4] - col["step_start_ns"][4]
    assert t["steps"] == 1 and t["items_per_step"] == 4096
    assert t["items_per_s"] == pytest.approx(4096 / (dur / 1e9), rel=1e-6)
    assert t["step_time_median_us"] == pytest.approx(dur / 1000, abs=1e-3)
    base = [col["step_end_ns"][i] - col["step_start_ns"][i] for i in (2, 3)]  # the unprofiled steps of the plan
    assert t["unprofiled_steps"] == 2 and t["unprofiled_step_time_median_us"] == pytest.approx(sum(base) / 2000)
    assert t["unprofiled_items_per_s"] == pytest.approx(2 * 4096 / (sum(base) / 1e9), rel=1e-6)
    assert extras["samples"]["metrics"]["sm_active_pct"]["mean"] == 72.5
    assert extras["samples"]["metrics"]["gpu_util_pct"]["n"] == 1
    mem = extras["memory"]
    assert mem["peak_allocated_bytes"] == 10  # the timed step only
    assert mem["breakdown"] == {"weights_bytes": 4, "gradients_bytes": 2, "optimizer_state_bytes": 1,
                                "activations_other_bytes": 3}
    o = extras["overhead"]
    assert o["baseline_steps"] == [2, 3]
    assert o["dilation"] == pytest.approx(dur / 50_000_000, rel=1e-3)


def test_clock_offset_is_measured_not_assumed(tmp_path: Path) -> None:
    lag = 250_000  # the wall clock 250 µs behind the trace clock
    col = make_run(tmp_path, wall_lag_ns=lag)
    profile, info = assemble(tmp_path, col)
    bracket = col["windows"][0]["clock_probe"]
    width = bracket["t1_ns"] - bracket["t0_ns"]
    assert lag - width <= info["clock"]["offset_ns"] <= lag
    # Steps still hold their kernels once the offset is applied.
    assert (profile.tables["kernels"]["step"] == 4).mean() > 0.99


def test_clock_probe_missing_from_trace_is_noted(tmp_path: Path) -> None:
    make_run(tmp_path)
    from dnnprof.ingest.kineto import read_kineto

    p = read_kineto(tmp_path / "trace" / "timing.json.gz")
    out = clock_offset(p, {"method": "record_function", "name": "dnnprof.no_such_probe", "t0_ns": 0, "t1_ns": 1})
    assert out["offset_ns"] == 0 and not out["found"] and "not in the trace" in out["note"]


def test_no_trace_explains_how_to_fix(tmp_path: Path) -> None:
    col = {"status": "too_few_steps", "steps_completed": 3, "plan": {"warmup": 5, "steps": 10}, "windows": []}
    with pytest.raises(AssembleError, match="ended after 3 steps, before the profiled window"):
        assemble(tmp_path, col)


def test_whole_run_fallback_gets_one_step(tmp_path: Path) -> None:
    doc = load_raw(GPT2)
    ev = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    _write(tmp_path / "trace" / "whole_run.json.gz", doc, ev)
    col = {"status": "no_steps", "windows": [{"kind": "whole_run", "first_step": 0, "last_step": -1,
                                              "trace": "trace/whole_run.json.gz", "clock_probe": {},
                                              "started_ns": 0, "stopped_ns": 0}]}
    profile, _ = assemble(tmp_path, col)
    st = profile.tables["steps"]
    assert st["number"].tolist() == [0]
    assert st["source"].tolist() == [4]  # whole_trace
    assert (profile.tables["kernels"]["step"] == 0).all()
    assert np.isin(profile.tables["ops"]["step"], [0]).all()


def test_finish_run_findings_see_the_run_extras_and_settings(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.analysis import rules  # runs.report imports it when the findings are due
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.runs.finish import finish_run
    from dnnprof.runs.rundir import RunDir

    rd = RunDir.create("gpt2", out=tmp_path / "run")
    col = make_run(rd.staging)
    col["memory"]["device_total_bytes"] = 21  # the timed step's reserved peak (20) is 95% of the device
    col["settings"] = {"cudnn_benchmark": False, "float32_matmul_precision": "highest"}
    (rd.staging / "collector.json").write_text(json.dumps(col))
    seen: list[dict[str, Any]] = []

    findings_of = rules.findings_from_analysis

    def findings(analysis: Any, doc: dict[str, Any]) -> list[dict[str, Any]]:
        seen.append(dict(doc))
        return findings_of(analysis, doc)

    monkeypatch.setattr(rules, "findings_from_analysis", findings)

    result = finish_run(rd, {"name": "gpt2", "command": ["python", "train.py"], "exit_code": 0}, CollectorConfig(),
                        echo=lambda m: None)
    assert result.complete and len(seen) == 1
    assert {"memory", "samples", "host_hotspots", "throughput", "meta"} <= set(seen[0])  # extras came first
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["meta"]["cudnn_benchmark"] is False
    assert "memory-near-limit" in [f["id"] for f in summary["findings"]]
    from dnnprof.model.profile import Profile

    assert Profile.load(result.run_dir / "profile").meta["run"]["cudnn_benchmark"] is False


def test_finish_run_writes_the_report_of_rank_0(tmp_path: Path) -> None:
    """summary.json is runs.report's document: the analysis, the run's extras, the findings and the checks."""
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.runs.finish import finish_run
    from dnnprof.runs.rundir import RunDir

    rd = RunDir.create("gpt2", out=tmp_path / "run")
    make_run(rd.staging)
    result = finish_run(rd, {"name": "gpt2", "command": ["x"], "exit_code": 0}, CollectorConfig(),
                        echo=lambda m: None)
    assert result.summary is not None and isinstance(result.summary["findings"], list)
    assert result.summary["meta"] == {} and result.summary["checks"]


def test_assemble_full_mode_run_joins_the_detail_window(tmp_path: Path) -> None:
    """``--full`` on a GPU: the timed steps ran under the timing window, shapes/stacks/memory events were recorded
    in a full-detail window after them, which is joined the same way."""
    col = make_run(tmp_path, detail="full")
    profile, info = assemble(tmp_path, col)
    assert profile.self_check() == []
    assert info["windows"] == ["full", "timing"]
    assert info["attribution"]["window"] == "full" and info["attribution"]["matched_kernels_pct"] == 100.0
    assert profile.tables["steps"]["number"].tolist() == [4]
    assert profile.meta["sources"] == ["trace/timing.json.gz", "trace/full.json.gz"]
