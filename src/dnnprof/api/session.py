"""``with dnnprof.profile(...) as prof:`` — the capture of ``dnnprof run``, started from inside the program.

The same collector runs (``collect.controller.Controller``: warm-up, a timed window, an attribution window, NVML
samples, unprofiled baseline steps), in this process instead of under the bootstrap; when the block ends the same
parent-side finish (``runs.finish.finish_run``) turns what it wrote into ``profile/``, ``meta.json`` and
``summary.json``, and the staging folder is renamed into place. The run directory is the one ``dnnprof run`` writes,
so ``dnnprof analyze``, ``diff``, ``query`` and :func:`dnnprof.load` read it the same way.

Under ``dnnprof run`` the script is profiled already: the block then adds nothing of its own and its steps go to
that run.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

#: The session in progress in this process (one at a time: torch.profiler allows one session per process).
_active: ProfileSession | None = None


class ProfileSession:
    """One in-process profiling run. Use it through :func:`dnnprof.profile` (a context manager), or call
    :meth:`start`, :meth:`step` and :meth:`stop` yourself (what the Lightning and Hugging Face adapters do).

    Attributes:
        path: the run directory: where it will be while the run goes on, where it is once :meth:`stop` returned
            (``…-<ts>`` or ``…-<ts>.incomplete``); None when an outer ``dnnprof run`` owns the capture.
        result: the :class:`~dnnprof.runs.result.RunResult` once stopped (status, messages, summary).
    """

    def __init__(self, *, warmup_steps: int = 5, steps: int = 10, full: bool = False, counters: bool = False,
                 out: str | os.PathLike[str] | None = None, name: str | None = None,
                 step_marker: str | None = None, nvml: bool = True, quiet: bool = False,
                 explicit_steps: bool = False) -> None:
        from dnnprof.collect.config import CollectorConfig

        self.config = CollectorConfig(mode="full" if full else "default", warmup_steps=warmup_steps, steps=steps,
                                      step_marker=step_marker, nvml=nvml, counters=counters,
                                      explicit_steps=explicit_steps).validate()
        self.out = Path(out) if out is not None else None
        self.name = name
        self.quiet = quiet
        self.path: Path | None = None
        self.result: Any = None
        self.nested = False
        self._ctl: Any = None
        self._rd: Any = None
        self._started = 0.0
        self._command: list[str] = []

    # --- the user's side ---------------------------------------------------------------------------------------
    def step(self, items: float | None = None) -> None:
        """End of one iteration (``items``: samples or tokens in it, for the throughput figure)."""
        if self._ctl is not None:
            self._ctl.explicit_step(items)
        elif self.nested:
            import dnnprof

            dnnprof.step(items)

    @property
    def done(self) -> bool:
        """True once every planned window has been recorded: a loop may stop here (``if prof.done: break``)."""
        return bool(self._ctl is not None and self._ctl.done)

    def __enter__(self) -> ProfileSession:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(exc)

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> ProfileSession:
        """Create the run directory and start the collector in this process.

        Raises:
            RuntimeError: another ``dnnprof.profile`` is running in this process.
            dnnprof.runs.rundir.RunDirError: the run directory cannot be created (``out`` is a non-empty folder…).
            ValueError: counters were asked for where the program cannot be run again (a notebook).
        """
        global _active
        import torch

        from dnnprof.collect import bootstrap
        from dnnprof.collect.config import CONFIG_FILE, write_json_atomic
        from dnnprof.collect.controller import Controller
        from dnnprof.runs.rundir import RUNS_ROOT, RunDir, name_from_command, safe_name

        if _active is not None:
            raise RuntimeError("dnnprof.profile is already running in this process (one profile at a time)")
        if bootstrap.controller() is not None:  # under `dnnprof run`: that run records this program already
            self.nested = True
            self._say("this program runs under dnnprof run, which profiles it already: steps go to that run")
            return self
        self._command = program_command()
        if self.config.counters and self._command[1:2] == ["-c"]:
            raise ValueError("counters=True runs the program again under Nsight Compute, which needs a script "
                             "(python train.py); run this one with dnnprof run --counters -- python SCRIPT")
        default = name_from_command(self._command) if self._command[1:2] != ["-c"] else safe_name(self._command[2])
        self._rd = RunDir.create(self.name or default, out=self.out, root=RUNS_ROOT)
        staging = self._rd.staging
        (staging / CONFIG_FILE).write_text(self.config.to_json())
        write_json_atomic(staging / "command.json", {"command": self._command, "cwd": os.getcwd()})
        # What child_env sets for `dnnprof run` (see runs.session): CUPTI torn down after each profiler session,
        # Kineto's per-session notices kept off the program's stderr. A value the user set is kept.
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        self._started = time.time()
        ctl = Controller(torch, staging, self.config)
        ctl.install()
        self._ctl = ctl
        self.path = self._rd.final
        _active = self
        # A loop that never reaches stop() (an exception a framework does not report to its callbacks) still
        # leaves its run directory, written at interpreter exit as `dnnprof run` writes it.
        atexit.register(self._stop_at_exit)
        self._say(f"profiling into {self.path} (warm-up {self.config.warmup_steps} steps, then "
                  f"{self.config.steps} profiled)")
        return self

    def stop(self, exc: BaseException | None = None) -> Any:
        """Flush the collector, build the run directory and say where it is; returns the run's result (None when
        nested or already stopped). ``exc``: the exception that ended the profiled code, if any."""
        global _active
        ctl, self._ctl = self._ctl, None
        if ctl is None:
            return None
        atexit.unregister(self._stop_at_exit)
        from dnnprof.collect.bootstrap import BOOT_ERROR_FILE, OWNER_FILE
        from dnnprof.runs.finish import finish_run
        from dnnprof.runs.rundir import git_info

        if exc is not None:
            ctl.note_exception(type(exc), exc)
        main = threading.current_thread() is threading.main_thread()
        sigint = signal.getsignal(signal.SIGINT) if main else None
        try:
            ctl.finalize()
        finally:
            ctl.uninstall()
            if main and sigint is not None:
                signal.signal(signal.SIGINT, sigint)  # finalize ignores Ctrl-C while it flushes; the program goes on
            _active = None
        staging = self._rd.staging
        interrupted = isinstance(exc, KeyboardInterrupt)
        exit_code = 130 if interrupted else (_exit_code(exc) if exc is not None else 0)
        run_meta = {
            "name": self._rd.final.name, "command": self._command, "cwd": os.getcwd(), "exit_code": exit_code,
            "interrupted": interrupted, "started_unix_s": self._started,
            "duration_s": round(time.time() - self._started, 3), "workload": None, "git": git_info(Path.cwd()),
            "dnnprof_version": _version(), "owner_found": True, "in_process": True,
            "boot_error": (staging / BOOT_ERROR_FILE).read_text().strip()
            if (staging / BOOT_ERROR_FILE).exists() else None,
            "child_error": None,
        }
        (staging / OWNER_FILE).unlink(missing_ok=True)
        self.result = finish_run(self._rd, run_meta, self.config, echo=self._say)
        self.path = self.result.run_dir
        self._report(self.result)
        return self.result

    def _stop_at_exit(self) -> None:
        last = getattr(sys, "last_value", None)
        self.stop(last if isinstance(last, BaseException) else RuntimeError("the program ended inside the profile"))

    # --- messages ----------------------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if not self.quiet:
            print(f"dnnprof: {message}", file=sys.stderr, flush=True)

    def _report(self, result: Any) -> None:
        """What ``dnnprof run`` says when a run ends (render/run_lines.py); where the run went even when quiet."""
        from dnnprof.render.run_lines import run_lines
        from dnnprof.render.safe_text import clean

        lines = run_lines(result, quiet=self.quiet)
        if self.quiet:  # the one thing the run leaves behind
            state = "complete" if result.complete else "INCOMPLETE"
            lines.append(f"run directory ({state}): {result.run_dir}")
        for line in lines:
            if line.startswith("report: dnnprof analyze"):
                line += "  (or dnnprof.load(path) in Python)"
            print(f"dnnprof: {clean(line)}", file=sys.stderr, flush=True)


def program_command() -> list[str]:
    """This program's command line as ``dnnprof run`` records it: the interpreter, then ``sys.argv`` (``-c`` for an
    interactive session or a notebook, whose ``sys.argv`` names no script to run again)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(".py") and os.path.isfile(argv[0]) and "ipykernel" not in argv[0]:
        return [sys.executable, *argv]
    return [sys.executable, "-c", "notebook" if any("ipykernel" in a for a in argv[:1]) else "interactive"]


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 1


def _version() -> str:
    import dnnprof

    return dnnprof.__version__


def profile(*, warmup_steps: int = 5, steps: int = 10, full: bool = False, counters: bool = False,
            out: str | os.PathLike[str] | None = None, name: str | None = None, step_marker: str | None = None,
            nvml: bool = True, quiet: bool = False, explicit_steps: bool = False) -> ProfileSession:
    """Profile the code in a ``with`` block as ``dnnprof run`` profiles a script; call ``prof.step()`` at the end
    of each iteration.

    Example::

        with dnnprof.profile(warmup_steps=3, steps=5, out="runs/try1") as prof:
            for batch in loader:
                train_step(batch)
                prof.step()
        print(prof.path)

    Args:
        warmup_steps: unprofiled steps first (at least 2).
        steps: steps in the profiled window.
        full: also shapes, stacks and memory events (``dnnprof run --full``).
        counters: then run this script again under Nsight Compute for one step's hardware counters.
        out: the run directory (new or empty; default ``dnnprof-runs/<script>-<UTC time>``).
        name: run name in the default directory name (default: the script's name).
        step_marker: a ``record_function``/NVTX range that ends each iteration, instead of ``prof.step()``.
        nvml: sample NVML/GPM in the background.
        quiet: print only where the run directory is.
        explicit_steps: only ``prof.step()`` ends a step (not optimizer steps or DataLoader batches): for loops
            that fetch several batches or step several optimizers per iteration.

    Without ``prof.step()`` calls, iterations are found as ``dnnprof run`` finds them (optimizer steps, then
    DataLoader batches). The run directory is written when the block ends, also after an exception (then
    marked incomplete when the window was not finished).

    Raises:
        ValueError: a bad setting (``warmup_steps`` < 2, ``steps`` < 1 …), named in the message.
    """
    return ProfileSession(warmup_steps=warmup_steps, steps=steps, full=full, counters=counters, out=out,
                          name=name, step_marker=step_marker, nvml=nvml, quiet=quiet,
                          explicit_steps=explicit_steps)
