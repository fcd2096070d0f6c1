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
