"""A run profiled as one window (``dnnprof run`` found no iterations: a decode loop replaying a CUDA graph, no
optimizer, no markers) still gets its iterations from the trace: the whole-trace step stands aside for the graph
replays (H100: the decode script's run had 1 step for 400 replays)."""

from __future__ import annotations

from pathlib import Path

from dnnprof.analysis.steps import step_source, with_steps
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.assemble import _whole_trace_step
from dnnprof.ingest.kineto import read_kineto

TRACE = Path(__file__).parent / "data" / "graph_replay_h100" / "trace.json.gz"


def _as_whole_run():
    p = read_kineto(TRACE)
    _whole_trace_step(p)  # what assemble does for a run's whole-run window
    assert step_source(p) == "whole_trace" and p.tables["steps"]["number"].size == 1
    return p


def test_the_replays_are_the_steps_of_a_whole_run_window() -> None:
    p = with_steps(_as_whole_run())
    assert step_source(p) == "pattern"
    assert p.tables["steps"]["number"].size >= 20  # 24 replays: the first and last may be partial
    assert (p.tables["steps"]["dur_ns"] > 0).all() and (p.tables["steps"]["gpu_end_ns"]
                                                         > p.tables["steps"]["gpu_start_ns"]).all()


def test_a_whole_run_window_without_a_pattern_stays_one_step() -> None:
    p = _as_whole_run()
    k = p.tables["kernels"]
    keep = k["start_ns"] <= k["start_ns"].min()  # a single launch: nothing repeats
    p.tables["kernels"] = {c: v[keep] for c, v in k.items()}
    assert with_steps(p) is p and step_source(p) == "whole_trace"


def test_the_summary_counts_the_replays() -> None:
    s = summarize(_as_whole_run())
    assert s["steps"]["count"] >= 20 and s["steps"]["source"] == "pattern"


def test_one_eager_iteration_is_not_cut_into_its_repeating_parts() -> None:
    """A trace of one training step (a single-step profile, a whole-run window) repeats inside: the backward of
    identical layers, a run of DDP bucket all-reduces. Only a stretch of graph replays stands for iterations, so
    these give no steps (before: 4 "steps" of one layer's backward, 13 of one all-reduce each)."""
    from dnnprof.analysis.steps import _pattern_windows
    from dnnprof.model.schema import empty_table

    data = Path(__file__).parent / "data"
    for path, step in ((data / "rules" / "h100" / "amp_not_used.json.gz", 3),
                       (data / "ddp_runs_h100_4gpu" / "backward_hook" / "rank0" / "trace" / "attribution.json.gz", 11)):
        p = read_kineto(path)
        k = p.tables["kernels"]
        keep = k["step"] == step
        assert keep.sum() > 20
        p.tables["kernels"] = {c: v[keep] for c, v in k.items()}
        p.tables["steps"] = empty_table("steps")
        assert _pattern_windows(p, 0) is None, path
