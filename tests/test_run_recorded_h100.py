"""A real default-mode run directory from an H100, assembled again here: the launch-order join, step assignment and
summary of today's code against what the GPU run wrote.

``tests/data/run_gpt2_infer_h100``: ``dnnprof profile gpt2 --mode infer --precision amp-bf16 --batch-size 8
--warmup-steps 3 --steps 10`` as a profile point of ``benchmarks/gpu/workload_table.py`` (NVIDIA H100 80GB HBM3,
PyTorch 2.11.0+cu130, transformers GPT-2 124M, 2026-11-26): the collector's results, the NVML/GPM samples, the
timing and attribution traces, and the summary.json it wrote (``expected_summary.json``); local paths removed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dnnprof.analysis import run_metrics as metrics
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.assemble import assemble, load_collector

RUN = Path(__file__).parent / "data" / "run_gpt2_infer_h100"


@pytest.fixture(scope="module")
def assembled(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    run = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(RUN, run)
    col = load_collector(run)
    profile, info = assemble(run, col)
    return col, profile, info, json.loads((RUN / "expected_summary.json").read_text())


def test_every_timed_kernel_joins_its_op_and_layer(assembled: tuple) -> None:
    _, profile, info, _ = assembled
    att = info["attribution"]
    assert att["timed_steps"] == list(range(3, 13)) and att["attribution_steps"] == [14, 15]
    assert att["kernels_in_timed_steps"] == 3650 and att["matched_kernels_pct"] == 100.0
    assert {s["kernels"] for s in att["per_step"]} == {365}
    k = profile.tables["kernels"]
    timed = k["step"] >= 3
    assert timed.sum() == 3650 and (k["op_row"][timed] >= 0).all()


def test_the_summary_is_the_one_the_gpu_run_wrote(assembled: tuple) -> None:
    _, profile, _, expected = assembled
    s = summarize(profile)
    assert {k: s["gpu"][k] for k in expected["gpu"]} == expected["gpu"]  # later versions add keys, never change these
    assert s["steps"] == expected["steps"]
    assert s["attribution"] == expected["attribution"]
    assert len(s["layers"]) == len(expected["layers"]) == 113
    assert [(k["name"], k["calls"], k["layer"], k["phase"]) for k in s["kernels"]] == \
        [(k["name"], k["calls"], k["layer"], k["phase"]) for k in expected["kernels"]]
    assert s["gpu"]["busy_pct"] == 89.19 and s["gpu"]["tensor_core_pct"] == 44.83


def test_the_run_extras_are_the_ones_the_gpu_run_wrote(assembled: tuple) -> None:
    col, _, _, expected = assembled
    samples = json.loads((RUN / "samples.json").read_text())
    extras = metrics.run_extras(col, samples)
    for key in ("memory", "overhead"):
        assert extras[key] == expected[key], key
    # The samples inside the timed steps are the ones the GPU run summarised ...
    inside = {k: v for k, v in extras["samples"]["metrics"].items() if "outside_window_ms" not in v}
    assert inside == expected["samples"]["metrics"]
    # ... and the GPM metrics, which had no value inside the 114 ms of timed steps (the helper process took its
    # first sample 95 ms into them, and a GPM value pairs two samples 110 ms apart), now come from the nearest
    # sample, flagged with how far outside it lies.
    outside = {k: v for k, v in extras["samples"]["metrics"].items() if "outside_window_ms" in v}
    assert outside["sm_active_pct"] == {"mean": 71.156, "median": 71.156, "p90": 71.156, "max": 71.156, "n": 1,
                                        "outside_window_ms": 60.0}
    assert set(outside) >= {"sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct"}
    assert "114.3 ms" in extras["samples"]["note"]
    t = extras["throughput"]
    # The GPU run's rates were over the summed step time: they are the wall_* ones now, and the rates beside the
    # median step time are per median step.
    wrote = dict(expected["throughput"])
    for key in ("items_per_s", "steps_per_s"):
        assert t[f"wall_{key}"] == wrote.pop(key)
    assert {k: v for k, v in t.items() if not k.startswith(("unprofiled", "wall_")) and k not in (
        "items_per_s", "steps_per_s")} == wrote
    assert t["items_per_s"] == pytest.approx(4096 * 1e6 / t["step_time_median_us"], abs=0.5)
    assert t["unprofiled_steps"] == len(expected["overhead"]["baseline_steps"])
    assert t["unprofiled_step_time_median_us"] == expected["overhead"]["baseline"]["median_us"]


def test_a_run_whose_profile_was_never_written_is_assembled_by_analyze(tmp_path: Path) -> None:
    from dnnprof.cli.main import main

    run = tmp_path / "run"
    shutil.copytree(RUN, run)  # collector results and traces only, as a run the parent never finished
    out = tmp_path / "s.json"
    assert main(["analyze", str(run), "--json", str(out), "--quiet"]) == 0
    s = json.loads(out.read_text())
    expected = json.loads((RUN / "expected_summary.json").read_text())
    assert {k: s["gpu"][k] for k in expected["gpu"]} == expected["gpu"] and s["steps"]["count"] == 10
    assert any("assembled from the run's traces" in n for n in s["source"]["notes"])
    assert main(["diff", str(run), str(RUN / "expected_summary.json"), "--json", str(tmp_path / "d.json"),
                 "--quiet"]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["step_time_median_us"]["speedup"] == 1.0


def test_run_says_when_the_timed_steps_were_too_short_for_the_samples(assembled: tuple,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from dnnprof.cli.run import report

    col, _, _, _ = assembled
    extras = metrics.run_extras(col, json.loads((RUN / "samples.json").read_text()))
    report(SimpleNamespace(messages=[], summary=extras, meta={}, complete=True, run_dir="run", profile_dir=None))
    err = capsys.readouterr().err
    assert "dnnprof: NVML: the timed steps took 114.3 ms, less than the sampling needs" in err


#: What ``dnnprof run`` passes to ``finish_run`` about the process (the rest of meta.json is finish_run's own).
_RUN_META_KEYS = ("name", "command", "cwd", "exit_code", "interrupted", "started_unix_s", "duration_s", "workload",
                  "git", "dnnprof_version", "owner_found", "boot_error", "child_error")


def _finished_run(tmp_path: Path) -> Path:
    """The recorded run finished here as ``dnnprof run`` finishes one: profile/, summary.json, meta.json."""
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.runs.finish import finish_run
    from dnnprof.runs.rundir import RunDir

    staging = tmp_path / ".run.partial"
    shutil.copytree(RUN, staging)
    (staging / "expected_summary.json").unlink()
    meta = json.loads((RUN / "meta.json").read_text())
    result = finish_run(RunDir(final=tmp_path / "run", staging=staging), {k: meta[k] for k in _RUN_META_KEYS},
                        CollectorConfig.load(staging), echo=lambda m: None)
    assert result.complete and (result.run_dir / "summary.json").is_file()
    return result.run_dir


def test_analyze_of_a_run_directory_is_the_summary_the_run_wrote(tmp_path: Path) -> None:
    from dnnprof.cli.main import main

    run = _finished_run(tmp_path)
    wrote = json.loads((run / "summary.json").read_text())
    out = tmp_path / "s.json"
    assert main(["analyze", str(run), "--json", str(out), "--quiet"]) == 0
    got = json.loads(out.read_text())
    assert got == wrote
    # The run's own keys (docs/summary-json.md), with the numbers the GPU run wrote.
    expected = json.loads((RUN / "expected_summary.json").read_text())
    for key in ("memory", "overhead", "host_hotspots", "meta", "run"):
        assert got[key] == expected[key], key
    assert got["throughput"]["wall_items_per_s"] == expected["throughput"]["items_per_s"]
    assert got["throughput"]["unprofiled_steps"] == 4 and got["samples"]["status"] == expected["samples"]["status"]
    assert {f["id"] for f in got["findings"]} == {f["id"] for f in expected["findings"]}


def test_analyze_of_an_unfinished_run_has_the_runs_keys_too(tmp_path: Path) -> None:
    from dnnprof.cli.main import main

    wrote = json.loads((_finished_run(tmp_path / "finished") / "summary.json").read_text())
    run = tmp_path / "raw"
    shutil.copytree(RUN, run)  # collector results and traces only: analyze assembles the profile
    out = tmp_path / "s.json"
    assert main(["analyze", str(run), "--json", str(out), "--quiet"]) == 0
    got = json.loads(out.read_text())
    for key in ("throughput", "samples", "memory", "overhead", "host_hotspots", "meta", "run"):
        assert got[key] == wrote[key], key
    # All of it but where it came from (the traces, assembled here, with a note saying so).
    assert {k: v for k, v in got.items() if k != "source"} == {k: v for k, v in wrote.items() if k != "source"}
