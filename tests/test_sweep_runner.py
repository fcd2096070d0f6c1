"""The sweep runner on a stand-in script: real out-of-memory, errors, hangs, Ctrl-C and resume (no torch, fast)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.runs.sweep import (
    SweepSpec,
    parse_batch_sizes,
    parse_size,
    run_sweep,
    script_target,
    trial_bound,
)

FAKE = Path(__file__).parent / "data" / "sweep" / "fake_train.py"
SCHEMA = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "sweep-1.schema.json"


def fake_spec(out: Path, batches: str = "auto", **kw) -> SweepSpec:
    return SweepSpec(target=script_target([sys.executable, str(FAKE), "{batch_size}"]), out=out, device="cpu",
                     batches=parse_batch_sizes(batches), profile_points=(), **kw)


def points(doc: dict) -> dict[int, dict]:
    return {p["batch_size"]: p for p in doc["points"] if p["kind"] == "probe"}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in ("FAIL_AT", "HANG_AT", "MARK", "LOG", "MIB_PER_SAMPLE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LOG", str(tmp_path / "runs.log"))
    return tmp_path


def test_auto_finds_the_largest_batch_under_a_real_address_space_limit(env: Path) -> None:
    doc = run_sweep(fake_spec(env / "sw", memory_limit=parse_size("160MiB")))
    import jsonschema

    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    (m,) = doc["max_batch_size"]
    best = m["batch_size"]
    pts = points(doc)
    assert 40 < best < 160, pts.keys()
    assert m["exact"] and m["limited_by"] == "host_memory"
    assert pts[best]["status"] == "ok" and pts[best + 1]["status"] == "oom"
    assert "MemoryError" in pts[best + 1]["message"]
    assert m["trials"] == len(pts) <= trial_bound(best)
    # Every ok trial really stayed under the limit, and the failing one was refused by it.
    assert all(p["peak_address_space_bytes"] <= 160 * 2**20 for p in pts.values() if p["status"] == "ok")
    assert doc["status"] == "complete" and json.loads((env / "sw" / "sweep.json").read_text()) == doc


def test_errors_and_hangs_become_points_and_the_sweep_goes_on(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_AT", "2")
    monkeypatch.setenv("HANG_AT", "4")
    monkeypatch.setenv("MARK", str(env / "hang.pid"))
    t0 = time.monotonic()
    doc = run_sweep(fake_spec(env / "sw", "1..16", timeout_s=1.5))
    pts = points(doc)
    assert {b: p["status"] for b, p in pts.items()} == {1: "ok", 2: "error", 4: "timeout", 8: "ok", 16: "ok"}
    assert "planted failure at batch 2" in pts[2]["message"] and pts[2]["limited_by"] == "error"
    assert pts[4]["limited_by"] == "timeout" and "1.5 s" in pts[4]["message"]
    assert not alive(int((env / "hang.pid").read_text()))
    assert time.monotonic() - t0 < 30
    (m,) = doc["max_batch_size"]
    assert m["batch_size"] == 16 and m["limited_by"] == "largest_tried"


def test_in_auto_a_failure_bounds_the_search_like_out_of_memory(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_AT", "8")
    doc = run_sweep(fake_spec(env / "sw", max_batch_size=64))
    (m,) = doc["max_batch_size"]
    assert m["batch_size"] == 7 and m["limited_by"] == "error" and m["exact"]


def test_list_skips_sizes_above_one_that_ran_out_of_memory(env: Path) -> None:
    doc = run_sweep(fake_spec(env / "sw", "8,32,512,1024", memory_limit=parse_size("200MiB")))
    pts = points(doc)
    assert [pts[b]["status"] for b in (8, 32, 512, 1024)] == ["ok", "ok", "oom", "skipped"]
    assert "512 already ran out of memory" in pts[1024]["message"]
    assert (env / "runs.log").read_text().split() == ["8", "32", "512"]


def test_precisions_a_cpu_cannot_run_are_skipped_with_the_reason(env: Path) -> None:
    doc = run_sweep(fake_spec(env / "sw", "1", precisions=("fp16", "fp32")))
    by = {(p["precision"]): p for p in doc["points"]}
    assert by["fp16"]["status"] == "skipped" and "not run on CPU" in by["fp16"]["message"]
    assert by["fp32"]["status"] == "ok"
    assert {m["precision"]: m["limited_by"] for m in doc["max_batch_size"]} == {"fp16": "unsupported",
                                                                                 "fp32": "largest_tried"}


def test_the_largest_batch_line_reads_without_internal_values(env: Path) -> None:
    from dnnprof.cli.sweep import max_batch_line

    doc = run_sweep(fake_spec(env / "sw", "1,2", precisions=("fp16", "fp32")))
    lines = [max_batch_line(m) for m in doc["max_batch_size"]]
    assert lines[1] == "train fp32: every batch tried fits, up to 2", lines
    assert lines[0].startswith("train fp16: skipped (")
    cut = {"mode": "train", "precision": "bf16", "batch_size": 32, "limited_by": "gpu_memory", "exact": False}
    assert max_batch_line({**cut, "bracket": [32, 64]}).endswith("limited by gpu_memory (not pinned: between 32 and 64)")
    assert max_batch_line({**cut, "bracket": [32, None], "limited_by": None}) == \
        "train bf16: largest batch that fits 32, limited by nothing seen (not pinned: no larger batch was tried)"
    assert not [x for x in lines if "None" in x or "largest_tried" in x]


def sweep_cli(out: Path, *extra: str, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "dnnprof", "sweep", "--device", "cpu", "--batch-sizes", "1..16", "--timeout", "60",
           "--profile-points", "none", "--no-report", "--out", str(out), *extra, "--", sys.executable, str(FAKE),
           "{batch_size}"]
    # An earlier test in this process may have left SIGINT ignored, and children inherit that: restore it.
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_keeps_finished_points_and_a_rerun_resumes(env: Path) -> None:
    out = env / "sw"
    base = {k: v for k, v in os.environ.items() if k not in ("FAIL_AT", "HANG_AT", "MARK")}
    proc = sweep_cli(out, env={**base, "HANG_AT": "8", "MARK": str(env / "hang.pid")})
    try:
        deadline = time.monotonic() + 60
        while not (env / "hang.pid").exists() or not (env / "hang.pid").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    except BaseException:  # never leave the sweep or its hanging trial behind when this test fails
        if proc.poll() is None:
            proc.kill()
        if (env / "hang.pid").exists() and (env / "hang.pid").read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int((env / "hang.pid").read_text()), signal.SIGKILL)
        raise
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err
    assert not alive(int((env / "hang.pid").read_text())), "the running trial must die with the sweep"
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["status"] == "interrupted"
    assert sorted(points(doc)) == [1, 2, 4] and all(p["status"] == "ok" for p in doc["points"])
    logged = [json.loads(line)["batch_size"] for line in (out / "trials.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 4]

    (env / "runs.log").write_text("")
    proc = sweep_cli(out, env=base)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "resuming: 3 trials already done" in err
    assert (env / "runs.log").read_text().split() == ["8", "16"], "finished points must not run again"
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["status"] == "complete"
    assert {b: p["status"] for b, p in points(doc).items()} == {1: "ok", 2: "ok", 4: "ok", 8: "ok", 16: "ok"}


def test_a_directory_of_another_sweep_is_refused(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = env / "sw"
    run_sweep(fake_spec(out, "1"))
    rc = main(["sweep", "--device", "cpu", "--batch-sizes", "1", "--memory-limit", "1GiB", "--out", str(out),
               "--profile-points", "none", "--no-report", "--", sys.executable, str(FAKE), "{batch_size}"])
    assert rc == 2
    assert "holds a sweep with other memory_limit" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["no-such-model"], "unknown workload 'no-such-model'; valid workloads: deepspeech2"),
    (["deepspeech2-tiny", "--batch-sizes", "lots"], "--batch-sizes 'lots': expected auto"),
    (["deepspeech2-tiny", "--memory-limit", "huge"], "--memory-limit 'huge'"),
    (["deepspeech2-tiny", "--precisions", "fp8"], "--precisions: unknown value 'fp8'"),
    (["deepspeech2-tiny", "--modes", "eval"], "--modes: unknown value 'eval'"),
    (["deepspeech2-tiny", "--device", "tpu"], "--device: unknown 'tpu'"),
    (["deepspeech2-tiny", "--steps", "0"], "--steps must be >= 1"),
    ([], "give a workload"),
])
def test_bad_options_say_what_is_wrong(args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    assert main(["sweep", "--out", str(tmp_path / "x"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_batch_size_reaches_a_script_by_placeholder_and_environment(env: Path) -> None:
    script = env / "show.py"
    script.write_text("import os, sys\nopen(sys.argv[2], 'a').write(f\"{sys.argv[1]} {os.environ['DNNPROF_BATCH_SIZE']}"
                      " {os.environ['DNNPROF_PRECISION']} {os.environ['DNNPROF_MODE']}\\n\")\n")
    seen = env / "seen.txt"
    spec = SweepSpec(target=script_target([sys.executable, str(script), "{batch_size}", str(seen)]), out=env / "sw",
                     device="cpu", batches=parse_batch_sizes("3,5"), modes=("infer",), profile_points=())
    run_sweep(spec)
    assert seen.read_text().splitlines() == ["3 3 fp32 infer", "5 5 fp32 infer"]


def test_an_inference_script_is_timed_on_its_dataloader_batches(tmp_path: Path) -> None:
    """A script without an optimizer or dnnprof.step(): its DataLoader batches are its steps."""
    pytest.importorskip("torch")
    script = Path(__file__).parent / "data" / "scripts" / "infer_dataloader.py"
    spec = SweepSpec(target=script_target([sys.executable, str(script), "{batch_size}"]), out=tmp_path / "sw",
                     device="cpu", batches=parse_batch_sizes("4"), modes=("infer",), profile_points=())
    (p,) = run_sweep(spec)["points"]
    assert p["status"] == "ok" and not p["message"], p
    assert p["steps_timed"] >= 30 and p["step_time_ms"] > 0 and p["throughput_samples_per_s"] > 0
