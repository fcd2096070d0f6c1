"""Nsight Compute results: ``dnnprof counters RUN`` and ``dnnprof analyze ncu.csv`` (an ncu file on its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.render.safe_text import clean


def ncu_summary(path: Path) -> dict[str, Any]:
    """The ``dnnprof.counters/1`` document of an ncu CSV/report (UserError when it cannot be read or is empty)."""
    from dnnprof.analysis.ncu_summary import ncu_document
    from dnnprof.ingest.ncu_csv import NcuFormatError, read_ncu

    try:
        table = read_ncu(path)
    except NcuFormatError as e:
        raise UserError(str(e)) from None
    if not len(table):
        raise UserError(f"{path}: the Nsight Compute file holds no profiled kernel")
    return ncu_document(table, path)


def report_ncu_file(path: Path, json_out: Path | None, top: int, quiet: bool, html: Path | None = None) -> None:
    """Print (and optionally write as JSON and as an HTML page with the roofline) the per-kernel counters table
    of an ncu CSV/report."""
    doc = ncu_summary(path)
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        write_json(doc, json_out)
    if html is not None:
        from dnnprof.model.outputs import write_text_atomic
        from dnnprof.render.html_report import render_counters_html

        write_text_atomic(html, render_counters_html(doc, top=max(top, 30)), option="--html")
    if not quiet and str(json_out) != "-":
        from dnnprof.render.counters_table import render_counters

        render_counters(doc, top=top)


def counters(
    run: Path = typer.Argument(..., help="A dnnprof run directory (from `dnnprof run` or `dnnprof profile`).",
                               show_default=False),
    json_out: Path | None = opt.json_out("updated dnnprof.summary/1"),
    top: int = opt.top(15),
) -> None:
    """Nsight Compute counters for an existing run: re-run its command under ncu for one steady step (only the
    kernel signatures that cover most of the GPU time), join them onto every kernel, update the run."""
    import json
    import os
    import sys

    from dnnprof.analysis.counters_join import join_counters
    from dnnprof.cli.sources import run_extras
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.model.profile import Profile, ProfileError
    from dnnprof.render.json_out import write_json
    from dnnprof.runs.counters_pass import counters_pass
    from dnnprof.runs.report import report
    from dnnprof.runs.session import child_env

    meta_path = run / "meta.json"
    if not meta_path.is_file() or not (run / "profile").is_dir():
        raise UserError(f"{run}: not a dnnprof run directory (no meta.json and profile/)")
    if json_out is not None and str(json_out) != "-":
        from dnnprof.model.outputs import OutputError, check_output_file

        try:  # not over a file of the run (its meta.json, summary.json) nor a folder
            check_output_file(json_out, option="--json", inputs=[run])
        except OutputError as e:
            raise UserError(str(e)) from None
    meta = json.loads(meta_path.read_text())
    if not meta.get("complete"):
        raise UserError(f"{run}: the run is incomplete ({meta.get('reason') or meta.get('status')}); counters need a "
                        "complete run")
    try:
        profile = Profile.load(run / "profile")
        config = CollectorConfig.load(run)
    except (ProfileError, OSError, ValueError) as e:
        raise UserError(f"{run}: {e}") from None
    timed = [int(s) for s in (meta.get("capture") or {}).get("timed_steps") or []]
    step = timed[len(timed) // 2] if timed else None

    def join(p: object, table: object) -> object:
        return join_counters(p, table, steps=[step] if step is not None else None)  # type: ignore[arg-type]

    cwd = meta.get("cwd") or os.getcwd()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = counters_pass(run, list(meta["command"]), config, profile, timed, child_env, join,
                               say=lambda m: print(f"dnnprof: counters: {clean(m)}", file=sys.stderr, flush=True))
    finally:
        os.chdir(old)
    meta.setdefault("capture", {})["counters"] = result
    if result.get("status") != "ok":
        write_json(meta, meta_path)
        raise UserError(f"{run}: counters: {result.get('message')}", exit_code=1)
    profile.save(run / "profile")
    _, doc = report(profile, extras=run_extras(run))  # the run's extras (throughput, samples, memory, …)
    write_json(doc, run / "summary.json")
    write_json(meta, meta_path)
    if json_out is not None:
        write_json(doc, json_out)
    print(f"dnnprof: counters for step {result.get('step')}: {result.get('matched_kernels')} kernels matched, "
          f"{result.get('covered_gpu_time_pct')}% of its GPU time covered ({result.get('wall_s')} s under ncu)")
    from dnnprof.render.terminal import render

    render(doc, top=top)


def register(app: typer.Typer) -> None:
    app.command("counters")(counters)
