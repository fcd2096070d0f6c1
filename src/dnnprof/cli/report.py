"""``dnnprof report SWEEP_DIR``: the four answers of a sweep as report.md, report.html and report.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.render.safe_text import clean

SWEEP_FILE = "sweep.json"
#: What ``write_reports`` puts in its folder; a folder holding only these is an earlier report, rewritten.
REPORT_ENTRIES = frozenset({"report.md", "report.html", "report.json", "plots"})


def load_sweep(sweep_dir: Path) -> dict:
    """The ``dnnprof.sweep/1`` document of a sweep directory (UserError when there is none)."""
    path = sweep_dir / SWEEP_FILE if sweep_dir.is_dir() else sweep_dir
    if not path.exists():
        raise UserError(f"{sweep_dir}: no {SWEEP_FILE} here (dnnprof report reads a directory written by "
                        "dnnprof sweep)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "dnnprof.sweep/1":
        raise UserError(f"{path}: not a dnnprof.sweep/1 document")
    from dnnprof.model.sweep_doc import SweepDocError, check_sweep

    try:
        check_sweep(doc)
    except SweepDocError as e:
        raise UserError(f"{path}: not a valid dnnprof.sweep/1 document ({e})") from None
    return doc


def write_reports(sweep_dir: Path, out: Path | None = None) -> list[Path]:
    """Write report.md (+ plots/*.svg), report.html and report.json; return their paths."""
    from dnnprof.analysis.sweep_report import sweep_report
    from dnnprof.model.outputs import OutputError, write_text_atomic
    from dnnprof.render.json_out import write_json
    from dnnprof.render.sweep_html import render_html
    from dnnprof.render.sweep_md import render_markdown
    from dnnprof.render.sweep_svg import sweep_plots

    doc = load_sweep(sweep_dir)
    folder = out or (sweep_dir if sweep_dir.is_dir() else sweep_dir.parent)
    check_report_folder(folder)
    report = sweep_report(doc)
    plots = sweep_plots(report)
    files = {}
    try:
        for name, (_title, svg) in plots.items():
            write_text_atomic(folder / "plots" / f"{name}.svg", svg, option="--out")
            files[name] = f"plots/{name}.svg"
        md, html, js = folder / "report.md", folder / "report.html", folder / "report.json"
        write_text_atomic(md, render_markdown(report, files), option="--out")
        write_text_atomic(html, render_html(report, plots), option="--out")
        write_json(report, js, option="--out")
    except OutputError as e:
        raise UserError(str(e)) from None
    return [md, html, js]


def check_report_folder(folder: Path) -> None:
    """Refuse (UserError) a report folder that is a file, or that holds other things than a sweep or an earlier
    report: its report.md/.html/.json and plots/ would be written over, or mixed into, someone's files."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: --out is a file; give a folder for the reports")
    if not folder.is_dir() or (folder / SWEEP_FILE).is_file():
        return
    theirs = sorted(p.name for p in folder.iterdir() if p.name not in REPORT_ENTRIES)
    if theirs:
        shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        raise UserError(f"{folder}: --out holds files that are not a dnnprof report ({shown}); use a new or empty "
                        "folder, or the sweep directory")


def report(
    sweep_dir: Path = typer.Argument(..., help="A directory written by dnnprof sweep.", show_default=False),
    # A folder for the reports, not a run directory like `run`/`profile --out`.
    out: Path | None = typer.Option(None, "--out", help="Folder for the reports (default: the sweep directory): "
                                                        "new, empty, or one holding an earlier report."),
    quiet: bool = opt.quiet(),
) -> None:
    """Answer the four questions of a sweep: bottlenecks, batch size, precision, training vs inference."""
    paths = write_reports(sweep_dir, out)
    if not quiet:
        from dnnprof.analysis.sweep_report import sweep_report

        ans = sweep_report(load_sweep(sweep_dir))["answers"]
        for title, key in (("Bottlenecks", "bottlenecks"), ("Batch size", "batch_size"), ("Precision", "precision"),
                           ("Training vs inference", "modes")):
            print(f"{title}:")
            for s in ans[key]:
                print(f"  - {clean(s)}")
    for p in paths:
        print(f"dnnprof report: wrote {p}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
