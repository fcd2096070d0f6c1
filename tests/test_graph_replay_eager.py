"""CUDA graphs captured by hand (``torch.cuda.graph``) in a run profiled as one window: the eager warm-up the capture
needs is in the trace, so each replayed kernel takes the op (layer, phase, source) of the eager kernel at the same
place of the same sequence, and the replays after the warm-up are the steps.

Fixture: ``graph_replay_h100/decode_run_whole_window.json.gz``, the whole-run window of ``dnnprof run -- python
tests/data/scripts/decode_cuda_graph.py --tokens 200`` on an H100 (see that folder's README), cut after 40 replays."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from dnnprof.analysis.attribution import PHASES, attribute
from dnnprof.analysis.steps import step_source, with_steps
from dnnprof.ingest.assemble import _whole_trace_step
from dnnprof.ingest.graph_replays import _keys, _latest_run
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.schema import API_KINDS
from dnnprof.runs.report import report

TRACE = Path(__file__).parent / "data" / "graph_replay_h100" / "decode_run_whole_window.json.gz"


def _replayed(p) -> np.ndarray:
    rt, k = p.tables["runtime"], p.tables["kernels"]
    gl = rt["api_kind"] == API_KINDS.index("graph_launch")
    return np.isin(_keys(k["rank"], k["correlation"]), _keys(rt["rank"][gl], rt["correlation"][gl]))


def test_replayed_kernels_take_the_ops_of_the_eager_warm_up() -> None:
    p = read_kineto(TRACE)
    assert p.meta["graph_replays_eager"] == {"replays": 40, "matched": 40, "kernels": 40 * 114}
    k = p.tables["kernels"]
    rep = _replayed(p)
    assert rep.sum() == 40 * 114 and (k["op_row"][rep] >= 0).all()
    names = p.names(p.tables["ops"]["name_id"][k["op_row"]]).astype(str)
    # Every replay runs the ops of one eager decode step: the same 114 launching ops, each replay alike.
    per_replay = Counter(names[rep].tolist())
    eager = Counter(names[~rep].tolist())
    assert all(n % 40 == 0 for n in per_replay.values()) and set(per_replay) <= set(eager)
    assert per_replay["aten::addmm"] // 40 >= 6 * 3  # six blocks: qkv, out and MLP projections at least
    a = attribute(p, "kernels")
    assert (a.phase[rep] == PHASES.index("forward")).all()  # captured from a forward, not "other"


def test_the_replays_after_the_warm_up_are_the_steps() -> None:
    p = read_kineto(TRACE)
    _whole_trace_step(p)  # what assemble does with a run's whole-run window
    q = with_steps(p)
    st = q.tables["steps"]
    assert step_source(q) == "pattern"
    assert 38 <= st["number"].size <= 40 and (st["dur_ns"] > 0).all()
    k = q.tables["kernels"]
    rep = _replayed(q)
    assert (k["step"][~rep] < 0).all()  # the eager warm-up and capture before the loop are in no step
    _, doc = report(p)
    assert doc["steps"]["source"] == "pattern" and doc["serving"]["decode"]["iterations"] == 40
    assert doc["phases"]["other_us"] == 0.0
    # The host runs ahead of the GPU (no sync in the loop): its step times jump with the launch queue while the
    # GPU finishes a replay every ~0.52 ms; that is no unstable iteration.
    assert "unstable-steps" not in {f["id"] for f in doc["findings"]}
    assert doc["steps"]["cv_pct"] > 10


def test_latest_run_stays_in_one_stream_and_takes_the_last() -> None:
    names = np.array([1, 2, 3, 9, 1, 2, 3, 1, 2, 3])
    group = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    start = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1, 2])  # stream 1's run started before stream 0's second one
    assert _latest_run(names, group, start, np.array([1, 2, 3])).tolist() == [0, 1, 2]  # 4..6 crosses streams
    assert _latest_run(names, group, start * 0 + np.arange(10), np.array([1, 2, 3])).tolist() == [7, 8, 9]
    assert _latest_run(names, group, start, np.array([2, 3, 1])) is None
    assert _latest_run(names, group, start, np.array([1, 2])) is None  # too short to name an op
    assert _latest_run(names, group, start, np.array([], dtype=np.int64)) is None
