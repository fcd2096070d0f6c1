"""``dnnprof run [OPTIONS] -- COMMAND…``: profile an unmodified training or inference script."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.render.safe_text import clean

_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


def capture_config(*, warmup_steps: int, steps: int, full: bool, counters: bool, step_marker: str | None,
                   stop_after_profile: bool, nvml: bool, nvml_period_ms: float) -> Any:
    """The collector settings from command-line options (raises UserError on a bad value)."""
    from dnnprof.collect.config import CollectorConfig

    cfg = CollectorConfig(mode="full" if full else "default", warmup_steps=warmup_steps, steps=steps,
                          step_marker=step_marker, stop_after_profile=stop_after_profile, nvml=nvml,
                          nvml_period_s=nvml_period_ms / 1000.0, counters=counters)
    try:
        return cfg.validate()
    except ValueError as e:
        raise UserError(str(e)) from None




def report(result: Any, quiet: bool = False) -> None:
    """A few lines on stderr: where the run went, the step time and what the capture cost."""
    from dnnprof.render.run_lines import run_lines

    for line in run_lines(result, quiet=quiet):
        print(f"dnnprof: {clean(line)}", file=sys.stderr)


def run(
    ctx: typer.Context,
    warmup_steps: int = opt.warmup_steps(),
    steps: int = opt.steps(),
    out: Path | None = opt.run_out(),
    name: str | None = typer.Option(None, "--name", help="Run name (default: the script's name)."),
    full: bool = opt.full(),
    counters: bool = opt.counters(),
    step_marker: str | None = typer.Option(None, "--step-marker", help="record_function/NVTX range name that ends "
                                                                       "each iteration (default: optimizer steps)."),
    stop_after_profile: bool = typer.Option(False, "--stop-after-profile", help="End the script once the profile "
                                                                                "is collected."),
    no_nvml: bool = opt.no_nvml(),
    nvml_period_ms: float = opt.nvml_period_ms(),
    quiet: bool = opt.quiet(),
    ranks: str | None = typer.Option(None, "--ranks", help="Ranks of a multi-process job to profile: 'all' "
                                                            "(default) or a list such as 0,3."),
    nproc: int | None = typer.Option(None, "--nproc", help="Start the Python command as N processes under "
                                                           "torchrun (one per rank)."),
) -> None:
    """Profile an unmodified script: dnnprof run [OPTIONS] -- python train.py ARGS…

    Iterations are found by themselves (optimizer steps), warm-up is skipped, a steady window is profiled at
    low overhead, and the script runs to the end with its output and exit code intact.
    """
    from dnnprof.runs.rundir import RunDirError
    from dnnprof.runs.session import run_command

    command = [a for a in ctx.args]
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("no command: dnnprof run [OPTIONS] -- python train.py ARGS…")
    cfg = capture_config(warmup_steps=warmup_steps, steps=steps, full=full, counters=counters,
                         step_marker=step_marker, stop_after_profile=stop_after_profile, nvml=not no_nvml,
                         nvml_period_ms=nvml_period_ms)
    try:
        result = run_command(command, cfg, name=name, out=out, ranks=ranks, nproc=nproc)
    except (RunDirError, FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    report(result, quiet)
    exit_with(result.exit_code)


def exit_with(code: int) -> None:
    """End the command with the profiled script's exit code (SystemExit passes through the CLI unchanged)."""
    if code:
        sys.exit(code)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings=_CONTEXT, options_metavar="[OPTIONS] -- COMMAND [ARGS]...")(run)
