"""The ranks of a multi-GPU profile side by side (``summary.ranks``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dnnprof.analysis.ranks import rank_overview
from dnnprof.cli.main import main
from dnnprof.model.profile import Profile
from dnnprof.model.schema import STEP_SOURCES, empty_table

DATA = Path(__file__).parent / "data"
TRACES = (DATA / "gpt2_bf16_train_h200" / "trace.json.gz", DATA / "deepspeech_train_h200" / "trace.json.gz")
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def _profile(kernels: list[tuple[int, str, int, int, int]], step_ns: dict[int, int]) -> Profile:
    """Kernels as (rank, name, stream, start_ns, end_ns), one step per rank from 0 to ``step_ns[rank]``."""
    p = Profile()
    k = empty_table("kernels", len(kernels))
    for i, (rank, name, stream, start, end) in enumerate(kernels):
        k["rank"][i], k["device"][i], k["stream"][i] = rank, 0, stream
        k["start_ns"][i], k["dur_ns"][i], k["name_id"][i], k["step"][i] = start, end - start, p.intern(name), 0
    s = empty_table("steps", len(step_ns))
    for i, (rank, dur) in enumerate(sorted(step_ns.items())):
        s["rank"][i], s["number"][i], s["source"][i] = rank, 0, STEP_SOURCES.index("marker")
        s["start_ns"][i], s["dur_ns"][i], s["gpu_start_ns"][i], s["gpu_end_ns"][i] = 0, dur, 0, dur
    p.tables.update(kernels=k, steps=s)
    p.meta["ranks"] = sorted(step_ns)
    return p


def test_exposed_collectives_and_the_straggler() -> None:
    # rank 0 computes 100 µs and waits in its all-reduce for rank 1, which computes 140 µs; on each GPU the
    # all-reduce overlaps the last 50 µs (rank 0) or 40 µs (rank 1) of compute on another stream
    us = 1000
    p = _profile([(0, GEMM, 7, 0, 100 * us), (0, NCCL, 13, 50 * us, 150 * us),
                  (1, GEMM, 7, 0, 140 * us), (1, NCCL, 13, 100 * us, 150 * us)], {0: 160 * us, 1: 170 * us})
    r = rank_overview(p)
    assert r is not None and r["count"] == 2
    by = {x["rank"]: x for x in r["per_rank"]}
    assert by[0]["compute_us_per_step"] == 100 and by[0]["nccl_us_per_step"] == 100
    assert by[0]["exposed_nccl_us_per_step"] == 50
    assert by[1]["compute_us_per_step"] == 140 and by[1]["nccl_us_per_step"] == 50
    assert by[1]["exposed_nccl_us_per_step"] == 10
    assert r["straggler_rank"] == 1 and r["slowest_rank"] == 1 and r["fastest_rank"] == 0
    assert r["step_median_spread_pct"] == pytest.approx(100 * 10 / 160, abs=0.01)
    assert rank_overview(_profile([(0, GEMM, 7, 0, 10)], {0: 20})) is None  # one rank: nothing to compare


def test_two_real_traces_as_two_ranks(tmp_path: Path) -> None:
    for rank, trace in enumerate(TRACES):
        doc = json.loads(gzip.open(trace).read())
        doc.setdefault("distributedInfo", {})["rank"] = rank
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "s.json"
    assert main(["analyze", str(tmp_path), "--json", str(out), "--quiet"]) == 0
    ranks = json.loads(out.read_text())["ranks"]
    for rank, trace in enumerate(TRACES):
        alone = tmp_path / f"alone{rank}.json"
        assert main(["analyze", str(trace), "--json", str(alone), "--quiet"]) == 0
        want = json.loads(alone.read_text())
        assert "ranks" not in want
        row = ranks["per_rank"][rank]
        assert row["step_median_us"] == want["steps"]["median_us"] and row["busy_pct"] == want["gpu"]["busy_pct"]
        assert row["nccl_us_per_step"] == 0  # single-GPU traces: no collectives
    import jsonschema

    schema = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "summary-1.schema.json"
    jsonschema.validate(json.loads(out.read_text()), json.loads(schema.read_text()))
    from dnnprof.render.html_report import render_html

    page = render_html(json.loads(out.read_text()))
    # no collectives: the straggler is the rank whose compute per step exceeds the other's (GPT-2 vs DeepSpeech)
    assert ranks["straggler_basis"] == "compute" and ranks["straggler_wait_us_per_step"] is None
    assert "<h2>Ranks (2)</h2>" in page and f"straggler {ranks['straggler_rank']}," in page


def _findings(p: Profile, rank: int) -> dict[str, dict]:
    from dnnprof.analysis.rules import findings_from_analysis
    from dnnprof.analysis.summary import analyse, summary_of

    a = analyse(p, rank)
    doc = summary_of(a)
    return {f["id"]: f for f in findings_from_analysis(a, doc)}


def test_exposed_collectives_and_a_straggler_are_findings() -> None:
    us = 1000
    p = _profile([(0, GEMM, 7, 0, 100 * us), (0, NCCL, 13, 50 * us, 150 * us),
                  (1, GEMM, 7, 0, 140 * us), (1, NCCL, 13, 100 * us, 150 * us)], {0: 160 * us, 1: 170 * us})
    f0 = _findings(p, 0)
    straggler = f0["rank-straggler"]
    assert straggler["evidence"]["straggler_rank"] == 1
    # rank 0 spins 50 µs longer in its all-reduce than rank 1: the wait, over the median step of 165 µs
    assert straggler["est_gain_pct"] == pytest.approx(100 * 50 / 165, abs=0.1)
    # rank 0's 50 µs of exposed all-reduce are all waiting for rank 1: no overlap would remove them, so they are
    # rank-straggler's, not communication-exposed's
    assert "communication-exposed" not in f0
    f1 = _findings(p, 1)  # the late rank's own 10 µs exposed are transfer
    assert f1["communication-exposed"]["evidence"]["exposed_nccl_us_per_step"] == 10
    assert f1["communication-exposed"]["evidence"]["waiting_us_per_step"] == 0
    # Balanced ranks whose collectives run under compute: neither finding.
    calm = _profile([(0, GEMM, 7, 0, 140 * us), (0, NCCL, 13, 100 * us, 140 * us),
                     (1, GEMM, 7, 0, 135 * us), (1, NCCL, 13, 100 * us, 140 * us)], {0: 150 * us, 1: 150 * us})
    assert not {"communication-exposed", "rank-straggler"} & set(_findings(calm, 0))


def test_exposed_transfer_is_what_is_left_after_waiting_for_the_late_rank() -> None:
    # rank 0: 100 µs compute, all-reduce 20–120 (exposed 20 µs); rank 1 joins 30 µs later: all-reduce 50–120 and
    # compute until 60 (exposed 60 µs). Rank 0 waits 30 µs of its 100 for rank 1; its exposure is all waiting.
    # Rank 1's own 60 µs exposed are transfer.
    us = 1000
    p = _profile([(0, GEMM, 7, 0, 100 * us), (0, NCCL, 13, 20 * us, 120 * us),
                  (1, GEMM, 7, 0, 60 * us), (1, NCCL, 13, 50 * us, 120 * us)], {0: 130 * us, 1: 130 * us})
    f0, f1 = _findings(p, 0), _findings(p, 1)
    assert f0["rank-straggler"]["evidence"]["straggler_rank"] == 1
    assert "communication-exposed" not in f0  # 20 µs exposed, 30 µs waiting: nothing left to overlap
    e = f1["communication-exposed"]["evidence"]
    assert e["exposed_nccl_us_per_step"] == 60 and e["waiting_us_per_step"] == 0 and e["waiting_for_rank"] is None
    # a third rank joining 10 µs after rank 0 and before rank 1: it waits 20 µs of its 30 µs exposed
    p3 = _profile([(0, GEMM, 7, 0, 100 * us), (0, NCCL, 13, 20 * us, 120 * us),
                   (1, GEMM, 7, 0, 60 * us), (1, NCCL, 13, 50 * us, 120 * us),
                   (2, GEMM, 7, 0, 90 * us), (2, NCCL, 13, 30 * us, 120 * us)], {0: 130 * us, 1: 130 * us, 2: 130 * us})
    e2 = _findings(p3, 2)["communication-exposed"]["evidence"]
    assert e2["exposed_nccl_us_per_step"] == 30 and e2["waiting_us_per_step"] == 20 and e2["waiting_for_rank"] == 1
    assert _findings(p3, 2)["communication-exposed"]["est_gain_pct"] == pytest.approx(100 * 10 / 130, abs=0.1)


def test_one_rank_of_a_data_parallel_run_still_shows_exposed_communication() -> None:
    us = 1000
    p = _profile([(0, GEMM, 7, 0, 100 * us), (0, NCCL, 13, 90 * us, 160 * us)], {0: 170 * us})
    f = _findings(p, 0)
    assert f["communication-exposed"]["evidence"]["exposed_nccl_us_per_step"] == 60
    assert "rank-straggler" not in f


def test_a_rank_without_step_markers_gets_its_steps_inferred(tmp_path: Path) -> None:
    """Rank 0 has ProfilerStep ranges, rank 1 (the same GPT-2 trace) lost them: rank 1's steps come from its
    optimizer steps and its summary says so, instead of one whole-trace window."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 1):
        doc = json.loads(gzip.open(TRACES[0]).read())
        doc.setdefault("distributedInfo", {})["rank"] = rank
        if rank == 1:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    got = {}
    for rank in (0, 1):
        out = tmp_path / f"r{rank}.json"
        assert main(["analyze", str(folder), "--rank", str(rank), "--json", str(out), "--quiet"]) == 0
        got[rank] = json.loads(out.read_text())
    assert got[0]["steps"]["source"] == "profiler_step" and got[1]["steps"]["source"] == "optimizer"
    assert got[1]["steps"]["count"] >= 1 and got[1]["gpu"]["window"] == "steps"
    assert "no-steps" not in {f["id"] for f in got[1]["findings"]}


# --- real NCCL traces: DDP on two H100s (benchmarks/gpu/record_ddp_traces.py) ----------------------------------
DDP = DATA / "ddp_h100"


def _ddp(tmp_path: Path, name: str, rank: int = 0) -> dict:
    out = tmp_path / f"{name}{rank}.json"
    assert main(["analyze", str(DDP / name), "--rank", str(rank), "--json", str(out), "--quiet"]) == 0
    import jsonschema

    doc = json.loads(out.read_text())
    schema = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "summary-1.schema.json"
    jsonschema.validate(doc, json.loads(schema.read_text()))
    return doc


def test_a_rank_late_on_its_host_is_the_straggler_not_the_rank_that_computes_most(tmp_path: Path) -> None:
    """Rank 1 sleeps 15 ms on the host before each backward pass. Rank 0 computes more (3.15 ms against 2.81 ms
    per step) but spins 32.7 ms per step in its all-reduce waiting for rank 1, whose all-reduce takes 0.25 ms."""
    doc = _ddp(tmp_path, "straggler")
    r = doc["ranks"]
    by = {x["rank"]: x for x in r["per_rank"]}
    assert by[0]["compute_us_per_step"] > by[1]["compute_us_per_step"]
    assert by[0]["nccl_us_per_step"] == pytest.approx(32677.3, abs=0.1)
    assert by[1]["nccl_us_per_step"] == pytest.approx(250.3, abs=0.1)
    assert r["straggler_rank"] == 1 and r["straggler_basis"] == "collectives"
    assert r["straggler_wait_us_per_step"] == pytest.approx(32677.3 - 250.3, abs=0.2)
    assert r["straggler_compute_excess_us_per_step"] < 0  # not its GPU
    f = {x["id"]: x for x in doc["findings"]}
    s = f["rank-straggler"]
    assert s["evidence"]["straggler_rank"] == 1 and "the delay is on its host" in s["evidence"]["summary"]
    assert s["est_gain_pct"] == pytest.approx(100 * 32427.0 / ((41505.6 + 41697.5) / 2), abs=0.1)
    # rank 0's 30.7 ms of exposed all-reduce are all waiting for rank 1: that is rank-straggler's finding, and
    # communication-exposed no longer offers overlap as the fix
    assert "communication-exposed" not in f
    # NCCL kernels run on a few channels by design: no small-grid finding names them
    assert "small-grid" not in f or all("nccl" not in k["kernel"].lower() for k in f["small-grid"]["top"])


def test_balanced_ranks_still_show_which_one_joins_the_all_reduce_last(tmp_path: Path) -> None:
    """The same job with no planted delay: rank 1 still joins its all-reduce 10.8 ms per step after rank 0 (both
    ranks host-bound under the profiler), and it is named; with the 15 ms delay the wait grows by three times that."""
    balanced = _ddp(tmp_path, "balanced")["ranks"]
    straggler = _ddp(tmp_path, "straggler")["ranks"]
    assert balanced["straggler_rank"] == 1
    assert 10000 < balanced["straggler_wait_us_per_step"] < 11000
    assert straggler["straggler_wait_us_per_step"] > 3 * balanced["straggler_wait_us_per_step"]
    # every rank's view agrees
    assert _ddp(tmp_path, "straggler", 1)["ranks"]["straggler_rank"] == 1


def test_busy_time_spent_in_collectives_alone_is_shown_apart(tmp_path: Path) -> None:
    """Rank 0 of the straggler run is 81.7 % busy, but 73.7 % of its window is its all-reduce spinning for rank 1
    (30.5 ms per step); rank 1, which others wait for, spends 0.6 % so. Single-GPU traces have no such key."""
    r0, r1 = _ddp(tmp_path, "straggler", 0)["gpu"], _ddp(tmp_path, "straggler", 1)["gpu"]
    assert r0["busy_pct"] == 81.7 and r0["collectives_only_pct"] == 73.68
    assert r0["collectives_only_us"] == pytest.approx(91621.7, abs=0.1)
    assert r1["collectives_only_pct"] == 0.6
    out = tmp_path / "single.json"
    assert main(["analyze", str(TRACES[0]), "--json", str(out), "--quiet"]) == 0
    assert "collectives_only_us" not in json.loads(out.read_text())["gpu"]
    from io import StringIO

    from rich.console import Console

    from dnnprof.render.html_report import render_html
    from dnnprof.render.terminal import render

    doc = _ddp(tmp_path, "straggler", 0)
    assert "collectives alone" in render_html(doc)
    buf = StringIO()
    render(doc, console=Console(file=buf, width=200, force_terminal=False))
    assert "collectives alone (transfer, or waiting for other ranks): 91.62 ms, 73.7% of the window" in buf.getvalue()


def test_another_ranks_pageable_copy_is_not_this_ranks_sync() -> None:
    from dnnprof.analysis.utilization import utilization
    from dnnprof.ingest.kineto import read_kineto
    from dnnprof.ingest.ranks import merge_ranks

    folder = Path(__file__).resolve().parents[2] / "shared" / "foreign" / "hta__trace_filter_2ranks"
    if not folder.is_dir():
        pytest.skip(f"{folder}: the shared folder of foreign traces is not here")
    files = sorted(folder.iterdir())
    alone = utilization(read_kineto(files[0]), rank=0).idle_by_cause_ns()
    merged = utilization(merge_ranks([read_kineto(f) for f in files]), rank=0).idle_by_cause_ns()
    assert merged == alone
