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
#: Seconds a process may take to end once its profile is written at exit, before the watchdog ends it.
STALL_LIMIT_S = 30.0
ENV_STALL_LIMIT = "DNNPROF_EXIT_STALL_LIMIT_S"
#: Written beside the collector's results by the watchdog when it had to end the process.
STALL_FILE = "exit_stall.json"

#: The watchdog, run by ``python -S`` (no site, so no dnnprof bootstrap and no import of the project): poll the
#: process; past the limit write the stall file, send SIGTERM, and SIGKILL 5 s later if it is still there.
_WATCHDOG = """
import json, os, signal, sys, time
pid, limit, path, code = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def alive():
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
t0 = time.monotonic()
while time.monotonic() - t0 < limit:
    if not alive():
        sys.exit(0)
    time.sleep(0.2)
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump({"limit_s": limit, "script_exit_code": code, "signal": "SIGTERM"}, f)
os.replace(tmp, path)
os.kill(pid, signal.SIGTERM)
for _ in range(25):
    time.sleep(0.2)
    if not alive():
        sys.exit(0)
with open(tmp, "w") as f:
    json.dump({"limit_s": limit, "script_exit_code": code, "signal": "SIGKILL"}, f)
os.replace(tmp, path)
os.kill(pid, signal.SIGKILL)
"""


def arm_exit_watchdog(stall_file: os.PathLike[str] | str, exit_code: int, limit_s: float | None = None) -> bool:
    """End this process if it has not ended ``limit_s`` after this call (default :data:`STALL_LIMIT_S`, or
    ``$DNNPROF_EXIT_STALL_LIMIT_S``), noting ``exit_code`` — the status the script was ending with — in
    ``stall_file`` for ``dnnprof run`` to pass on.

    Measured on an H100 (PyTorch 2.11): a script that ends while a profiling window is open gets its profile
    written by the exit handler, then never ends — every thread in a futex wait in the CUDA profiler's teardown,
    after the interpreter's own. No thread of this interpreter runs by then, so the watchdog is a separate process
    (its own session, so a terminal's Ctrl-C or the end of a job step does not take it first). False when it could
    not be started (the process then ends as it would have)."""
    import subprocess
    import sys

    env = os.environ.get(ENV_STALL_LIMIT)
    limit = float(env) if limit_s is None and env else (STALL_LIMIT_S if limit_s is None else limit_s)
    try:
        subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, str(os.getpid()), str(limit), os.fspath(stall_file),
                          str(int(exit_code))], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
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
