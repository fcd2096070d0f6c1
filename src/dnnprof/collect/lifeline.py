"""Children that die with dnnprof.

A script run under ``dnnprof run`` and a sweep's trial must not outlive a dnnprof that was killed (``kill -9``, the
OOM killer, a lost SSH session): on a GPU an orphaned trial keeps holding memory while the next sweep runs.

* :func:`die_with_parent` is a ``preexec_fn`` that asks Linux to SIGKILL the child when the process that started
  it dies (``prctl(PR_SET_PDEATHSIG)``; it survives ``exec``). It only reaches the direct child; a trial's own
  children (``ncu``'s target, DataLoader workers) are in the trial's process group, which the next point ends.
* :func:`record_group` writes ``trial.pid`` (the group's id and the leader's start time) while a trial runs;
  :func:`end_stale_groups` reads those a killed sweep left and kills each group still running, before a resumed
  sweep starts its first trial. The start time guards against a pid the system has since given to another program.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

PID_FILE = "trial.pid"
_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies; if ``parent`` (the pid expected as the
    parent) is already gone, die now. False where the system has no such call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:  # the parent died before the call: nobody would signal
        os.kill(os.getpid(), sig)
    return True


def die_with_parent(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that sets the parent-death signal (SIGKILL), then runs ``then`` (another preexec)."""
    parent = os.getpid()

    def preexec() -> None:
        set_parent_death_signal(signal.SIGKILL, parent)
        if then is not None:
            then()

    return preexec


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def record_group(folder: Path, pgid: int) -> Path:
    """Write ``folder/trial.pid`` for the process group ``pgid`` (its leader has the same pid)."""
    path = folder / PID_FILE
    path.write_text(f"{pgid} {_start_time(pgid) or '-'}\n")
    return path


def forget_group(folder: Path) -> None:
    """Remove ``folder/trial.pid`` once the trial has ended."""
    with contextlib.suppress(OSError):
        (folder / PID_FILE).unlink()


def end_stale_groups(root: Path) -> list[int]:
    """Kill (SIGKILL) the process groups recorded in ``root/*/trial.pid`` that still run, and remove the files.

    A group is killed when its leader still runs with the recorded start time, or when the leader is gone (its
    pid cannot name a new group while members of the old one live, so the group's members are the trial's). A
    leader pid that now belongs to another program is left alone. Returns the groups signalled."""
    ended: list[int] = []
    if not root.is_dir() or not Path("/proc/self/stat").exists():  # no start times to tell a reused pid by
        return ended
    for path in sorted(root.glob(f"*/{PID_FILE}")):
        try:
            pgid_s, _, started = path.read_text().strip().partition(" ")
            pgid = int(pgid_s)
        except (OSError, ValueError):
            pgid = 0
        now = _start_time(pgid) if pgid > 1 else None
        if pgid > 1 and pgid != os.getpgrp() and (now is None or now == started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                ended.append(pgid)
        with contextlib.suppress(OSError):
            path.unlink()
    return ended
