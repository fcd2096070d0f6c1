"""``dnnprof analyze TRACE``: report on a trace you already have."""

from __future__ import annotations

from pathlib import Path

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError


def analyze(
    trace: Path = typer.Argument(..., help="Kineto/torch.profiler JSON(.gz), a folder of per-rank traces, a saved "
                                           "profile, a dnnprof run directory, an Nsight Systems SQLite export or "
                                           ".nsys-rep report, an Nsight Compute CSV, or an "
                                           "nvprof --csv CSV (--print-gpu-trace or --print-summary).", show_default=False),
    json_out: Path | None = opt.json_out("dnnprof.summary/1"),
    top: int = opt.top(15),
    save: Path | None = typer.Option(None, "--save", help="Save the canonical profile (Parquet) in this folder: a "
                                                           "new or empty one, or a profile saved earlier (replaced "
                                                           "atomically). Anything else is refused."),
    html: Path | None = typer.Option(None, "--html", help="Write the dashboard of `dnnprof view` here as one "
                                                           "self-contained file (data embedded, no network; the "
                                                           "printable report is one of its views). For an ncu file: "
                                                           "the printable counters report."),
    html_report: Path | None = typer.Option(None, "--html-report", help="Write the printable, script-free HTML "
                                                                         "report here (with a roofline chart when "
                                                                         "there are Nsight Compute counters)."),
    perfetto: Path | None = typer.Option(None, "--perfetto", help="Write a trace for ui.perfetto.dev here (.json or "
                                                                  ".json.gz), every rank: host ops, GPU streams "
                                                                  "named by layer, launch flows, steps, counter "
                                                                  "tracks."),
    rank: int | None = opt.rank(),
    quiet: bool = opt.quiet(),
    workers: int | None = typer.Option(None, "--workers", show_default=False,
                                       help="For a folder of per-rank traces: read the ranks in this many worker "
                                            "processes (each rank read once to Parquet, cached under "
                                            "$XDG_CACHE_HOME/dnnprof/ranks) [default: one per core, at most one "
                                            "per rank; 1: one after another in this process]. One big plain "
                                            "trace is read by one process per core, at most 8, and its tables "
                                            "filled by as many threads (DNNPROF_READ_WORKERS=N sets how many)."),
    dask: str | None = typer.Option(None, "--dask", show_default=False,
                                    help="For a folder of per-rank traces: read the ranks on a Dask cluster, "
                                         "tcp://HOST:8786 (its scheduler), or local:N (a local cluster of N "
                                         "processes). Needs dnnprof[scale]; see docs/scale.md."),
    force: bool = typer.Option(False, "--force", help="--save may also replace a profile of another dnnprof "
                                                      "version. Never a file or a folder holding anything dnnprof "
                                                      "did not write."),
) -> None:
    """Kernels, layers, phases, GPU busy/idle and findings of an existing trace."""
    from dnnprof.cli.blas import load_numpy_with_one_blas_thread

    load_numpy_with_one_blas_thread()
    from dnnprof.cli.progress import reading_progress
    from dnnprof.cli.sources import analysed
    from dnnprof.ingest.detect import kind_of
    from dnnprof.ingest.errors import TraceError
    from dnnprof.model.outputs import OutputError, write_text_atomic

    try:
        kind = kind_of(trace)
    except TraceError as e:
        raise UserError(str(e)) from None
    try:
        check_outputs(trace, json_out=json_out, html=html, perfetto=perfetto, save=save, force=force,
                      html_report=html_report)
    except OutputError as e:
        raise UserError(str(e)) from None
    if kind in ("ncu-csv", "ncu-rep"):
        if perfetto is not None or save is not None:
            raise UserError(f"{trace}: an Nsight Compute file has no timeline: --perfetto and --save need a trace, "
                            "run directory or saved profile (--json and --html work)")
        _analyze_ncu(trace, json_out, top, quiet, html or html_report)
        if html is not None and html_report is not None:
            _analyze_ncu(trace, None, top, True, html_report)
        return
    if kind == "nvprof-summary":
        if perfetto is not None or save is not None or html is not None or html_report is not None:
            raise UserError(f"{trace}: an nvprof --print-summary CSV has no timeline: --perfetto, --save and --html "
                            "need a trace (nvprof --csv --print-gpu-trace; --json works)")
        from dnnprof.cli.nvprof_summary import report_nvprof_summary

        report_nvprof_summary(trace, json_out, top, quiet)
        return
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: give at least 1 (1 reads the ranks one after another in this process)")
    folder = _rank_files(trace) if kind == "kineto-dir" else []
    if len(folder) >= 2:
        analysis, doc = _analysed_folder(trace, folder, rank, workers, dask,
                                         every_rank=save is not None or perfetto is not None or html is not None)
    else:
        with reading_progress(quiet):
            analysis, doc = analysed(trace, rank, kind)
    try:
        if save is not None:
            analysis.profile.save(save, force=force)
        if json_out is not None:
            from dnnprof.render.json_out import write_json

            write_json(doc, json_out)
        if html is not None or html_report is not None:
            from dnnprof.render.html_report import render_html

            printable = render_html(doc, top=max(top, 30))
            if html_report is not None:
                write_text_atomic(html_report, printable, option="--html-report")
            if html is not None:
                from dnnprof.serve.static_file import view_html

                write_text_atomic(html, view_html(analysis, doc, trace, report_html=printable), option="--html")
        if perfetto is not None:
            from dnnprof.render.perfetto import write_perfetto_trace

            write_perfetto_trace(analysis.profile, perfetto, attribution=analysis.attribution)
    except OutputError as e:
        raise UserError(str(e)) from None
    if not quiet and str(json_out) != "-":
        from dnnprof.render.terminal import render

        render(doc, top=top)


def check_outputs(source: Path, *, json_out: Path | None = None, html: Path | None = None,
                  perfetto: Path | None = None, save: Path | None = None, force: bool = False,
                  html_report: Path | None = None) -> None:
    """Refuse, before any work, an output that would destroy what dnnprof did not write (raises OutputError)."""
    from dnnprof.model.outputs import check_output_file
    from dnnprof.model.profile import check_save_target

    for option, path in (("--json", json_out), ("--html", html), ("--perfetto", perfetto),
                         ("--html-report", html_report)):
        if path is not None and str(path) != "-":
            check_output_file(path, option=option, inputs=[source])
    if save is not None:
        check_save_target(save, force=force)


def _rank_files(folder: Path) -> list[Path]:
    from dnnprof.ingest.detect import trace_files

    return trace_files(folder)


def _analysed_folder(folder: Path, files: list[Path], rank: int | None, workers: int | None, dask: str | None,
                     every_rank: bool) -> tuple[object, dict[str, object]]:
    """A folder of per-rank traces mapped over workers and reduced (``runs.rank_folder``); errors as one line."""
    from dnnprof.ingest.errors import TraceError
    from dnnprof.model.outputs import OutputError
    from dnnprof.runs.rank_folder import ScaleError, report_folder
    from dnnprof.runs.report import ReportError

    try:
        analysis, doc, _ = report_folder(folder, files, rank, workers=workers, dask=dask, every_rank=every_rank)
    except (ScaleError, TraceError, ReportError, OutputError) as e:
        raise UserError(str(e)) from None
    return analysis, doc


def _analyze_ncu(path: Path, json_out: Path | None, top: int, quiet: bool, html: Path | None) -> None:
    try:
        from dnnprof.cli.counters import report_ncu_file
    except ImportError:
        raise UserError(f"{path}: Nsight Compute files need the counters support of this build") from None
    report_ncu_file(path, json_out=json_out, top=top, quiet=quiet, html=html)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
