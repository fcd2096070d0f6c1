"""A profiling session, from the parent's side: start the command, wait, build the run directory.

The profiled command runs in a child process with the bootstrap on its ``PYTHONPATH`` (see ``bootstrap``), its
stdin/stdout/stderr untouched, so the script's own output reaches the terminal unchanged; dnnprof's messages go to
stderr. After the child exits — normally, with an error, or interrupted — the raw traces it left are turned into
the canonical profile, the metadata and ``summary.json``, and the staging directory is renamed into place.

Ctrl-C reaches the child directly from the terminal (same process group); the collector flushes what it has and
the run is marked incomplete. When only dnnprof got the signal, it is forwarded. A second Ctrl-C kills the child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dnnprof
from dnnprof.collect.bootstrap import BOOT_ERROR_FILE, ENV_PROFILE_RANK, ENV_RANKS, OWNER_FILE, parse_ranks
from dnnprof.collect.config import (
    CONFIG_FILE,
    ENV_OWNER,
    ENV_RUN_DIR,
    CollectorConfig,
    with_boot,
    write_json_atomic,
)
from dnnprof.collect.lifeline import die_with_parent
from dnnprof.model.run_format import CHILD_ERROR_FILE as CHILD_ERROR_FILE
from dnnprof.runs.result import RunResult
from dnnprof.runs.rundir import RUNS_ROOT, RunDir, git_info, name_from_command

#: How long dnnprof waits after a Ctrl-C for the child to start flushing before forwarding the signal.
FORWARD_AFTER_S = 0.5


def child_env(run_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the profiled command: bootstrap first on PYTHONPATH, the run directory to write to."""
    env = with_boot(dict(os.environ if base is None else base))
    env[ENV_RUN_DIR] = str(run_dir)
    env.pop(ENV_OWNER, None)
    # Tear CUPTI down after each profiler session: left attached it slows the rest of the run by 10-20%
    # (pytorch/pytorch#144455). torch.compile turns this off itself where CUDA graphs need it.
    env.setdefault("TEARDOWN_CUPTI", "1")
    # Kineto prints a "USDT: ... profiler_start/stop" line on the script's stderr for every profiler session
    # dnnprof opens (torch 2.5+ logs them at its highest level, 5). Above that level Kineto prints nothing; a
    # KINETO_LOG_LEVEL the user set (e.g. 2 to see Kineto's own warnings) is kept.
    env.setdefault("KINETO_LOG_LEVEL", "6")
    return env


def rank_env(env: dict[str, str], ranks: str | None) -> dict[str, str]:
    """Which ranks of a multi-process command are profiled: ``ranks`` (``all`` or ``0,3``) when given; else, as
    before, only ``DNNPROF_PROFILE_RANK`` when the user set it; else every rank. A command of one process has no
    ``RANK`` and is profiled whatever this says.

    Raises:
        ValueError: ``ranks`` is neither ``all`` nor a list of ranks.
    """
    env = dict(env)
    if ranks is not None:
        parse_ranks(ranks)
        env[ENV_RANKS] = ranks
        env.pop(ENV_PROFILE_RANK, None)
    elif ENV_PROFILE_RANK not in env:
        env[ENV_RANKS] = "all"
    return env


def launch_command(command: list[str], nproc: int | None) -> list[str]:
    """``--nproc N``: ``python train.py ARGS`` as ``python -m torch.distributed.run --standalone --nproc-per-node N
    train.py ARGS`` (torchrun sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` … for each of the N processes).

    Raises:
        ValueError: N < 1, or the command is not a Python interpreter running a script or ``-m module``.
    """
    if nproc is None:
        return command
    if nproc < 1:
        raise ValueError(f"--nproc {nproc}: give at least 1 process")
    if len(command) < 2 or not os.path.basename(command[0]).startswith("python"):
        raise ValueError("--nproc needs a Python command (dnnprof run --nproc 4 -- python train.py ARGS); for "
                         "another launcher, give it yourself (dnnprof run -- torchrun --nproc-per-node 4 train.py)")
    return [command[0], "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *command[1:]]


def owner_found(staging: Path) -> bool:
    """Some process claimed the run (the run directory, or a rank's sub-directory of it)."""
    return (staging / OWNER_FILE).exists() or any(staging.glob(f"*/{OWNER_FILE}"))


def ignores_sigint(pid: int) -> bool:
    """True when process ``pid`` ignores SIGINT (Linux ``/proc``; False where that cannot be read)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
    return False


def _wait(proc: subprocess.Popen[bytes], staging: Path, echo: Callable[[str], None]) -> tuple[int, bool, bool]:
    """Wait for the child; returns (exit code, interrupted, whether dnnprof itself got SIGINT or SIGTERM)."""
    state = {"sigint": 0, "t": 0.0, "forwarded": False, "term": False}

    def on_sigint(signum: int, frame: Any) -> None:
        state["sigint"] += 1
        if state["sigint"] == 1:
            state["t"] = time.monotonic()
            echo("interrupted: flushing the profile (press Ctrl-C again to kill the script)")
        else:
            proc.kill()

    def on_sigterm(signum: int, frame: Any) -> None:
        state["term"] = True
        proc.send_signal(signal.SIGTERM)

    main = threading.current_thread() is threading.main_thread()
    if main:
        old_int = signal.signal(signal.SIGINT, on_sigint)
        old_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if (state["sigint"] == 1 and not state["forwarded"]
                        and time.monotonic() - state["t"] > FORWARD_AFTER_S
                        and not (staging / "finalizing").exists()):
                    # A script started with SIGINT ignored (a background job) still flushes on SIGTERM.
                    proc.send_signal(signal.SIGTERM if ignores_sigint(proc.pid) else signal.SIGINT)
                    state["forwarded"] = True
    finally:
        if main:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
    if rc < 0:
        rc = 128 - rc
    by_user = bool(state["sigint"] or state["term"])
    return rc, by_user or rc in (130, 143), by_user


def run_command(
    command: list[str],
    config: CollectorConfig,
    *,
    name: str | None = None,
    out: Path | None = None,
    root: Path = RUNS_ROOT,
    cwd: Path | None = None,
    workload: dict[str, Any] | None = None,
    echo: Callable[[str], None] | None = None,
    ranks: str | None = None,
    nproc: int | None = None,
) -> RunResult:
    """Profile ``command`` (e.g. ``["python", "train.py", "--lr", "3e-4"]``) and write its run directory.

    Args:
        command: the command line, run as is (no shell).
        config: capture settings.
        name: run name (default: from the command).
        out: exact run directory (default: ``root/<name>-<UTC timestamp>``).
        root: parent of default run directories.
        cwd: working directory of the command.
        workload: the built-in workload's name and knobs, recorded in the metadata.
        echo: where dnnprof's own one-line messages go (default: stderr with a ``dnnprof:`` prefix).
        ranks: which ranks of a multi-process command to profile (``all``, ``0,3``; see :func:`rank_env`).
        nproc: start the Python command as N processes under torchrun (:func:`launch_command`).

    Raises:
        RunDirError: the run directory cannot be created.
        ValueError: a bad capture setting.
        FileNotFoundError: the command's program does not exist.
    """
    from dnnprof.runs.finish import finish_run

    config.validate()
    if not command:
        raise ValueError("no command to run: give it after --, e.g. dnnprof run -- python train.py")
    command = launch_command(command, nproc)
    env = rank_env(child_env(Path("_")), ranks)  # checks --ranks before anything is created
    say = echo or (lambda m: print(f"dnnprof: {m}", file=sys.stderr, flush=True))
    rd = RunDir.create(name or name_from_command(command), out=out, root=root)
    (rd.staging / CONFIG_FILE).write_text(config.to_json())
    started = time.time()
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    write_json_atomic(rd.staging / "command.json", {"command": command, "cwd": str(cwd)})
    try:
        # The script dies with dnnprof (kill -9 of dnnprof must not leave it running under PID 1).
        env[ENV_RUN_DIR] = str(rd.staging)
        proc = subprocess.Popen(command, env=env, cwd=cwd, preexec_fn=die_with_parent())
    except OSError as e:
        shutil.rmtree(rd.staging, ignore_errors=True)  # nothing ran: leave nothing behind
        raise FileNotFoundError(f"{command[0]}: cannot run ({e.strerror})") from None
    rc, interrupted, by_user = _wait(proc, rd.staging, say)
    stalls = exit_stalls(rd.staging)
    if stalls and not by_user:  # ended by dnnprof's exit watchdog, not by an interrupt
        interrupted = False
        own = [s for s in stalls if s["rank"] is None]
        if own and rc in (128 + signal.SIGTERM, 128 + signal.SIGKILL):
            seen = own[0]["script_exit_code"]
            rc = seen if seen is not None else rc  # unknown: the signal's status stands
    run_meta = {
        "name": rd.final.name, "command": command, "cwd": str(cwd), "exit_code": rc, "interrupted": interrupted,
        "started_unix_s": started, "duration_s": round(time.time() - started, 3), "workload": workload,
        "git": git_info(cwd), "dnnprof_version": dnnprof.__version__,
        "owner_found": owner_found(rd.staging),
        "boot_error": (rd.staging / BOOT_ERROR_FILE).read_text().strip()
        if (rd.staging / BOOT_ERROR_FILE).exists() else None,
        "child_error": (rd.staging / CHILD_ERROR_FILE).read_text().strip()
        if (rd.staging / CHILD_ERROR_FILE).exists() else None,
        "exit_stalls": stalls,
    }
    return finish_run(rd, run_meta, config, echo=say)


def exit_stalls(staging: Path) -> list[dict[str, Any]]:
    """The processes dnnprof's exit watchdog had to end (``collect/exit_guard.py``): ``rank`` (None for the run's
    own process), ``limit_s``, ``signal``, ``script_exit_code``; unreadable notes are skipped."""
    import json

    from dnnprof.collect.exit_guard import STALL_FILE

    out = []
    for path in [staging / STALL_FILE, *sorted(staging.glob(f"rank*/{STALL_FILE}"))]:
        try:
            d = json.loads(path.read_text())
            rank = None if path.parent == staging else int(path.parent.name[len("rank"):])
            code = d["script_exit_code"]
            out.append({"rank": rank, "limit_s": float(d["limit_s"]), "signal": str(d["signal"]),
                        "script_exit_code": None if code is None else int(code)})
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def profile_workload(
    workload: str,
    knobs: dict[str, Any],
    config: CollectorConfig,
    *,
    out: Path | None = None,
    root: Path = RUNS_ROOT,
    echo: Callable[[str], None] | None = None,
    python: str | None = None,
) -> RunResult:
    """Profile a built-in workload in a child process (``dnnprof.collect.workload_main``).

    Args:
        workload: registry name (``gpt2``, ``resnet50-tiny`` …).
        knobs: workload config knobs (batch_size, precision, mode, device, data_dir, num_workers, pin_memory, seed).
        config: capture settings.

    Raises:
        dnnprof.workloads.errors.WorkloadError: unknown workload or knob (message lists the valid choices).
    """
    import json

    from dnnprof.workloads.config import WorkloadConfig
    from dnnprof.workloads.registry import get_spec

    spec = get_spec(workload)
    resolved = WorkloadConfig.from_dict(knobs).resolve(spec)
    info = {"name": workload, "config": resolved.as_dict(), "unit": spec.unit}
    config.workload = info
    config.warmup_until_steady = True  # the workload's loop runs as long as the collector needs
    command = [python or sys.executable, "-m", "dnnprof.collect.workload_main", "--workload", workload,
               "--knobs", json.dumps(resolved.as_dict())]
    return run_command(command, config, name=workload, out=out, root=root, workload=info, echo=echo)
