"""A time limit on stopping the profiler at interpreter exit, so that the profiled process always ends.

Measured on an H100 (PyTorch 2.11, benchmarks/RESULTS.md, issue 20): when a script ends while a profiling window is
still open, stopping the CUDA profiler from the exit handler can sit in a futex wait with every thread asleep; a
signal delivered to the process (SIGTERM, or SIGUSR1 with a C-level handler) let the same stop finish and the
profile come out complete. While a guarded call runs, a daemon thread therefore nudges the main thread with
SIGUSR2 (a handler that does nothing; only when the program has none of its own) every ``poke_s``; if the call is
still not done after ``limit_s``, ``on_timeout`` writes what is known and the process ends with ``exit_code``,
rather than never.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

#: Seconds before the first nudge, between nudges, and before the process is ended.
FIRST_POKE_S, POKE_S, LIMIT_S = 3.0, 2.0, 120.0
ENV_LIMIT = "DNNPROF_EXIT_FLUSH_LIMIT_S"
#: Exit status when the stop never finished: the script's own status is lost by then.
TIMEOUT_EXIT_CODE = 70


class ExitGuard:
    """``with ExitGuard(on_timeout): window.stop()``; see the module docstring."""

    def __init__(self, on_timeout: Callable[[], None], *, limit_s: float | None = None, poke_s: float = POKE_S,
                 first_poke_s: float = FIRST_POKE_S, exit_code: int = TIMEOUT_EXIT_CODE) -> None:
        env = os.environ.get(ENV_LIMIT)
        self.limit_s = float(env) if limit_s is None and env else (LIMIT_S if limit_s is None else limit_s)
        self.poke_s, self.first_poke_s, self.exit_code = poke_s, first_poke_s, exit_code
        self.on_timeout = on_timeout
        self.pokes = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> ExitGuard:
        main = threading.main_thread()
        if threading.current_thread() is main and signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):
            self._previous = signal.signal(signal.SIGUSR2, _nothing)
            self._installed = True
        self._thread = threading.Thread(target=self._watch, args=(main.ident,), name="dnnprof-exit-guard",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._installed:
            signal.signal(signal.SIGUSR2, self._previous if self._previous is not None else signal.SIG_DFL)

    def _watch(self, main_ident: int | None) -> None:
        waited = 0.0
        step = self.first_poke_s
        while not self._done.wait(min(step, max(self.limit_s - waited, 0.0))):
            waited += min(step, max(self.limit_s - waited, 0.0))
            if waited >= self.limit_s:
                try:
                    self.on_timeout()
                finally:
                    os._exit(self.exit_code)
            if self._installed and main_ident is not None:
                self.pokes += 1
                with contextlib.suppress(OSError):  # the thread is gone: nothing to nudge
                    signal.pthread_kill(main_ident, signal.SIGUSR2)
            step = self.poke_s


def _nothing(signum: int, frame: Any) -> None:
    """SIGUSR2 while the profiler stops: only there to interrupt a wait."""


# --- after the exit flush ------------------------------------------------------------------------------------------
#: Seconds a process may go without using CPU time, once every exit handler has run, before the watchdog ends it;
#: and the most it may take in all, working or not.
STALL_LIMIT_S, STALL_HARD_LIMIT_S = 30.0, 600.0
ENV_STALL_LIMIT = "DNNPROF_EXIT_STALL_LIMIT_S"
#: Written beside the collector's results by the watchdog when it had to end the process.
STALL_FILE = "exit_stall.json"

#: The watchdog, run by ``python -S`` (no site, so no dnnprof bootstrap and no import of the project). It polls the
#: process: gone → done. A process that still has child processes (a pool being joined) or whose CPU time grows is
#: working: only the hard limit ends it. Past the limit without progress it writes the stall file, sends SIGTERM,
#: and SIGKILL 5 s later if the process is still there. The process is known by its pid and start time, so a
#: recycled pid is never signalled.
_WATCHDOG = """
import json, os, signal, sys, time
pid, limit, hard, path = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
code = None if sys.argv[5] == "none" else int(sys.argv[5])
me = os.getpid()
def stat():
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[11]) + int(fields[12]), fields[19]
    except (OSError, IndexError, ValueError):
        return None
first = stat()
if first is None:
    sys.exit(0)
born = first[2]
def alive():
    s = stat()
    return s is not None and s[0] != "Z" and s[2] == born
def children():
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [c for c in f.read().split() if int(c) != me]
    except (OSError, ValueError):
        pass
    return out
t0 = last = time.monotonic()
cpu = first[1]
while True:
    time.sleep(0.2)
    s = stat()
    if s is None or s[0] == "Z" or s[2] != born:
        sys.exit(0)
    now = time.monotonic()
    if s[1] > cpu + 1 or children():  # more than one clock tick of CPU time, or children still there: working
        last = now
    cpu = s[1]
    if now - last >= limit or now - t0 >= hard:
        break
def note(sig):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"limit_s": limit, "script_exit_code": code, "signal": sig}, f)
    os.replace(tmp, path)
note("SIGTERM")
os.kill(pid, signal.SIGTERM)
for _ in range(25):
    time.sleep(0.2)
    if not alive():
        sys.exit(0)
note("SIGKILL")
os.kill(pid, signal.SIGKILL)
"""


def arm_exit_watchdog(stall_file: os.PathLike[str] | str, exit_code: int | None, limit_s: float | None = None,
                      hard_limit_s: float = STALL_HARD_LIMIT_S) -> bool:
    """End this process once it has gone ``limit_s`` without using CPU time and without child processes (default
    :data:`STALL_LIMIT_S`, or ``$DNNPROF_EXIT_STALL_LIMIT_S``), or ``hard_limit_s`` after this call in any case,
    noting ``exit_code`` — the status the script was ending with, None when not seen — in ``stall_file`` for
    ``dnnprof run`` to pass on.

    Measured on an H100 (PyTorch 2.11): a script whose profiler ran can, after its profile is written and its exit
    handlers have run, never end — every thread in a futex wait in the CUDA profiler's teardown. No thread of this
    interpreter runs by then, so the watchdog is a separate process (its own session, so a terminal's Ctrl-C or the
    end of a job step does not take it first). Call it from the last exit handler. Under torchrun a rank ended this
    way is a failed worker to the launcher, which then ends the others (or restarts them with ``--max-restarts``):
    it is ended only when it has stopped making progress. False when the watchdog could not be started (the
    process then ends as it would have)."""
    import subprocess
    import sys

    env = os.environ.get(ENV_STALL_LIMIT)
    limit = float(env) if limit_s is None and env else (STALL_LIMIT_S if limit_s is None else limit_s)
    if not sys.executable:
        return False
    try:
        subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, str(os.getpid()), str(limit), str(hard_limit_s),
                          os.fspath(stall_file), "none" if exit_code is None else str(int(exit_code))],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         close_fds=True, start_new_session=True)
    except OSError:
        return False
    return True


def exit_status(code: object) -> int:
    """The process status ``sys.exit(code)`` gives: None → 0, an int → its low byte, anything else → 1."""
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code & 0xFF
    return 1
