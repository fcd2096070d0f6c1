"""Real two-GPU DDP runs (``tests/data/ddp_runs_h100``, H100, NCCL) with one slowed rank: analysed from their raw
``rank<N>/`` traces, the critical path names the rank and the phase that made the other wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.detect import kind_of

RUNS = Path(__file__).parent / "data" / "ddp_runs_h100"


@pytest.mark.parametrize(("planted", "phase"), [("forward", "forward"), ("backward", "forward"),
                                                 ("data", "data_loading")])
def test_the_slowed_rank_and_its_phase_are_named(tmp_path: Path, planted: str, phase: str) -> None:
    run = RUNS / planted
    assert kind_of(run) == "run-raw"
    out = tmp_path / "s.json"
    assert main(["analyze", str(run), "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    cp = doc["critical_path"]
    v = cp["verdict"]
    assert (v["rank"], v["phase"]) == (1, phase), cp["steps"]
    assert v["steps"] >= v["of_steps"] - 1
    waits = {r["rank"]: r["wait_us_per_step"] for r in cp["per_rank"]}
    assert waits[0] > 10_000 > waits[1]  # rank 0 waits for rank 1 at the all-reduces
    assert {r["rank"] for r in doc["ranks"]["per_rank"]} == {0, 1}
    assert any(f["id"] == "rank-late-phase" and f["evidence"]["rank"] == 1 for f in doc["findings"])


def test_gpu_ranks_are_matched_by_their_gpu_side_steps() -> None:
    """The backward run's host on rank 0 runs ahead of its GPU; matched by host-side steps, rank 0 looked late."""
    from dnnprof.analysis.critical_path import critical_path
    from dnnprof.ingest.detect import open_profile

    cp = critical_path(open_profile(RUNS / "backward"))
    assert cp is not None
    assert all(s["rank"] in (1, None) for s in cp["steps"]), cp["steps"]
