"""``dnnprof sweep WORKLOAD | -- COMMAND…``: batch sizes to the limit × precisions × modes, every point isolated."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.render.safe_text import clean

_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def sweep(
    ctx: typer.Context,
    workload: str | None = typer.Argument(None, help="Built-in workload (dnnprof workloads), or give a command "
                                                     "after -- (python train.py --bs {batch_size} …).",
                                          show_default=False),
    batch_sizes: str = typer.Option("auto", "--batch-sizes", help="auto (double until out of memory, then find the "
                                                                  "largest that fits), a list 1,8,32, or a range "
                                                                  "1..256 (doubling) / 8..64:8."),
    precisions: str = typer.Option("fp32", "--precisions", help="Comma list of fp64,fp32,tf32,fp16,bf16,amp-fp16,"
                                                                "amp-bf16."),
    modes: str = typer.Option("train", "--modes", help="Comma list of train,infer."),
    # Its own --device (auto by default), --counters (profiled points only), --out (a sweep directory), --steps
    # and --warmup-steps (timed and untimed steps of every trial, not a profiler window): other meanings.
    device: str = typer.Option("auto", "--device", help="cuda, cpu, or auto (cuda when an NVIDIA GPU is present)."),
    memory_limit: str | None = typer.Option(None, "--memory-limit", help="Memory each trial may use: 16GiB, 8GB, "
                                                                        "50%%. GPU: allocator cap; CPU: address "
                                                                        "space of the trial process."),
    counters: bool = typer.Option(False, "--counters", help="Profiled points also collect Nsight Compute counters "
                                                             "(occupancy, bound class)."),
    out: Path | None = typer.Option(None, "--out", help="Sweep directory (default dnnprof-sweeps/<name>-<UTC "
                                                        "time>). Re-run with the same --out to resume."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds one trial may run before it is killed."),
    steps: int = typer.Option(5, "--steps", help="Timed steps per trial."),
    warmup_steps: int = typer.Option(2, "--warmup-steps", help="Untimed steps first in every trial."),
    max_batch_size: int = typer.Option(65536, "--max-batch-size", help="auto never tries more than this."),
    profile_points: str = typer.Option("default,max", "--profile-points",
                                       help="Batch sizes that also get a full dnnprof profile: default, max, all, "
                                            "none, or numbers."),
    default_batch_size: int | None = typer.Option(None, "--default-batch-size",
                                                  help="The 'default' point (default: the workload's; for a "
                                                       "command, the smallest batch that fits)."),
    time_budget: float | None = typer.Option(None, "--time-budget", help="Start no trial after this many "
                                                                         "seconds (re-run to continue)."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write report.md/.html/.json at the end."),
    quiet: bool = opt.quiet(),
) -> None:
    """Sweep batch size (to the largest that fits), precision and train/infer; every point in its own process.

    A command gets the batch size through {batch_size} in its arguments and DNNPROF_BATCH_SIZE in its environment
    (also {precision}/{mode}/{device}/{steps} and DNNPROF_PRECISION/MODE/DEVICE/STEPS).
    """
    from dnnprof.runs.rundir import safe_name, utc_stamp
    from dnnprof.runs.sweep import (
        SweepSpec,
        SweepSpecError,
        default_device,
        parse_batch_sizes,
        parse_choices,
        parse_profile_points,
        parse_size,
        run_sweep,
        script_target,
        workload_target,
    )
    from dnnprof.workloads import MODES, PRECISIONS, WORKLOADS, WorkloadError

    extra = list(ctx.args)
    try:
        if workload is not None and not extra and workload in WORKLOADS:
            target = workload_target(workload)
            if default_batch_size is not None:
                target = type(target)(**{**target.__dict__, "default_batch_size": default_batch_size})
        elif workload is not None or extra:
            command = ([workload] if workload is not None else []) + extra
            if command and command[0] == "--":
                command = command[1:]
            if len(command) == 1 and "/" not in command[0] and not command[0].endswith(".py"):
                workload_target(command[0])  # an unknown workload name: the error lists the valid ones
            target = script_target(command, default_batch_size)
        else:
            raise UserError("give a workload (dnnprof workloads lists them) or a command after --, e.g. "
                            "dnnprof sweep -- python train.py --batch-size {batch_size}")
        dev = default_device() if device == "auto" else device
        spec = SweepSpec(
            target=target,
            out=out or Path("dnnprof-sweeps") / f"{safe_name(target.name)}-{utc_stamp()}",
            batches=parse_batch_sizes(batch_sizes),
            precisions=parse_choices(precisions, PRECISIONS, "--precisions"),
            modes=parse_choices(modes, MODES, "--modes"),
            device=dev,
            memory_limit=parse_size(memory_limit) if memory_limit else None,
            counters=counters,
            timeout_s=timeout,
            steps=steps,
            warmup_steps=warmup_steps,
            max_batch_size=max_batch_size,
            profile_points=parse_profile_points(profile_points),
            time_budget_s=time_budget,
        ).validate()
    except (SweepSpecError, WorkloadError) as e:
        raise UserError(str(e)) from None
    say = (lambda m: None) if quiet else (lambda m: print(f"dnnprof sweep: {clean(m)}", file=sys.stderr, flush=True))
    say(f"{target.kind} {target.name} on {spec.device}: batch sizes {spec.batches.text}, precisions "
        f"{','.join(spec.precisions)}, modes {','.join(spec.modes)} -> {spec.out}")
    try:
        doc = run_sweep(spec, echo=say)
    except SweepSpecError as e:
        raise UserError(str(e)) from None
    except KeyboardInterrupt:
        print(f"dnnprof sweep: interrupted; finished trials are kept in {spec.out} — run the same command again "
              "to resume", file=sys.stderr)
        sys.exit(130)  # SystemExit passes through the CLI unchanged
    for m in doc["max_batch_size"]:
        print(f"dnnprof sweep: {clean(max_batch_line(m))}", file=sys.stderr)
    for m in doc["messages"]:
        print(f"dnnprof sweep: {clean(m)}", file=sys.stderr)
    if report:
        from dnnprof.cli.report import write_reports

        paths = write_reports(spec.out)
        print(f"dnnprof sweep: report: {paths[0]}", file=sys.stderr)
    print(f"dnnprof sweep: {doc['status']}: {doc['trials_total']} trials in {spec.out}", file=sys.stderr)


def max_batch_line(m: dict[str, Any]) -> str:
    """One ``max_batch_size`` entry as a line: the largest batch that fits, what ran out, and how exact that is."""
    series = f"{m['mode']} {m['precision']}"
    if m.get("batch_size") is None:
        return f"{series}: skipped ({m.get('message', '')})"
    if m.get("limited_by") == "largest_tried":
        return f"{series}: every batch tried fits, up to {m['batch_size']}"
    line = f"{series}: largest batch that fits {m['batch_size']}, limited by {m.get('limited_by') or 'nothing seen'}"
    if m.get("exact"):
        return line
    bracket = m.get("bracket") or []
    hi = bracket[1] if len(bracket) > 1 else None
    if hi is not None:
        return f"{line} (not pinned: between {m['batch_size']} and {hi})"
    return f"{line} (not pinned: no larger batch was tried)"


def register(app: typer.Typer) -> None:
    app.command("sweep", context_settings=_CONTEXT)(sweep)
