"""``dnnprof query RUN… "SQL"``: SQL (DuckDB) over the tables of one or several runs; schemas in docs/query.md."""

from __future__ import annotations

from pathlib import Path

import typer

from dnnprof.cli.errors import UserError


def run_labels(paths: list[Path]) -> list[str]:
    """A label per input for the ``run`` column: its name (a run directory's ``gpt2-20261126T031427Z``), made
    unique with ``-2``, ``-3`` … where two inputs share a name."""
    labels: list[str] = []
    for p in paths:
        base = p.resolve().name or str(p)
        for suffix in (".json.gz", ".json", ".gz", ".sqlite"):
            if base.endswith(suffix) and len(base) > len(suffix):
                base = base[: -len(suffix)]
                break
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def query(
    args: list[str] = typer.Argument(..., help="One or more runs (run directories, saved profiles, traces: "
                                               "anything dnnprof analyze reads), then the SQL.",
                                     metavar="RUN... SQL", show_default=False),
    csv_out: bool = typer.Option(False, "--csv", help="Print the rows as CSV."),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as a JSON list of records."),
    max_rows: int = typer.Option(50, "--max-rows", min=1, help="Rows to show in the terminal table."),
) -> None:
    """SQL over the tables of one or several runs: kernels, ops, steps, memcpy, samples … (docs/query.md).

    Each table holds every run's rows, told apart by its run column; name_id columns are also decoded as name.
    Example: dnnprof query runs/a runs/b "SELECT run, name, sum(dur_ns)/1e6 AS ms FROM kernels GROUP BY ALL
    ORDER BY ms DESC LIMIT 10"
    """
    from dnnprof.cli.sources import open_source

    if len(args) < 2:
        raise UserError('dnnprof query needs at least one run and the SQL: dnnprof query RUN... "SELECT ..."')
    if csv_out and json_out:
        raise UserError("--csv and --json: choose one")
    *inputs, sql = args
    if not sql.strip():
        raise UserError("the SQL is empty")
    paths = [Path(a) for a in inputs]
    if Path(sql).exists() and not any(ch.isspace() for ch in sql.strip()):
        raise UserError(f"the last argument must be the SQL, and {sql!r} is a file: dnnprof query RUN... \"SELECT ...\"")
    runs = [(label, str(p), open_source(p)) for label, p in zip(run_labels(paths), paths, strict=True)]
    import duckdb

    from dnnprof.model.query import connect

    con = connect(runs)
    try:
        rel = con.sql(sql)
        if rel is None:
            raise UserError("the SQL returns no rows (dnnprof query runs SELECT-like statements)")
        columns = list(rel.columns)
        rows = rel.fetchall()
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"SQL error: {first} (tables and columns: docs/query.md)") from None
    if csv_out:
        from dnnprof.render.query_table import write_csv

        write_csv(columns, rows)
    elif json_out:
        from dnnprof.render.json_out import write_json
        from dnnprof.render.query_table import records

        write_json(records(columns, rows), "-")
    else:
        from dnnprof.render.query_table import render_rows

        render_rows(columns, rows[:max_rows], total=len(rows))


def register(app: typer.Typer) -> None:
    app.command("query")(query)
