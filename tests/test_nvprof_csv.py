"""nvprof ``--csv --print-gpu-trace`` (a hand-written fixture in nvprof's documented layout, see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.detect import kind_of
from dnnprof.ingest.nvprof_csv import read_nvprof_csv

TRACE = Path(__file__).parent / "data" / "nvprof_csv" / "gpu_trace.csv"


def test_gpu_trace_units_from_the_units_row() -> None:
    assert kind_of(TRACE) == "nvprof-csv"
    p = read_nvprof_csv(TRACE)
    assert p.self_check() == []
    k = p.tables["kernels"]
    assert k["start_ns"].tolist() == [1_010_000, 1_150_000] and k["dur_ns"].tolist() == [120_250, 80_000]
    assert k["grid_x"].tolist() == [256, 128] and k["shared_memory_bytes"].tolist() == [16 * 1024 + 1024, 0]
    m = p.tables["memcpy"]
    assert m["bytes"].tolist() == [64 * 1024, 512] and m["kind"].tolist() == [1, 2]
    assert p.tables["memset"]["bytes"].tolist() == [4096]
    assert p.devices[0].name == "Tesla V100-SXM2-16GB"


def test_analyze_nvprof(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert main(["analyze", str(TRACE), "--json", str(out), "--quiet"]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert sum(x["calls"] for x in doc["kernels"]) == 2
    assert sum(round(x["total_us"] * 1000) for x in doc["kernels"]) == 200_250


def test_summary_csv_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "summary.csv"
    f.write_text('==7== Profiling result:\n"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"\n'
                 ',%,ms,,us,us,ms,\n"GPU activities",90.0,1.0,2,500.0,400.0,0.6,"volta_sgemm"\n')
    assert main(["analyze", str(f), "--quiet", "--json", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--print-gpu-trace" in err[0]
