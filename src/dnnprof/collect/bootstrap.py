"""Starting the collector inside an unmodified script.

``dnnprof run`` puts ``collect/_boot`` first on ``PYTHONPATH``; its ``sitecustomize`` calls :func:`install` in the
first Python process of the command (children inherit ``DNNPROF_OWNER_PID`` and stay out: DataLoader workers,
helper subprocesses). The script itself runs exactly as it would without dnnprof — same interpreter, same
``sys.argv``, same ``__main__``, same tracebacks — which is why no runpy launcher sits in between.

Nothing torch-related happens until the script imports torch: an import watcher on ``sys.meta_path`` calls
:func:`activate` right after ``import torch`` completes, so scripts that set ``CUDA_VISIBLE_DEVICES`` after
start-up or never touch torch behave as before.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from dnnprof.collect.config import ENV_OWNER, ENV_RUN_DIR, CollectorConfig

OWNER_FILE = "owner.pid"
BOOT_ERROR_FILE = "boot_error.txt"

_controller: Any = None


def controller() -> Any:
    """The active :class:`~dnnprof.collect.controller.Controller` of this process, or None."""
    return _controller


class TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Calls ``on_import(torch)`` once ``import torch`` has finished executing (used by the sweep's trial hook too)."""

    def __init__(self, on_import: Callable[[ModuleType], None]) -> None:
        self.on_import = on_import
        self._busy = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module
        watcher = self

        def exec_module(module: ModuleType) -> None:
            original(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            watcher.on_import(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Arrange for :func:`activate` to run when torch is imported (now, if it already is)."""
    run_dir = Path(os.environ[ENV_RUN_DIR])
    # Registered before anything of the program's: runs after every other exit handler (see _last_at_exit).
    atexit.register(_last_at_exit)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "nn"):
        activate(torch, run_dir)
        return
    sys.meta_path.insert(0, TorchImportWatcher(lambda mod: activate(mod, run_dir)))


def _claim(run_dir: Path) -> bool:
    try:
        fd = os.open(run_dir / OWNER_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


#: ``__main__`` modules of launchers that start one worker process per rank and train in none of their own.
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
LAUNCHER_SCRIPTS = ("torchrun",)
#: Which rank of a multi-process job is profiled (``RANK`` of the worker), default 0: one rank, written into the run
#: directory itself, as before ``DNNPROF_RANKS`` existed. Set, it wins over ``DNNPROF_RANKS``.
ENV_PROFILE_RANK = "DNNPROF_PROFILE_RANK"
#: Which ranks of a multi-process job are profiled, each into ``rank<N>/`` of the run: ``all`` or ``0,3``
#: (``dnnprof run`` sets it; ``--ranks``).
ENV_RANKS = "DNNPROF_RANKS"


def parse_ranks(spec: str) -> set[int] | None:
    """``all`` → None (every rank); ``0,3`` → {0, 3}.

    Raises:
        ValueError: not ``all`` nor a comma-separated list of ranks ≥ 0.
    """
    spec = spec.strip()
    if spec.lower() == "all":
        return None
    try:
        ranks = {int(x) for x in spec.split(",") if x.strip()}
    except ValueError:
        raise ValueError(f"--ranks {spec!r}: give 'all' or ranks separated by commas (0,3)") from None
    if not ranks or min(ranks) < 0:
        raise ValueError(f"--ranks {spec!r}: give 'all' or ranks ≥ 0 separated by commas (0,3)")
    return ranks


def rank_dir(run_dir: Path, environ: Any = None) -> Path:
    """Where this process writes: ``rank<N>/`` of the run for a worker profiled under ``DNNPROF_RANKS``, the run
    directory itself otherwise (one process, or ``DNNPROF_PROFILE_RANK``)."""
    from dnnprof.model.run_format import rank_subdir

    env = os.environ if environ is None else environ
    rank = (env.get("RANK") or "").strip()
    if rank.isdigit() and env.get(ENV_PROFILE_RANK) is None and env.get(ENV_RANKS):
        return run_dir / rank_subdir(int(rank))
    return run_dir


def process_role(environ: Any = None, argv: list[str] | None = None, main_name: str | None = None) -> str:
    """``launcher`` (torchrun and friends: its workers decide for themselves), ``other_rank`` (a worker of a
    multi-process job that is not the rank to profile) or ``profiled``."""
    env = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    if main_name is None:
        main_name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) or ""
        # ``python -m torch.distributed.run`` imports torch while resolving the module, before ``__main__`` and
        # ``sys.argv`` say which module it is; the interpreter's own command line does.
        orig = list(getattr(sys, "orig_argv", []))
        if "-m" in orig[:-1] and not main_name:
            main_name = orig[orig.index("-m") + 1]
    script = os.path.basename(argv[0]) if argv else ""
    if main_name in LAUNCHER_MODULES or script in LAUNCHER_SCRIPTS or (
            script in ("run.py", "launch.py") and os.path.join("torch", "distributed") in argv[0]):
        return "launcher"
    rank = env.get("RANK")
    if rank is None:
        return "profiled"
    if env.get(ENV_PROFILE_RANK) is None and env.get(ENV_RANKS):
        try:
            wanted = parse_ranks(env[ENV_RANKS])
        except ValueError:
            wanted = {0}
        return "profiled" if wanted is None or (rank.strip().isdigit() and int(rank) in wanted) else "other_rank"
    if rank.strip() != env.get(ENV_PROFILE_RANK, "0").strip():
        return "other_rank"
    return "profiled"


def activate(torch: ModuleType, run_dir: Path) -> None:
    """Create the controller, hook it into torch and into interpreter exit.

    Under a multi-process launcher (``dnnprof run -- torchrun --nproc-per-node 8 train.py``) the launcher stands
    aside and lets its workers through; every worker whose ``RANK`` is in ``DNNPROF_RANKS`` is profiled into
    ``rank<N>/`` of the run (or, with ``DNNPROF_PROFILE_RANK`` set, only that rank, into the run directory), the
    others run as they would without dnnprof.
    """
    global _controller
    if _controller is not None:
        return
    role = process_role()
    if role == "launcher":
        os.environ.pop(ENV_OWNER, None)  # the workers it starts are candidates, not children of the profiled one
        return
    if role == "other_rank":
        return
    out_dir = rank_dir(run_dir)
    if out_dir != run_dir:
        out_dir.mkdir(exist_ok=True)
    if not _claim(out_dir):
        return
    try:
        from dnnprof.collect.controller import Controller

        ctl = Controller(torch, out_dir, CollectorConfig.load(run_dir))
        ctl.install()
    except Exception as e:  # noqa: BLE001 - never break the user's script; say why profiling is off
        (out_dir / BOOT_ERROR_FILE).write_text(f"{type(e).__name__}: {e}\n")
        print(f"dnnprof: collector failed to start ({type(e).__name__}: {e}); the script runs unprofiled",
              file=sys.stderr)
        return
    _controller = ctl
    atexit.register(_at_exit, ctl)
    previous = sys.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        ctl.note_exception(exc_type, exc)
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    real_exit = sys.exit

    def exit_noting_status(code: object = None) -> None:
        from dnnprof.collect.exit_guard import exit_status

        if threading.current_thread() is threading.main_thread():  # elsewhere it ends only that thread
            ctl.exit_code = exit_status(code)
        real_exit(code)

    sys.exit = exit_noting_status  # type: ignore[assignment]  # the status a stalled exit must still pass on
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        # SIGTERM would kill the process before atexit: turn it into SystemExit so the profile gets flushed.
        def on_term(signum: int, frame: Any) -> None:
            ctl.exit_code = 128 + signum
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)


def _at_exit(ctl: Any) -> None:
    if ctl.exception is None:
        last = getattr(sys, "last_value", None)
        if last is not None:
            ctl.note_exception(type(last), last)
    ctl.finalize()


def _last_at_exit() -> None:
    """After every exit handler of the program's: once the profiler has run in this process, its end can stall
    (H100: every thread asleep in the CUDA profiler's teardown, also after windows that closed before the script
    ended), so a watchdog ends the process if it stops making progress (``exit_guard.arm_exit_watchdog``)."""
    ctl = _controller
    if ctl is None or not (ctl.stopped_at_exit or any(w is not None for w in (ctl.main, ctl.attrib, ctl.pending))):
        return
    from dnnprof.collect.exit_guard import STALL_FILE, arm_exit_watchdog

    # The status when seen: sys.exit's argument on the main thread, 128 + N after signal N, 1 after an uncaught
    # exception; else unknown (None): a ``raise SystemExit(n)`` at the top level is not seen.
    code = ctl.exit_code if ctl.exit_code is not None else (1 if ctl.exception is not None else None)
    arm_exit_watchdog(ctl.dir / STALL_FILE, code)
