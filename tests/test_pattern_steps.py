"""Steps found from the repeating launch pattern on traces that replay CUDA graphs (an LLM server's decode loop:
each step is one ``cudaGraphLaunch`` whose kernels all share that launch's correlation id).

There is no real graph-replay trace in the corpus yet. :func:`graph_replay_trace` derives one from a real H100
trace in tests/data (GPT-2 inference recorded by ``dnnprof run``, 10 steps of 365 kernels): the kernels launched
inside every ``per_graph`` consecutive ``dnnprof/forward`` ranges are made one replay — they take the correlation id
of the first launch call, which is renamed ``cudaGraphLaunch``; the other launch calls and their flow events are
removed, and so are the ``ProfilerStep#`` markers (so steps must be inferred). With two forwards per graph the
kernel sequence repeats twice inside each replay, as a decode graph repeats its layers. A real graph-replay trace
dropped into ``shared/foreign`` with ``graph_replay`` in its name is checked by the same invariants.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
TIMING = DATA / "run_gpt2_infer_h100" / "trace" / "timing.json.gz"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
REAL_REPLAYS = [Path(__file__).parent / "data" / "graph_replay_h100" / "trace.json.gz",
                *(sorted(FOREIGN.glob("*graph_replay*")) if FOREIGN.is_dir() else [])]


def graph_replay_trace(src: Path, dst: Path, per_graph: int, drop_launch_of: tuple[int, ...] = ()) -> Path:
    """Write ``src`` as a CUDA-graph replay trace (see the module docstring); the replays whose index is in
    ``drop_launch_of`` lose their launch call too (their kernels then have no launch record)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    ev: list[dict[str, Any]] = doc["traceEvents"]
    fwd = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                 if e.get("cat") == "user_annotation" and e.get("name") == "dnnprof/forward")
    groups = [(fwd[i][0], fwd[min(i + per_graph, len(fwd)) - 1][1]) for i in range(0, len(fwd), per_graph)]
    kernel_corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel"}
    new_corr: dict[int, int] = {}
    drop: set[int] = set()
    for g, (lo, hi) in enumerate(groups):
        calls = sorted((e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= e["ts"] < hi
                        and e.get("args", {}).get("correlation") in kernel_corr), key=lambda e: e["ts"])
        head = calls[0]
        head["name"] = "cudaGraphLaunch"
        for c in calls[1:]:
            new_corr[c["args"]["correlation"]] = head["args"]["correlation"]
            drop.add(id(c))
        if g in drop_launch_of:
            drop.add(id(head))
    out = []
    for e in ev:
        if id(e) in drop or (e.get("cat") == "ac2g" and e.get("id") in new_corr):
            continue
        if e.get("cat") in ("user_annotation", "gpu_user_annotation") and str(e.get("name")).startswith("ProfilerStep#"):
            continue
        if e.get("cat") == "kernel" and e["args"].get("correlation") in new_corr:
            e["args"]["correlation"] = new_corr[e["args"]["correlation"]]
        out.append(e)
    doc["traceEvents"] = out
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def _summary(path: Path) -> tuple[Any, dict[str, Any]]:
    from dnnprof.cli.sources import analysed

    return analysed(path, 0)


def _assert_positive_steps(a: Any, doc: dict[str, Any]) -> None:
    steps = a.profile.tables["steps"]
    order = np.argsort(steps["start_ns"], kind="stable")
    start, dur = steps["start_ns"][order], steps["dur_ns"][order]
    assert (dur > 0).all(), f"step durations {dur.tolist()}"
    assert (start[1:] >= start[:-1] + dur[:-1]).all(), "host windows disjoint and ordered"
    assert all(d > 0 for d in doc["steps"]["durations_us"])
    if doc["steps"]["count"]:
        assert doc["steps"]["median_us"] > 0


@pytest.mark.parametrize(("per_graph", "dropped"), [(2, ()), (2, (2,))])
def test_graph_replay_pattern_steps_are_whole_replays(tmp_path: Path, per_graph: int, dropped: tuple[int, ...]) -> None:
    """Each replay is one step (5 replays of 2 forwards: 4 windows of about 2 × 11.5 ms), none of 0 µs; a replay
    whose launch call is missing gets its boundary from its GPU start moved back by the others' launch delay
    (never a host time mixed with a GPU time)."""
    trace = graph_replay_trace(TIMING, tmp_path / "replay.json.gz", per_graph, dropped)
    a, doc = _summary(trace)
    assert doc["steps"]["source"] == "pattern"
    _assert_positive_steps(a, doc)
    assert doc["steps"]["count"] == 4
    assert 20_000 < doc["steps"]["median_us"] < 25_000
    assert not any(f["id"] == "unstable-steps" for f in doc["findings"])


@pytest.mark.parametrize("path", REAL_REPLAYS, ids=[p.name for p in REAL_REPLAYS])
def test_real_graph_replay_steps_positive(path: Path) -> None:
    a, doc = _summary(path)
    _assert_positive_steps(a, doc)


def test_real_graph_replays_are_whole_steps_and_not_told_to_compile() -> None:
    """24 replays of one decode step on an H100: every step window holds one whole replay on the GPU (its 115
    kernels, ~0.52 ms), and the model already runs as CUDA graphs, so compile-not-used stays quiet."""
    from dnnprof.analysis.rules import findings_from_analysis

    a, doc = _summary(REAL_REPLAYS[0])
    assert doc["steps"]["count"] >= 23
    gpu = np.asarray(doc["steps"]["gpu_durations_us"])
    assert (np.abs(gpu - np.median(gpu)) < 0.05 * np.median(gpu)).all()
    assert "compile-not-used" not in [f["id"] for f in findings_from_analysis(a, doc)]


def test_unstable_steps_refuses_zero_or_negative_step_times(tmp_path: Path) -> None:
    """A step statistic built on steps of 0 µs or less is not printed ("median 0 µs")."""
    from dnnprof.analysis.rules import findings_from_analysis

    a, doc = _summary(graph_replay_trace(TIMING, tmp_path / "replay.json.gz", 1))
    steps = a.profile.tables["steps"]
    assert steps["dur_ns"].size >= 5
    steps["dur_ns"][::2] = 0  # what the launch pattern gave for graph replays before
    steps["dur_ns"][1] = -25_000_000
    assert not any(f["id"] == "unstable-steps" for f in findings_from_analysis(a, doc))
