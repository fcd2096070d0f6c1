"""``dnnprof diff BASE NEW``: what changed between two runs (step time, GPU busy, families, layers, kernels,
findings), per step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError


def load_summary(path: Path, rank: int | None = None) -> dict[str, Any]:
    """The ``dnnprof.summary/1`` document of ``path``: a summary JSON as written by ``analyze --json``, a run
    directory (its summary.json, with throughput and memory), or anything ``dnnprof analyze`` reads."""
    if path.is_dir() and (path / "summary.json").is_file():
        path = path / "summary.json"
    if path.is_file() and path.suffix == ".json" and path.stat().st_size < 64 << 20:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            doc = None
        if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("dnnprof.summary/"):
            from dnnprof.analysis.diff import summary_problem

            problem = summary_problem(doc)
            if problem:
                raise UserError(f"{path}: a dnnprof summary that cannot be compared: {problem}")
            return doc
    from dnnprof.cli.sources import analysed

    return analysed(path, rank)[1]


def diff(
    base: Path = typer.Argument(..., help="The earlier run: a trace, run directory, saved profile or summary JSON.",
                                show_default=False),
    new: Path = typer.Argument(..., help="The later run, in any of the same forms.", show_default=False),
    json_out: Path | None = opt.json_out("dnnprof.diff/1"),
    top: int = opt.top(10),
    rank: int | None = opt.rank(),
    quiet: bool = opt.quiet(),
) -> None:
    """Compare two runs: step time, throughput, GPU busy, and the families, layers, kernels and findings that
    changed most, per step."""
    from dnnprof.analysis.diff import diff_summaries
    from dnnprof.model.outputs import OutputError, check_output_file

    if json_out is not None and str(json_out) != "-":
        try:
            check_output_file(json_out, option="--json", inputs=[base, new])
        except OutputError as e:
            raise UserError(str(e)) from None
    doc = diff_summaries(load_summary(base, rank), load_summary(new, rank), top=max(top, 20))
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        write_json(doc, json_out)
    if not quiet and str(json_out) != "-":
        from dnnprof.render.diff_table import render_diff

        render_diff(doc, top=top)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)
