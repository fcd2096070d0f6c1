"""A fork server for probe trials: import torch once, then fork one fresh process per trial.

A probe of a built-in workload spent 7 of its ~10 s importing: torch (3–4.5 s on the H100 machine) and, when the
first optimizer is built, ``torch._dynamo`` (another 3–4.5 s; ``torch.optim.Optimizer.__init__`` imports it). The
server (``python -m dnnprof.runs.sweep.zygote --workload NAME``) imports torch, the optimizers, dynamo, the data
loader and the workload's own modules once; every trial is then a ``fork`` of it: a process of its own, with its
own CUDA context, memory peaks and exit status, started in milliseconds.

Safety: the server never initialises CUDA, and when the sweep runs on a GPU it first forks a self-test child that
does (a CUDA driver initialised before a fork is unusable in the child); it refuses to serve when importing left
Python threads running (fork copies only the calling thread). Forking after ``import torch`` is what DataLoader
workers do by default on Linux. Each trial child starts a
new session (its own process group, killed as a group on timeout), takes the trial's environment, stdio files and
working directory, runs the probe and exits; the server reaps it and reports its exit status. CPU sweeps with
``--memory-limit`` do not use it: their allocator settings (``MALLOC_ARENA_MAX``) are read at process start.

Protocol, one JSON object per line: the server says ``{"ready": true}`` (or ``false`` with a ``reason``) once; then
for each request ``{"module", "args", "env", "stdout", "stderr", "cwd"}`` it answers ``{"pid"}`` at the fork and
``{"pid", "returncode"}`` when the child has exited (negative: killed by that signal). The child runs
``module.main(args)`` (the probe's ``python -m`` entry point) and exits with what it returns.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dnnprof.collect.lifeline import die_with_parent, forget_group, record_group, set_parent_death_signal
from dnnprof.runs.sweep.trial import KILL_GRACE_S, Finished, read_tail, run_trial

PROBE_MODULE = "dnnprof.runs.sweep.probe"
#: Imported before the first fork: what every probe needs and is slow to import.
PRELOAD = ("torch", "torch.optim", "torch._dynamo", "torch.utils.data", "dnnprof.workloads.api",
           "dnnprof.workloads.base", PROBE_MODULE)
#: Seconds the sweep waits for the server to import everything.
READY_TIMEOUT_S = 180.0
#: Set to 0 to run every probe as a fresh interpreter instead.
ENV_SWITCH = "DNNPROF_SWEEP_FORK_SERVER"


# --- the server ---------------------------------------------------------------------------------------------------
def _preload(workload: str | None) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    if workload:
        from dnnprof.workloads.registry import get_spec

        spec = get_spec(workload)
        importlib.import_module("dnnprof.workloads." + spec.builder.split(":")[0])
        for dep in spec.requires:
            with contextlib.suppress(Exception):  # a missing extra is the probe's to report, with its message
                importlib.import_module(dep)


def _cuda_selftest() -> str:
    """"" when a forked child can initialise CUDA, else why not."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "" if code == 0 else f"a forked child could not initialise CUDA (exit status {code})"


def _child(req: dict[str, Any], keep_closed: Sequence[int]) -> None:
    """In the forked child: become the trial, run the probe, exit. Never returns."""
    code = 1
    try:
        os.setsid()
        set_parent_death_signal()  # the trial dies with the server, which dies with the sweep
        for fd in keep_closed:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(req["env"])
        if req.get("cwd"):
            os.chdir(req["cwd"])
        module = req.get("module", PROBE_MODULE)
        sys.argv = [module, *req["args"]]
        code = importlib.import_module(module).main(list(req["args"]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the trial's failure goes to its stderr, the exit status says it failed
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def serve(workload: str | None, device: str, proto_in: IO[str], proto_out: IO[str]) -> int:
    """Preload, say whether ready, then fork one child per request until the input ends."""

    def say(doc: dict[str, Any]) -> None:
        proto_out.write(json.dumps(doc) + "\n")
        proto_out.flush()

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides when the server ends (closing its input)
    t0 = time.perf_counter()
    try:
        _preload(workload)
    except Exception as e:  # noqa: BLE001 - say why and let the sweep start probes the usual way
        say({"ready": False, "reason": f"preloading failed: {type(e).__name__}: {e}"})
        return 1
    import torch

    reason = ""
    if torch.cuda.is_initialized():
        reason = "importing initialised CUDA"
    elif threading.active_count() > 1:
        reason = "importing left other Python threads running"
    elif device == "cuda":
        reason = _cuda_selftest()
    if reason:
        say({"ready": False, "reason": reason})
        return 1
    # Everything imported so far goes to the collector's permanent generation: the children's garbage collections
    # then never walk (and copy-on-write) the inherited modules' objects.
    gc.collect()
    gc.freeze()
    say({"ready": True, "preload_s": round(time.perf_counter() - t0, 3), "torch": torch.__version__})
    keep_closed = (proto_in.fileno(), proto_out.fileno())
    for line in proto_in:
        if not line.strip():
            continue
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, keep_closed)
        say({"pid": pid})
        _, status = os.waitpid(pid, 0)
        say({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__name__}")
    ap.add_argument("--workload", default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    # The protocol gets its own copy of stdout; stray prints during imports go to stderr instead.
    proto_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return serve(args.workload, args.device, sys.stdin, proto_out)


# --- the sweep's side ---------------------------------------------------------------------------------------------
class ServerGone(RuntimeError):
    """The fork server ended or stopped answering."""


class ForkServer:
    """Starts the server and runs probe commands through it; ``run`` has ``trial.run_trial``'s signature.

    Commands that are not a probe, or that need a ``preexec`` (an address-space limit), run as usual. When the
    server cannot start (or dies), every later trial runs as usual too, and ``note`` says why.
    """

    def __init__(self, workload: str | None, device: str, env: Mapping[str, str], log: Path,
                 modules: Sequence[str] = (PROBE_MODULE,)) -> None:
        self.workload, self.device, self.env, self.log = workload, device, dict(env), log
        self.modules = tuple(modules)
        self.proc: subprocess.Popen[bytes] | None = None
        self.note = ""
        self.preload_s: float | None = None
        self._buf = b""

    # plumbing
    def _readline(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next message, or None after ``timeout_s``. Raises ServerGone at end of output."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ServerGone("the fork server exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def start(self) -> bool:
        """Start the server and wait until it is ready; False (with ``note``) when it cannot serve."""
        if self.proc is not None:
            return not self.note
        cmd = [sys.executable, "-m", __name__, "--device", self.device]
        if self.workload:
            cmd += ["--workload", self.workload]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as err:
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             env=self.env, start_new_session=True,
                                             preexec_fn=die_with_parent())
            except OSError as e:
                self.note = f"fork server could not start: {e}"
                return False
        try:
            msg = self._readline(READY_TIMEOUT_S)
        except (ServerGone, ValueError) as e:
            msg = {"ready": False, "reason": f"{e}: {read_tail(self.log, 400).strip()}"}
        if msg is None:
            msg = {"ready": False, "reason": f"not ready after {READY_TIMEOUT_S:g} s"}
        if not msg.get("ready"):
            self.note = f"fork server not used ({msg.get('reason')}): every probe imports torch itself"
            self.close()
            return False
        self.preload_s = msg.get("preload_s")
        return True

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.note = self.note or "fork server closed"  # a closed server is not restarted

    def serves(self, argv: Sequence[str], preexec: Callable[[], None] | None) -> bool:
        """``python -m MODULE ...`` of a served module, with nothing to do between fork and exec."""
        return preexec is None and len(argv) >= 3 and argv[1] == "-m" and argv[2] in self.modules

    # the trial runner
    def run(self, argv: Sequence[str], *, folder: Path, env: Mapping[str, str], timeout_s: float,
            preexec: Callable[[], None] | None = None, cwd: Path | None = None) -> Finished:
        def as_usual() -> Finished:
            return run_trial(argv, folder=folder, env=env, timeout_s=timeout_s, preexec=preexec, cwd=cwd)

        if not self.serves(argv, preexec) or self.note or not self.start():
            return as_usual()
        assert self.proc is not None and self.proc.stdin is not None
        folder.mkdir(parents=True, exist_ok=True)
        err_path = folder / "stderr.txt"
        req = {"module": argv[2], "args": list(argv[3:]), "env": dict(env), "stdout": str(folder / "stdout.txt"),
               "stderr": str(err_path), "cwd": str(cwd or os.getcwd())}
        t0 = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            started = self._readline(30.0)
        except (OSError, ServerGone, ValueError) as e:
            self.note = f"fork server stopped ({e}); the remaining probes import torch themselves"
            return as_usual()
        if started is None:
            self.note = "fork server stopped answering; the remaining probes import torch themselves"
            return as_usual()
        pid = int(started["pid"])
        record_group(folder, pid)
        timed_out = False
        try:
            done = self._readline(timeout_s)
            if done is None:
                timed_out = True
                done = self._kill(pid)
        except ServerGone:
            self.note = "fork server exited during a trial; the remaining probes import torch themselves"
            _kill_group(pid, signal.SIGKILL)
            return Finished(None, False, time.monotonic() - t0, read_tail(err_path),
                            start_error="the fork server exited during the trial")
        except BaseException:
            self._kill(pid)  # Ctrl-C / SIGTERM of the sweep: the trial must not outlive it
            raise
        finally:
            forget_group(folder)
        code = None if done is None else done.get("returncode")
        return Finished(code, timed_out, time.monotonic() - t0, read_tail(err_path))

    def _kill(self, pid: int) -> dict[str, Any] | None:
        """SIGTERM the trial's group, then SIGKILL; the server's exit report, when it comes."""
        for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
            _kill_group(pid, sig)
            try:
                done = self._readline(wait_s)
            except ServerGone:
                return None
            if done is not None:
                _kill_group(pid, signal.SIGKILL)  # stragglers in the group (DataLoader workers)
                return done
        return None


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


if __name__ == "__main__":
    sys.exit(main())
