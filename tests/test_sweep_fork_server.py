"""The probe fork server: trials are processes of their own (exit status, stdio, environment, timeouts, kills), the
server survives them, and a server that cannot start leaves the sweep to fresh interpreters."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from dnnprof.runs.sweep import SweepSpec, parse_batch_sizes, workload_target
from dnnprof.runs.sweep.runner import run_sweep
from dnnprof.runs.sweep.zygote import PROBE_MODULE, ForkServer

DATA = Path(__file__).parent / "data" / "sweep"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ForkServer:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path_factory.mktemp("fs") / "fork_server.log"
    fs = ForkServer(None, "cpu", env, log, modules=(PROBE_MODULE, "fake_probe"))
    assert fs.start(), fs.note
    yield fs
    fs.close()


def fake(what: str) -> list[str]:
    return [sys.executable, "-m", "fake_probe", what]


@pytest.mark.parametrize(("what", "code"), [("ok", 0), ("fail", 3), ("raise", 1), ("abort", -signal.SIGABRT)])
def test_exit_status_and_stdio_are_the_trials(server: ForkServer, tmp_path: Path, what: str, code: int) -> None:
    fin = server.run(fake(what), folder=tmp_path, env=dict(os.environ, FAKE_PROBE_VALUE="42"), timeout_s=60)
    assert fin.returncode == code and not fin.timed_out and not fin.start_error
    out = (tmp_path / "stdout.txt").read_text()
    assert out.startswith(f"fake probe {what} pid ") and out.rstrip().endswith("env 42")
    assert int(out.split("pid ")[1].split()[0]) != server.proc.pid  # a process of its own
    assert "to stderr" in fin.stderr_tail
    if what == "raise":
        assert "ValueError: broken trial" in fin.stderr_tail


def test_a_hanging_trial_is_killed_and_the_server_goes_on(server: ForkServer, tmp_path: Path) -> None:
    fin = server.run(fake("hang"), folder=tmp_path / "a", env=dict(os.environ), timeout_s=1.5)
    assert fin.timed_out and fin.returncode == -signal.SIGTERM
    fin = server.run(fake("ok"), folder=tmp_path / "b", env=dict(os.environ), timeout_s=60)
    assert fin.returncode == 0 and not server.note


def test_other_commands_run_as_usual(server: ForkServer, tmp_path: Path) -> None:
    fin = server.run([sys.executable, "-c", "print('plain')"], folder=tmp_path, env=dict(os.environ), timeout_s=60)
    assert fin.returncode == 0 and (tmp_path / "stdout.txt").read_text().strip() == "plain"


def test_a_server_that_cannot_preload_is_not_used(tmp_path: Path) -> None:
    fs = ForkServer("no-such-workload", "cpu", dict(os.environ), tmp_path / "log")
    assert not fs.start()
    assert "fork server not used (preloading failed" in fs.note and "no-such-workload" in fs.note
    fin = fs.run([sys.executable, "-c", "print('fallback')"], folder=tmp_path / "t", env=dict(os.environ),
                 timeout_s=60)
    assert fin.returncode == 0


def test_a_cpu_sweep_forks_its_probes(tmp_path: Path) -> None:
    spec = SweepSpec(target=workload_target("deepspeech2-tiny"), out=tmp_path / "sw", device="cpu",
                     batches=parse_batch_sizes("1,2"), modes=("infer",), steps=2, warmup_steps=1, profile_points=())
    doc = run_sweep(spec)
    assert [p["status"] for p in doc["points"]] == ["ok", "ok"]
    assert any("forked from a server" in m for m in doc["messages"]), doc["messages"]
    assert all(p["peak_rss_bytes"] and p["phase_s"]["import"] < 0.5 for p in doc["points"])
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text())["status"] == "complete"


def test_the_fork_server_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DNNPROF_SWEEP_FORK_SERVER", "0")
    spec = SweepSpec(target=workload_target("deepspeech2-tiny"), out=tmp_path / "sw", device="cpu",
                     batches=parse_batch_sizes("1"), modes=("infer",), steps=1, warmup_steps=1, profile_points=())
    doc = run_sweep(spec)
    assert doc["points"][0]["status"] == "ok"
    assert not any("forked" in m for m in doc["messages"])
