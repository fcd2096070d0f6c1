"""``launch-bound`` on a loop that already replays CUDA graphs (tests/data/graph_replay_h100, a decode loop of one
``cudaGraphLaunch`` per token): capturing CUDA graphs is no advice there. The recorded loop launches its replays
back to back; the host-bound case is the same trace with host work inserted before every replay (every later event
moved by the same amount), so the GPU runs dry between replays and waits for the next launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dnnprof.analysis.rules import findings_from_analysis
from dnnprof.analysis.summary import analyse, summary_of
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS

TRACE = Path(__file__).parent / "data" / "graph_replay_h100" / "trace.json.gz"
#: Host time inserted before each replay: with the ~0.17 ms the host took per replay, well over a replay's GPU time
#: (~0.52 ms) plus its launch delay (~0.27 ms), so the GPU runs dry before every launch starts.
HOST_GAP_NS = 1_000_000


def _with_host_gaps(p: Profile, gap_ns: int) -> Profile:
    """Host events move by ``gap_ns`` per replay launched at or before them; each replay's GPU work starts at the
    same delay after its launch as the first replay's, or when the replay before it ends, whichever is later (the
    stream runs its work in order)."""
    rt = p.tables["runtime"]
    replay = np.flatnonzero(rt["api_kind"] == API_KINDS.index("graph_launch"))
    replay = replay[np.argsort(rt["start_ns"][replay])]
    launches = rt["start_ns"][replay]

    def shift(t: np.ndarray) -> np.ndarray:
        return t + gap_ns * np.searchsorted(launches, t, side="right")

    new_launch = shift(launches)
    first = np.full(replay.size, np.iinfo(np.int64).max)
    last = np.zeros(replay.size, dtype=np.int64)
    pos = {int(r): i for i, r in enumerate(replay.tolist())}
    gpu = [p.tables[n] for n in ("kernels", "memcpy", "memset")]
    idx = [np.array([pos.get(int(r), -1) for r in t["launch_row"].tolist()], dtype=np.int64) for t in gpu]
    for t, i in zip(gpu, idx, strict=True):
        ok = i >= 0
        np.minimum.at(first, i[ok], t["start_ns"][ok])
        np.maximum.at(last, i[ok], t["start_ns"][ok] + t["dur_ns"][ok])
    delay = first[0] - launches[0]
    move = np.zeros(replay.size, dtype=np.int64)
    end = np.iinfo(np.int64).min
    for i in range(replay.size):  # in order on the stream
        start = max(int(new_launch[i] + delay), end)
        move[i] = start - first[i]
        end = int(last[i] + move[i])
    for t, i in zip(gpu, idx, strict=True):
        t["start_ns"] = t["start_ns"] + np.where(i >= 0, move[np.clip(i, 0, None)], 0)
    p.tables["ops"]["start_ns"] = shift(p.tables["ops"]["start_ns"])
    rt["start_ns"] = shift(rt["start_ns"])
    return p


def _findings(p: Profile) -> dict[str, dict[str, Any]]:
    a = analyse(p)
    return {f["id"]: f for f in findings_from_analysis(a, summary_of(a))}


def test_launch_bound_between_graph_replays_does_not_advise_cuda_graphs() -> None:
    if not TRACE.exists():
        pytest.skip("tests/data/graph_replay_h100 is absent")
    f = _findings(_with_host_gaps(read_kineto(TRACE), HOST_GAP_NS))["launch-bound"]
    assert f["evidence"]["graph_launched_kernel_pct"] == pytest.approx(100.0)
    assert "CUDA graph" in f["title"]  # says the work already runs as graphs
    rec = f["recommendation"]
    assert "torch.cuda.CUDAGraph" not in rec and "reduce-overhead" not in rec
    assert "outside the graph" in rec
    # 23 gaps between replays of about 0.17 + 1 - 0.52 ms, each ended by a replay launched after the GPU ran dry
    assert 23 * 550 <= f["evidence"]["host_launch_idle_us"] <= 23 * 700


def test_launch_bound_quiet_on_the_recorded_graph_loop() -> None:
    if not TRACE.exists():
        pytest.skip("tests/data/graph_replay_h100 is absent")
    assert "launch-bound" not in _findings(read_kineto(TRACE))
