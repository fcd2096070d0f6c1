"""``dnnprof profile WORKLOAD``: profile a built-in benchmark workload (see ``dnnprof workloads``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError


def knobs_from_options(*, batch_size: int | None, precision: str | None, mode: str | None, device: str | None,
                       num_workers: int | None, pin_memory: bool | None, data: Path | None,
                       seed: int | None) -> dict[str, Any]:
    """Only the knobs the user gave: the workload's defaults fill the rest."""
    given = {"batch_size": batch_size, "precision": precision, "mode": mode, "device": device,
             "num_workers": num_workers, "pin_memory": pin_memory, "data_dir": str(data) if data else None,
             "seed": seed}
    return {k: v for k, v in given.items() if v is not None}


def profile(
    workload: str = typer.Argument(..., help="Workload name (dnnprof workloads lists them)."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Samples per step (default: the workload's)."),
    precision: str | None = typer.Option(None, "--precision",
                                         help="fp64|fp32|tf32|fp16|bf16|amp-fp16|amp-bf16 (default fp32)."),
    mode: str | None = typer.Option(None, "--mode", help="train|infer|generate (default train; generate, GPT-2 "
                                                         "only: a prompt prefill then greedy decode iterations)."),
    # Not sweep's --device (auto by default) nor device's --device (an index): a workload knob, None = its default.
    device: str | None = typer.Option(None, "--device", help="cuda|cpu (default cuda)."),
    steps: int = opt.steps(),
    warmup_steps: int = opt.warmup_steps(),
    num_workers: int | None = typer.Option(None, "--num-workers", help="DataLoader workers (default 2 on cuda, 0 "
                                                                       "on cpu)."),
    pin_memory: bool | None = typer.Option(None, "--pin-memory/--no-pin-memory", help="Pin host batches "
                                                                                      "(default: on for cuda)."),
    data: Path | None = typer.Option(None, "--data", help="Folder of real files (.wav, images, .txt) instead of "
                                                          "synthetic data."),
    seed: int | None = typer.Option(None, "--seed", help="Seed for weights and synthetic data."),
    out: Path | None = opt.run_out(),
    full: bool = opt.full(),
    counters: bool = opt.counters(),
    no_nvml: bool = opt.no_nvml(),
    nvml_period_ms: float = opt.nvml_period_ms(),
    quiet: bool = opt.quiet(),
) -> None:
    """Profile a built-in workload: model, real DataLoader, train or inference steps, in a child process."""
    from dnnprof.cli.run import capture_config, exit_with, report
    from dnnprof.runs.finish import ChildRefused
    from dnnprof.runs.rundir import RunDirError
    from dnnprof.runs.session import profile_workload
    from dnnprof.workloads.errors import WorkloadError

    knobs = knobs_from_options(batch_size=batch_size, precision=precision, mode=mode, device=device,
                               num_workers=num_workers, pin_memory=pin_memory, data=data, seed=seed)
    cfg = capture_config(warmup_steps=warmup_steps, steps=steps, full=full, counters=counters, step_marker=None,
                         stop_after_profile=False, nvml=not no_nvml, nvml_period_ms=nvml_period_ms)
    try:
        result = profile_workload(workload, knobs, cfg, out=out)
    except (WorkloadError, ChildRefused, RunDirError, ValueError) as e:
        raise UserError(str(e)) from None
    report(result, quiet)
    exit_with(result.exit_code)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
