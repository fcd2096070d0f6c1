"""``dnnprof query RUN... SQL``: DuckDB over the tables of several inputs, told apart by ``run``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.model.query import query_schema_markdown
from dnnprof.model.schema import STEP_SOURCES

DATA = Path(__file__).parent / "data"
CPU = DATA / "cpu_mlp_train" / "trace.json.gz"
GPU = DATA / "h100_recorded" / "cnn_train_fp32.json.gz"


def test_two_runs_told_apart_by_run_as_csv(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["query", str(CPU), str(GPU), "SELECT run, count(*) AS n FROM kernels GROUP BY run ORDER BY run",
               "--csv"])
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["run"] for r in rows] == ["cnn_train_fp32"]  # the CPU trace has no kernels
    from dnnprof.ingest.detect import open_profile

    assert int(rows[0]["n"]) == open_profile(GPU).rows("kernels")


def test_names_enumerations_and_row_links_decoded_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("SELECT k.name AS kernel, o.name AS op FROM kernels k JOIN ops o ON o.run = k.run AND o.row = k.op_row "
           "WHERE k.op_row >= 0 LIMIT 3")
    assert main(["query", str(GPU), sql, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and all(r["kernel"] and r["op"] for r in rows)
    assert main(["query", str(GPU), "SELECT DISTINCT source, source_label FROM steps", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found and all(STEP_SOURCES[r["source"]] == r["source_label"] for r in found)


def test_same_name_twice_gets_distinct_labels_and_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(CPU), str(CPU), "SELECT run, count(*) AS n FROM ops GROUP BY run ORDER BY run",
                 "--max-rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "trace" in out and "2 rows (first 1 shown" in out


@pytest.mark.parametrize("sql,message", [
    ("SELEC * FROM kernels", "SQL error: Parser Error: syntax error"),
    ("SELECT nope FROM kernels", "SQL error: Binder Error"),
    ("SELECT * FROM nosuchtable", "SQL error: Catalog Error"),
])
def test_bad_sql_is_one_line_exit_2(sql: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(CPU), sql]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dnnprof: error: {message}") and err.count("\n") == 1


def test_bad_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "SELECT 1"]) == 2
    assert "at least one run and the SQL" in capsys.readouterr().err
    assert main(["query", str(tmp_path / "nope"), "SELECT 1"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["query", str(CPU), str(CPU)]) == 2
    assert "the last argument must be the SQL" in capsys.readouterr().err


def test_docs_query_md_lists_the_views() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "query.md").read_text()
    assert doc.endswith(query_schema_markdown()), "regenerate the Views section: python -m dnnprof.model.query"
