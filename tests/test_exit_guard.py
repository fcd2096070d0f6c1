"""Stopping the profiler at interpreter exit always ends (collect/exit_guard.py): a stop blocked in a wait that a
signal ends is nudged free; one that never returns ends the process after the limit, with what was known written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": SRC, "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=60)


def test_a_stop_waiting_for_a_signal_is_nudged_free(tmp_path: Path) -> None:
    # signal.pause() stands for the stop seen on the GPU: asleep until any signal arrives.
    r = _run("""
import signal
from dnnprof.collect.exit_guard import ExitGuard
with ExitGuard(lambda: print("timed out"), limit_s=20, first_poke_s=0.3, poke_s=0.3) as g:
    signal.pause()
print("stopped after", g.pokes, "nudge(s);", signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL)
""", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "stopped after 1 nudge(s); True"


def test_a_stop_that_never_returns_ends_the_process_after_the_limit(tmp_path: Path) -> None:
    r = _run("""
import threading
from dnnprof.collect.exit_guard import ExitGuard
def timed_out():
    open("results.json", "w").write('{"status": "exit_flush_timeout"}')
with ExitGuard(timed_out, limit_s=1.0, first_poke_s=0.2, poke_s=0.2):
    threading.Event().wait()  # a wait no signal ends
print("never here")
""", tmp_path)
    assert r.returncode == 70 and "never here" not in r.stdout
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "exit_flush_timeout"


def test_the_programs_own_sigusr2_handler_is_left_alone(tmp_path: Path) -> None:
    r = _run("""
import signal
mine = lambda s, f: None
signal.signal(signal.SIGUSR2, mine)
from dnnprof.collect.exit_guard import ExitGuard
with ExitGuard(lambda: None, limit_s=5, first_poke_s=0.1, poke_s=0.1) as g:
    pass
print(g.pokes, signal.getsignal(signal.SIGUSR2) is mine)
""", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0 True"


def test_the_controller_says_why_when_the_stop_timed_out(tmp_path: Path) -> None:
    r = _run("""
import json, threading, types
from dnnprof.collect.controller import Controller
written = []
class Stuck:
    kind, running = "timing", True
    def stop(self): threading.Event().wait()
me = types.SimpleNamespace(notes=[], status="partial", write_results=lambda: written.append(1))
import dnnprof.collect.exit_guard as eg
eg.LIMIT_S, eg.FIRST_POKE_S, eg.POKE_S = 1.0, 0.2, 0.2
orig = eg.ExitGuard.__init__
def init(self, on_timeout, **kw):
    orig(self, lambda: (on_timeout(), open("out.json", "w").write(json.dumps([me.status, me.notes, len(written)]))), **kw)
eg.ExitGuard.__init__ = init
Controller._stop_at_exit(me, Stuck())
""", tmp_path)
    assert r.returncode == 70, r.stderr
    status, notes, writes = json.loads((tmp_path / "out.json").read_text())
    assert status == "exit_flush_timeout" and writes == 1
    assert "did not finish in time" in notes[0] and "exit status is lost" in notes[0]


def test_the_watchdog_ends_a_process_that_does_not_end_and_notes_its_status(tmp_path: Path) -> None:
    """What the H100 showed: the profile written at exit, then every thread asleep for good."""
    import time

    r = _run("""
import threading
from dnnprof.collect.exit_guard import arm_exit_watchdog
print(arm_exit_watchdog("exit_stall.json", 3, limit_s=1.0), flush=True)
threading.Event().wait()
""", tmp_path)
    assert r.stdout.strip() == "True" and r.returncode == -15, (r.returncode, r.stderr)
    note = json.loads((tmp_path / "exit_stall.json").read_text())
    assert note == {"limit_s": 1.0, "script_exit_code": 3, "signal": "SIGTERM"}
    t0 = time.monotonic()
    r = _run("""
from dnnprof.collect.exit_guard import arm_exit_watchdog
arm_exit_watchdog("quick.json", 0, limit_s=5.0)
""", tmp_path)  # a process that ends by itself is left alone, and nothing waits for the watchdog
    assert r.returncode == 0 and time.monotonic() - t0 < 4.0
    time.sleep(0.6)
    assert not (tmp_path / "quick.json").exists()


def test_the_exit_status_a_script_ends_with() -> None:
    from dnnprof.collect.exit_guard import exit_status

    assert [exit_status(c) for c in (None, 0, 3, 256 + 7, True, "bye")] == [0, 0, 3, 7, 1, 1]


def test_dnnprof_run_ends_a_script_that_stalls_after_its_profile_is_written(tmp_path: Path) -> None:
    """A script ending inside the profiled window whose process then never ends after its exit handlers (an object
    whose finaliser blocks in a read, at interpreter teardown, standing for the CUDA profiler's teardown): the run
    completes, names the stall, and passes on the status the script ended with."""
    import os
    import time

    script = tmp_path / "train.py"
    script.write_text("""
import os, sys
class Stall:  # its finaliser runs at interpreter teardown, after every exit handler, and never returns
    def __init__(self):
        self.r, self.w = os.pipe()
    def __del__(self):
        os.read(self.r, 1)
stall = Stall()
import torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):  # ends inside the window of 2 + 5 steps
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
sys.exit(3)
""")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": SRC, "DNNPROF_EXIT_STALL_LIMIT_S": "2"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "dnnprof", "run", "--warmup-steps", "2", "--steps", "5", "--no-nvml",
                        "--out", str(out), "--", sys.executable, str(script)], env=env, capture_output=True,
                       text=True, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    assert "stopped making progress for 2 s after its exit handlers" in r.stderr, r.stderr
    assert "ending with status 3; dnnprof exits with 3" in r.stderr, r.stderr
    assert "interrupted" not in r.stderr, r.stderr
    run = out if out.exists() else out.with_name("run.incomplete")  # it ended inside the window: partial
    assert '"exit_stalls": [{"rank": null, "limit_s": 2.0, "signal": "SIGTERM", "script_exit_code": 3}]' in \
        json.dumps(json.loads((run / "meta.json").read_text()))
    assert took < 60


def test_the_watchdog_waits_while_the_process_works_or_has_children(tmp_path: Path) -> None:
    """Exit work that makes progress (CPU time, a child process still running) is not a stall: only the hard
    limit would end it."""
    r = _run("""
import subprocess, sys, time
from dnnprof.collect.exit_guard import arm_exit_watchdog
arm_exit_watchdog("busy.json", None, limit_s=0.5)
t = time.monotonic()
while time.monotonic() - t < 1.5:  # computing, past the limit
    pass
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
time.sleep(1.7)  # idle itself, but its child runs
child.wait()
print("ended by itself")
""", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ended by itself", (r.returncode, r.stderr)
    assert not (tmp_path / "busy.json").exists()


def test_a_status_not_seen_is_unknown_not_zero(tmp_path: Path) -> None:
    r = _run("""
import threading
from dnnprof.collect.exit_guard import arm_exit_watchdog
arm_exit_watchdog("unknown.json", None, limit_s=0.5)
threading.Event().wait()
""", tmp_path)
    assert r.returncode == -15
    assert json.loads((tmp_path / "unknown.json").read_text())["script_exit_code"] is None
