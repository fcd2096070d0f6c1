"""``dnnprof run -- python script.py``: unmodified scripts, end to end, in a child process.

CPU tests use plain scripts without any dnnprof markers (tests/data/scripts). GPU tests (``-m gpu``) run a CUDA
script with AMP, DataLoader workers and optionally torch.compile, in default and ``--full`` mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli.main import main

SCRIPTS = Path(__file__).parent / "data" / "scripts"


def dnnprof(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "dnnprof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def load(run: Path, name: str) -> dict[str, Any]:
    return json.loads((run / name).read_text())


def test_plain_script_steps_found_output_argv_and_exit_code_intact(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script_args = ["--steps", "10", "--batch-size", "8", "--workers", "2", "--exit-code", "3"]
    r = dnnprof("run", "--warmup-steps", "2", "--steps", "2", "--out", str(out), "--",
                sys.executable, str(SCRIPTS / "train_plain.py"), *script_args, cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    # The script's stdout is exactly its own: its argv line, then one line per step, nothing from dnnprof.
    lines = r.stdout.splitlines()
    assert lines[0] == "argv " + " ".join(script_args)
    assert [re.sub(r"loss .*", "", ln) for ln in lines[1:]] == [f"step {i} " for i in range(10)]
    assert "dnnprof:" not in r.stdout
    assert f"run directory (complete): {out}" in r.stderr
    meta = load(out, "meta.json")
    assert meta["complete"] and meta["status"] == "complete" and meta["exit_code"] == 3
    assert meta["capture"]["step_source"] == "optimizer"
    assert meta["script"]["argv"] == [str(SCRIPTS / "train_plain.py"), *script_args]
    assert meta["capture"]["kinds"] == ["cpu"]  # no GPU here: one CPU window, said so
    assert any("CPU-only profile" in m for m in meta["messages"])
    summary = load(out, "summary.json")
    assert summary["steps"]["count"] == 2
    t = summary["throughput"]
    assert t["steps"] == 2 and t["step_time_median_us"] > 0
    # Items per step come from the DataLoader batches the script consumed (batch size 8).
    assert t["items_per_step"] == 8 and t["unit"] == "samples/s" and t["items_per_s"] > 0
    assert summary["overhead"]["baseline"]["count"] >= 1 and summary["overhead"]["dilation"] > 0
    assert {"samples", "memory", "host_hotspots"} <= set(summary)
    assert summary["meta"]["cudnn_benchmark"] is False and isinstance(summary["findings"], list)
    jsonschema = pytest.importorskip("jsonschema")
    from dnnprof import render as render_pkg

    schema = Path(render_pkg.__file__).parent / "schemas" / "summary-1.schema.json"
    jsonschema.validate(summary, json.loads(schema.read_text()))  # the run's extras keep the public contract
    from dnnprof.model.profile import Profile

    profile = Profile.load(out / "profile")
    assert profile.self_check() == []
    names = set(profile.names(profile.tables["ops"]["name_id"]).tolist())
    assert {"dnnprof.module:MLP|MLP", "dnnprof.module:encoder.0|Linear", "ProfilerStep#2", "ProfilerStep#3"} <= names
    assert (out / "trace" / "cpu.json.gz").is_file()
    assert not list(tmp_path.glob(".*.partial"))


def test_raising_script_keeps_the_partial_profile_and_its_exit_code(tmp_path: Path) -> None:
    r = dnnprof("run", "--warmup-steps", "2", "--steps", "4", "--", sys.executable, str(SCRIPTS / "train_plain.py"),
                "--steps", "10", "--fail-at", "5", cwd=tmp_path)
    assert r.returncode == 1
    assert "RuntimeError: deliberate failure at step 5" in r.stderr  # the script's own traceback, intact
    assert "the script exited with code 1 (RuntimeError: deliberate failure at step 5)" in r.stderr
    (run,) = (tmp_path / "dnnprof-runs").iterdir()
    assert run.name.startswith("train_plain-") and run.name.endswith(".incomplete")
    assert "profile is partial" in (run / "INCOMPLETE").read_text()
    meta = load(run, "meta.json")
    assert meta["status"] == "partial" and not meta["complete"]
    assert meta["script"]["exception"]["type"] == "RuntimeError"
    assert (run / "profile").is_dir()  # partial profile kept
    assert load(run, "summary.json")["run"]["complete"] is False


def test_script_without_optimizer_is_profiled_whole_with_advice(tmp_path: Path) -> None:
    r = dnnprof("run", "--", sys.executable, str(SCRIPTS / "infer_plain.py"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [ln.split(" mean")[0] for ln in r.stdout.splitlines()] == [f"batch {i}" for i in range(5)]
    assert "no iterations found" in r.stderr and "--step-marker NAME" in r.stderr and "dnnprof.step()" in r.stderr
    (run,) = (tmp_path / "dnnprof-runs").iterdir()
    meta = load(run, "meta.json")
    assert meta["status"] == "no_steps" and meta["capture"]["kinds"] == ["whole_run"]
    assert load(run, "summary.json")["steps"]["source"] == "whole_trace"
    # The whole-run window records module ranges too, started inside the model's first call: its children keep
    # their names under it (not each taken for a root of its own).
    from dnnprof.analysis.attribution import attribute
    from dnnprof.ingest.detect import open_profile

    layers = set(attribute(open_profile(run), "ops").layer.tolist())
    assert {"0 (Linear)", "1 (ReLU)", "2 (Linear)"} <= layers, layers


def test_inference_over_a_dataloader_steps_on_its_batches(tmp_path: Path) -> None:
    r = dnnprof("run", "--warmup-steps", "3", "--steps", "8", "--", sys.executable,
                str(SCRIPTS / "infer_dataloader.py"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [ln.split(" mean")[0] for ln in r.stdout.splitlines()] == [f"batch {i}" for i in (0, 10, 20, 30)]
    assert "no iterations found" not in r.stderr
    (run,) = (tmp_path / "dnnprof-runs").iterdir()
    meta = load(run, "meta.json")
    assert meta["status"] == "complete", meta
    steps = load(run, "summary.json")["steps"]
    assert steps["source"] == "dataloader" and steps["count"] == 8
    assert load(run, "summary.json")["throughput"]["items_per_step"] == 8


def test_ctrl_c_flushes_what_was_collected_and_marks_the_run_incomplete(tmp_path: Path) -> None:
    import signal

    cmd = [sys.executable, "-m", "dnnprof", "run", "--warmup-steps", "2", "--steps", "500", "--", sys.executable,
           str(SCRIPTS / "train_plain.py"), "--steps", "1000", "--sleep", "0.02"]
    # A new process group stands in for the terminal: Ctrl-C reaches dnnprof and the script alike. SIGINT is
    # reset to its default first: a test runner started in the background inherits it ignored, and so would
    # the script (Python keeps an inherited "ignore").
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    for line in proc.stdout:  # the script's own output says when the profiled window is running (steps 3..)
        if line.startswith("step 8 "):
            break
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err
    (run,) = (tmp_path / "dnnprof-runs").iterdir()
    assert run.name.endswith(".incomplete")
    meta = load(run, "meta.json")
    assert meta["interrupted"] and meta["status"] == "partial" and not meta["complete"]
    assert (run / "profile").is_dir() and load(run, "summary.json")["steps"]["count"] >= 1
    assert "interrupted" in (run / "INCOMPLETE").read_text()


@pytest.mark.parametrize("args, message", [
    (["run"], "no command: dnnprof run [OPTIONS] -- python train.py"),
    (["run", "--warmup-steps", "1", "--", "python", "x.py"], "--warmup-steps must be at least 2"),
    (["run", "--nvml-period-ms", "2", "--", "python", "x.py"], "NVML period 0.002 s is outside"),
    (["run", "--", "/nonexistent/program"], "/nonexistent/program: cannot run"),
])
def test_bad_invocations_fail_with_one_line(args: list[str], message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dnnprof: error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "dnnprof-runs").exists() or not any((tmp_path / "dnnprof-runs").iterdir())


def test_out_dir_that_is_not_empty_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    assert main(["run", "--out", str(tmp_path / "taken"), "--", "python", "x.py"]) == 2
    assert "taken: already exists and is not an empty directory" in capsys.readouterr().err


# --- GPU ---------------------------------------------------------------------------------------------------
def _gpu_run(tmp_path: Path, *args: str, script_args: tuple[str, ...] = ()) -> tuple[Path, dict, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "run"
    r = dnnprof("run", "--warmup-steps", "5", "--steps", "10", "--out", str(out), *args, "--", sys.executable,
                str(SCRIPTS / "train_cuda.py"), "--steps", "40", *script_args, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "done"
    return out, load(out, "meta.json"), load(out, "summary.json")


@pytest.mark.gpu
@pytest.mark.parametrize("script_args", [(), ("--amp", "fp16"), ("--workers", "0", "--amp", "off")])
def test_gpu_default_mode_joins_attribution_onto_timing(tmp_path: Path, script_args: tuple[str, ...]) -> None:
    out, meta, summary = _gpu_run(tmp_path, script_args=script_args)
    cap = meta["capture"]
    assert meta["complete"] and cap["kinds"] == ["attribution", "timing"]
    assert (out / "trace" / "timing.json.gz").is_file() and (out / "trace" / "attribution.json.gz").is_file()
    assert cap["clock"]["found"] and abs(cap["clock"]["offset_ns"]) < 1_000_000
    assert cap["attribution"]["matched_kernels_pct"] >= 90
    assert summary["gpu"]["has_activity"] and summary["gpu"]["busy_pct"] > 0
    assert summary["layers"], "module ranges should give layers"
    assert summary["memory"]["peak_allocated_bytes"] > 0 and summary["memory"]["breakdown"]["weights_bytes"] > 0
    nvml = meta["nvml"]
    assert nvml["nvml"] == "ok" and summary["samples"]["metrics"]["gpu_util_pct"]["n"] > 0
    if meta["environment"]["gpu"]["compute_capability"] >= "9.0":
        assert "sm_active_pct" in summary["samples"]["metrics"], nvml
    # A gross-regression guard, not the overhead target (benchmarks/gpu/overhead_gpt2.py measures that): this toy
    # script's steps are a few milliseconds of host-bound launches, so they dilate by the whole per-launch cost of
    # the capture: 1.58 with --workers 0 --amp off on a noisy H100 host (2026-11-26).
    assert cap["overhead"]["dilation"] < 2.0


@pytest.mark.gpu
def test_gpu_full_mode_and_compile(tmp_path: Path) -> None:
    _, meta, summary = _gpu_run(tmp_path, "--full")
    # --full times its steps under the default mode's timing window, then records shapes, stacks, memory and
    # modules in a short window after them, joined onto the timed kernels by launch order.
    cap = meta["capture"]
    assert meta["complete"] and cap["kinds"] == ["full", "timing"]
    assert cap["attribution"]["window"] == "full" and cap["attribution"]["matched_kernels_pct"] >= 90
    assert summary["steps"]["count"] + len(cap["edge_steps_dropped"]) == 10  # a step the capture cut is not counted
    _, meta, summary = _gpu_run(tmp_path / "compiled", script_args=("--compile",))
    assert meta["complete"]
    windows = {w["kind"]: w for w in meta["capture"]["windows"]}
    assert "torch.compile" in windows["attribution"]["module_ranges_note"]


@pytest.mark.gpu
def test_gpu_lightning_script(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    out = tmp_path / "run"
    r = dnnprof("run", "--warmup-steps", "5", "--steps", "10", "--out", str(out), "--", sys.executable,
                str(SCRIPTS / "train_lightning.py"), "40", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "done"
    meta = load(out, "meta.json")
    assert meta["complete"] and meta["capture"]["step_source"] == "optimizer"
    assert meta["capture"]["attribution"]["matched_kernels_pct"] >= 90



def test_a_run_still_warming_up_is_told_to_warm_up_longer() -> None:
    """resnet50 inference on an H100 with 3 warm-up steps: 7.37 ms per step before the windows, 5.28 ms after."""
    from dnnprof.render.run_lines import warmup_hint

    hint = warmup_hint({"baseline_before": {"median_us": 7366.028}, "baseline_after": {"median_us": 5276.678}})
    assert "7.37 ms before" in hint and "5.28 ms after" in hint and "still warming up" in hint
    assert "--warmup-steps" in hint
    assert warmup_hint({"baseline_before": {"median_us": 38.4e3}, "baseline_after": {"median_us": 37.1e3}}) == ""
    assert warmup_hint({"baseline_before": {"median_us": None}, "baseline_after": {"median_us": 5e3}}) == ""
    assert "slowing down" in warmup_hint({"baseline_before": {"median_us": 5e3}, "baseline_after": {"median_us": 9e3}})
