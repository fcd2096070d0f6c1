"""Run one trial command in a process group of its own, with a timeout, and never let it take the sweep down.

The child gets a new session (``start_new_session``): a terminal Ctrl-C reaches the sweep only, and the sweep
kills the whole group (the trial, its DataLoader workers, a profiler's children) when the trial times out or the
sweep is interrupted. When the sweep is killed outright, the trial gets SIGKILL from the kernel and the resumed
sweep ends what is left of its group (see ``dnnprof.collect.lifeline``). stdout and stderr go to files in the trial's folder, never to pipes that could fill up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dnnprof.collect.lifeline import die_with_parent, forget_group, record_group

#: Seconds a killed trial gets between SIGTERM (a profiler flushes) and SIGKILL.
KILL_GRACE_S = 5.0
#: Characters of stderr kept for classification and the message.
TAIL_CHARS = 8000


@dataclass(frozen=True)
class Finished:
    """How a trial process ended.

    Attributes:
        returncode: exit status (negative: the signal that killed it); None if it never started.
        timed_out: the sweep killed it after ``timeout_s``.
        wall_s: wall time from start to end.
        stderr_tail: the last ``TAIL_CHARS`` of its stderr.
        start_error: why it could not start (missing program), else "".
    """

    returncode: int | None
    timed_out: bool
    wall_s: float
    stderr_tail: str
    start_error: str = ""


def run_trial(
    argv: Sequence[str],
    *,
    folder: Path,
    env: Mapping[str, str],
    timeout_s: float,
    preexec: Callable[[], None] | None = None,
    cwd: Path | None = None,
) -> Finished:
    """Run ``argv`` to completion or timeout; stdout/stderr land in ``folder/stdout.txt`` and ``stderr.txt``.

    Raises:
        KeyboardInterrupt: the sweep was interrupted; the trial's process group has been killed first.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out_path, err_path = folder / "stdout.txt", folder / "stderr.txt"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=dict(env),
                                    cwd=cwd, start_new_session=True, preexec_fn=die_with_parent(preexec))
        except OSError as e:
            return Finished(None, False, 0.0, "", start_error=f"{argv[0]}: {e.strerror or e}")
        record_group(folder, proc.pid)  # a sweep killed with -9 leaves it: the resumed sweep ends the group
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:
            kill_group(proc)  # Ctrl-C / SIGTERM of the sweep: the trial must not outlive it
            raise
        finally:
            forget_group(folder)
    return Finished(proc.returncode, timed_out, time.monotonic() - t0, read_tail(err_path))


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after ``KILL_GRACE_S``."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # Stragglers in the group (workers that ignored SIGTERM) die with the group's SIGKILL.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def read_tail(path: Path, chars: int = TAIL_CHARS) -> str:
    """The last ``chars`` characters of a text file ("" when missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars * 4))
            return f.read().decode("utf-8", "replace")[-chars:]
    except OSError:
        return ""
