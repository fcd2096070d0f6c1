"""Hostile Nsight Compute CSVs (the real H200 raw page, one cell changed): unknown values or one clear line."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.ncu_csv import NcuFormatError, read_ncu_csv

RAW = Path(__file__).parent / "data" / "ncu_gpt2_h200" / "ncu_raw.csv"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"
FFMA_PEAK = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"


def _rows() -> list[list[str]]:
    lines = [ln for ln in RAW.read_text().splitlines() if not ln.startswith("==")]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def _with(tmp_path: Path, column: str, value: str, row: int = 2) -> Path:
    """The raw page with one cell of the first launch (row 2, after the header and units) replaced."""
    rows = _rows()
    rows[row][rows[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows(rows)
    path = tmp_path / "ncu.csv"
    path.write_text(out.getvalue())
    return path


def _analyze(tmp_path: Path, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], dict]:
    js = tmp_path / "c.json"
    rc = main(["analyze", str(path), "--quiet", "--json", str(js), "--html", str(tmp_path / "c.html")])
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err, json.loads(js.read_text()) if rc == 0 else {}


def test_a_field_over_128_kib_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "k" * 200_000
    rc, _, doc = _analyze(tmp_path, _with(tmp_path, "Kernel Name", name), capsys)
    assert rc == 0 and doc["kernels"]
    assert read_ncu_csv(_with(tmp_path, "Kernel Name", name)).kernel_name[0] == name
    assert csv.field_size_limit() == 131072  # the process-wide limit is left as it was


def test_a_corrupt_gzip_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = gzip.compress(RAW.read_bytes())
    mid = len(g) // 2
    path = tmp_path / "ncu.csv.gz"
    path.write_bytes(g[:mid] + bytes(b ^ 0x55 for b in g[mid:mid + 64]) + g[mid + 64:])
    with pytest.raises(NcuFormatError, match="corrupt gzip"):
        read_ncu_csv(path)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0]


def test_a_launch_id_beyond_int64_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _with(tmp_path, "ID", "99999999999999999999")
    rc, err, _ = _analyze(tmp_path, path, capsys)
    assert rc == 2 and len(err) == 1 and "launch ID '99999999999999999999' is out of range" in err[0]


@pytest.mark.parametrize(("column", "value"), [("Grid Size", "(99999999999999999999, 1, 1)"),
                                               ("launch__grid_dim_x", "1e30")])
def test_a_grid_beyond_int64_is_unknown_and_the_other_source_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str,
                                        value: str) -> None:
    """The grid is in two places (the Grid Size column and launch__grid_dim_*): the one out of range is unknown and
    the other gives the value."""
    path = _with(tmp_path, column, value)
    t = read_ncu_csv(path)
    assert np.array_equal(t.grid, read_ncu_csv(RAW).grid)
    assert _analyze(tmp_path, path, capsys)[0] == 0


def test_device_and_stream_beyond_their_types_are_unknown(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    t = read_ncu_csv(_with(tmp_path, "Device", "70000"))
    assert t.device[0] == -1 and t.device[1] == 0
    t = read_ncu_csv(_with(tmp_path, "Stream", "99999999999999999999"))
    assert t.stream[0] == -1 and t.stream[1] >= 0
    assert _analyze(tmp_path, _with(tmp_path, "Device", "70000"), capsys)[0] == 0


@pytest.mark.parametrize(("column", "value"), [("gpu__time_duration.sum", "inf"), (FFMA, "1e400"),
                                               (FFMA, "-inf"), (FFMA_PEAK, "1e400"),
                                               ("dram__bytes.sum.per_second", "1e308")])
def test_infinite_counters_are_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str,
                                       value: str) -> None:
    path = _with(tmp_path, column, value)
    t = read_ncu_csv(path)
    assert math.isnan(t.metric(column)[0]) if column != "dram__bytes.sum.per_second" else True
    assert all(np.isfinite(v[~np.isnan(v)]).all() for v in t.metrics.values())
    rc, err, doc = _analyze(tmp_path, path, capsys)
    assert rc == 0, err
    assert "NaN" not in json.dumps(doc) and "Infinity" not in json.dumps(doc)


def test_short_rows_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows()
    rows[3] = rows[3][:5]
    path = tmp_path / "ncu.csv"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows(rows)
    path.write_text(out.getvalue())
    rc, err, _ = _analyze(tmp_path, path, capsys)
    assert rc == 2 and len(err) == 1 and "fields (truncated file?)" in err[0]


def test_a_long_metric_label_is_read_in_linear_time(tmp_path: Path) -> None:
    """A 200 kB label of letters made the metric-name search quadratic (minutes); it must take well under 1 s."""
    import time

    details = RAW.parent / "ncu_details.csv"
    lines = [ln for ln in details.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    rows[1][rows[0].index("Metric Name")] = "x" * 200_000
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows(rows)
    path = tmp_path / "details.csv"
    path.write_text(out.getvalue())
    start = time.perf_counter()
    t = read_ncu_csv(path)
    assert time.perf_counter() - start < 2.0
    assert any(k.startswith("label:") and k.endswith("x" * 10) for k in t.metrics)


def test_launch_columns_without_metrics_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows()
    keep = [j for j, name in enumerate(rows[0]) if name in ("ID", "Kernel Name", "Grid Size", "Block Size", "Device")]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows([[r[j] for j in keep] for r in rows])
    path = tmp_path / "ncu.csv"
    path.write_text(out.getvalue())
    rc, err, _ = _analyze(tmp_path, path, capsys)
    assert rc == 2 and len(err) == 1 and "no metric values, only launch columns" in err[0]
