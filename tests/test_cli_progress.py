"""The progress bar of a trace being read: on a terminal only, never with --quiet, never on a pipe."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from conftest import DEEPSPEECH
from dnnprof.cli.progress import reading_progress
from dnnprof.ingest.kineto import read_kineto

ROOT = Path(__file__).resolve().parents[1]


def _read(**kw: object) -> str:
    out = io.StringIO()
    with reading_progress(stream=out, delay_s=0, **kw):  # type: ignore[arg-type]
        read_kineto(DEEPSPEECH)
    return out.getvalue()


def test_a_terminal_gets_bytes_events_and_rate() -> None:
    text = _read(terminal=True)
    assert "reading trace.json.gz" in text
    assert "events" in text and "MB" in text


def test_quiet_or_not_a_terminal_gets_nothing() -> None:
    assert _read(terminal=True, quiet=True) == ""
    assert _read() == ""  # a StringIO is not a terminal


def test_nothing_before_the_delay() -> None:
    out = io.StringIO()
    with reading_progress(stream=out, terminal=True, delay_s=1.0, clock=lambda: 0.0):
        read_kineto(DEEPSPEECH)
    assert out.getvalue() == ""


def test_a_real_pty_gets_the_bar_and_a_pipe_does_not() -> None:
    code = ("import sys; from pathlib import Path; from dnnprof.cli.progress import reading_progress; "
            "from dnnprof.ingest.kineto import read_kineto\n"
            f"with reading_progress(delay_s=0):\n    read_kineto(Path({str(DEEPSPEECH)!r}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TERM": "xterm"}
    leader, follower = pty.openpty()
    proc = subprocess.run([sys.executable, "-c", code], stderr=follower, stdout=subprocess.DEVNULL, env=env,
                          timeout=120)
    os.close(follower)
    seen = b""
    while True:
        try:
            data = os.read(leader, 1 << 16)
        except OSError:  # the follower side is closed and drained
            break
        if not data:
            break
        seen += data
    os.close(leader)
    assert proc.returncode == 0
    assert b"events" in seen
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    assert piped.returncode == 0 and piped.stderr == b""
