"""Children die with dnnprof: ``kill -9`` of ``dnnprof run`` or ``dnnprof sweep`` must not leave the user's script
or a trial running (under PID 1, holding a GPU), and a resumed sweep ends a trial an earlier run left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dnnprof.collect.lifeline import PID_FILE, end_stale_groups, record_group
from test_sweep_runner import fake_spec, sweep_cli

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")

SLEEPER = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)\n"


def gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by its new parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def wait_file(path: Path, proc: subprocess.Popen[str], within_s: float = 60.0) -> int:
    deadline = time.monotonic() + within_s
    while not path.exists() or not path.read_text():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} not written within {within_s:g} s"
        time.sleep(0.05)
    return int(path.read_text())


def _kill(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_kill_9_of_dnnprof_run_ends_the_script(tmp_path: Path) -> None:
    script, mark = tmp_path / "sleeper.py", tmp_path / "script.pid"
    script.write_text(SLEEPER)
    proc = subprocess.Popen([sys.executable, "-m", "dnnprof", "run", "--out", str(tmp_path / "run"), "--",
                             sys.executable, str(script), str(mark)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = wait_file(mark, proc)
        proc.kill()
        proc.communicate(timeout=30)
        assert wait_gone(pid), "the script must die with dnnprof run"
    finally:
        _kill(proc.pid if proc.poll() is None else None)
        _kill(pid)


def test_kill_9_of_dnnprof_sweep_ends_the_running_trial(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("FAIL_AT", "HANG_AT", "MARK", "LOG")}
    proc = sweep_cli(tmp_path / "sw", env={**base, "HANG_AT": "2", "MARK": str(tmp_path / "hang.pid")})
    pid = None
    try:
        pid = wait_file(tmp_path / "hang.pid", proc)
        proc.kill()
        proc.communicate(timeout=30)
        assert wait_gone(pid), "the trial must die with the sweep"
    finally:
        _kill(proc.pid if proc.poll() is None else None)
        _kill(pid)


# A trial whose leader (like ncu) started a child: the child is in the trial's group, not signalled by the kernel.
LEADER = ("import subprocess, sys, time\n"
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
          "print(c.pid, flush=True)\ntime.sleep(600)\n")


@pytest.mark.parametrize("leader_alive", [True, False], ids=["leader-running", "leader-gone"])
def test_a_resumed_sweep_ends_a_trial_group_left_running(tmp_path: Path, leader_alive: bool) -> None:
    from dnnprof.runs.sweep import run_sweep
    from dnnprof.runs.sweep.store import SweepStore

    out = tmp_path / "sw"
    spec = fake_spec(out, "1").validate()
    SweepStore(spec.out, spec).open()  # a sweep that was then killed with -9 during its first trial
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    try:
        (out / "trials" / "probe-1").mkdir(parents=True, exist_ok=True)
        record_group(out / "trials" / "probe-1", leader.pid)
        if not leader_alive:
            leader.kill()
            leader.wait()
        run_sweep(fake_spec(out, "1"))
        assert wait_gone(child), "the stale trial's process group must be ended before the sweep runs"
        assert wait_gone(leader.pid)
        assert not (out / "trials" / "probe-1" / PID_FILE).exists()
    finally:
        _kill(child)
        _kill(leader.pid if leader.poll() is None else None)
        leader.wait()


def test_a_recorded_pid_now_used_by_another_program_is_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / PID_FILE).write_text(f"{other.pid} 1\n")  # a start time that is not this process's
        assert end_stale_groups(tmp_path) == []
        time.sleep(0.2)
        assert other.poll() is None
        assert not (tmp_path / "t" / PID_FILE).exists()
    finally:
        other.kill()
        other.wait()
