"""The critical path across ranks names the planted straggler's rank and phase: real gloo runs of 2 ranks under
``dnnprof run --nproc 2`` (one rank sleeps in forward, in backward or in its data loader), and the real H100 DDP
traces of ``tests/data/ddp_h100`` (rank 1 sleeps on the host before backward)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprof.analysis.critical_path import critical_path
from dnnprof.cli.main import main
from dnnprof.ingest.detect import open_profile
from test_run_ranks import dnnprof_run

DDP = Path(__file__).parent / "data" / "ddp_h100"


@pytest.mark.parametrize("phase", ["forward", "backward", "data"])
def test_planted_straggler_is_named(tmp_path: Path, phase: str) -> None:
    run = tmp_path / "run"
    dnnprof_run(run, script_args=("--slow-rank", "1", "--slow-phase", phase, "--slow-ms", "30"))
    assert sorted(p.name for p in run.glob("rank*")) == ["rank0", "rank1"]
    summary = json.loads((run / "summary.json").read_text())
    v = summary["critical_path"]["verdict"]
    want = {"data": "data_loading"}.get(phase, phase)
    assert (v["rank"], v["phase"]) == (1, want), summary["critical_path"]["steps"]
    assert v["steps"] >= v["of_steps"] - 1 and 20_000 < v["wait_us_per_step"] < 60_000
    rows = {r["rank"]: r for r in summary["critical_path"]["per_rank"]}
    assert rows[0]["wait_us_per_step"] > 20_000 > rows[1]["wait_us_per_step"]  # rank 0 waits for rank 1
    assert {r["rank"] for r in summary["ranks"]["per_rank"]} == {0, 1}
    colls = summary["collectives"]  # gloo records no collective args: matched by span name and order
    assert colls["unmatched"] == 0 and colls["top_by_wait"][0]["name"] == "allreduce"
    assert colls["top_by_wait"][0]["last_rank"] == 1 and colls["top_by_wait"][0]["wait_us"] > 20_000
    found = {f["id"]: f for f in summary["findings"]}
    assert found["rank-late-phase"]["evidence"]["rank"] == 1 and found["rank-late-phase"]["evidence"]["phase"] == want
    # analyze of the run directory says the same, for the rank asked for
    out = tmp_path / "a.json"
    assert main(["analyze", str(run), "--rank", "1", "--json", str(out), "--quiet"]) == 0
    again = json.loads(out.read_text())
    assert again["rank"] == 1 and again["critical_path"]["verdict"] == v
    if phase == "data":  # a multi-rank run whose profile/ was never written is read from its ranks' traces
        import shutil

        from dnnprof.ingest.detect import kind_of

        raw = tmp_path / "raw"
        for d in run.glob("rank*"):
            shutil.copytree(d, raw / d.name)
        assert kind_of(raw) == "run-raw"
        assert main(["analyze", str(raw), "--json", str(out), "--quiet"]) == 0
        assert json.loads(out.read_text())["critical_path"]["verdict"]["phase"] == want


def test_real_h100_straggler_waits_on_host_before_backward() -> None:
    path = critical_path(open_profile(DDP / "straggler"))
    assert path is not None and path["instances"] == 9
    v = path["verdict"]
    assert (v["rank"], v["phase"], v["steps"], v["of_steps"]) == (1, "host", 3, 3)
    assert 10_000 < v["excess_us_per_step"] < 20_000  # the 15 ms sleep
    rows = {r["rank"]: r for r in path["per_rank"]}
    # per step its longest wait (the sleep and the host time around it), not the sum over the step's collectives
    assert 15_000 < rows[0]["wait_us_per_step"] < 30_000 and rows[1]["wait_us_per_step"] == 0
    assert rows[0]["exposed_comm_us_per_step"] > rows[1]["exposed_comm_us_per_step"]


def test_one_rank_has_no_critical_path() -> None:
    assert critical_path(open_profile(DDP / "straggler" / "rank0.json.gz")) is None
