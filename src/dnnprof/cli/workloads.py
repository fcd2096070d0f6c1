"""``dnnprof workloads``: the built-in benchmark suite and the knobs every workload takes (no torch import)."""

from __future__ import annotations

import json

import typer

from dnnprof.cli import options as opt


def workloads(
    tiny: bool = typer.Option(True, "--tiny/--no-tiny", help="Include the -tiny CPU variants."),
    as_json: bool = opt.json_flag(),
) -> None:
    """List the workloads `dnnprof profile` runs, with their defaults, units and knobs."""
    from dnnprof.workloads.config import knob_rows
    from dnnprof.workloads.registry import registry_rows

    rows = registry_rows(include_tiny=tiny)
    knobs = knob_rows()
    if as_json:
        typer.echo(json.dumps({"workloads": rows, "knobs": knobs}, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="dnnprof workloads", title_justify="left")
    for col in ("name", "domain", "batch", "unit", "missing"):
        t.add_column(col, no_wrap=True)
    # The description gets what is left of the terminal width, cut with an ellipsis.
    width = max(12, console.width - sum(len(max((r[c] for r in rows), key=len, default="")) + 3
                                        for c in ("name", "domain", "batch_size", "unit", "missing")) - 4)
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=width)
    for r in rows:
        t.add_row(r["name"], r["domain"], r["batch_size"], r["unit"],
                  f"[red]{r['missing']}[/red]" if r["missing"] else "", r["description"])
    console.print(t)
    k = Table(title="knobs (dnnprof profile WORKLOAD --batch-size N --precision P …)", title_justify="left")
    for col in ("knob", "default", "choices"):
        k.add_column(col, overflow="fold")
    for r in knobs:
        k.add_row(r["knob"], r["default"], r["choices"])
    console.print(k)


def register(app: typer.Typer) -> None:
    app.command("workloads")(workloads)
