"""nvprof ``--csv --print-gpu-trace`` and ``--print-summary`` (hand-written fixtures in nvprof's documented layout, see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.detect import kind_of
from dnnprof.ingest.nvprof_csv import read_nvprof_csv
from dnnprof.ingest.nvprof_summary import read_nvprof_summary

TRACE = Path(__file__).parent / "data" / "nvprof_csv" / "gpu_trace.csv"
SUMMARY = TRACE.with_name("summary.csv")


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


def test_summary_csv_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kind_of(SUMMARY) == "nvprof-summary"
    out = tmp_path / "s.json"
    assert main(["analyze", str(SUMMARY), "--json", str(out)]) == 0, capsys.readouterr().err
    shown = capsys.readouterr().out
    assert "volta_sgemm_128x64_nn" in shown and "cudaLaunchKernel" in shown
    doc = json.loads(out.read_text())
    assert doc["schema"] == "dnnprof.nvprof-summary/1"
    gpu, api = doc["gpu_activities"], doc["api_calls"]
    assert [g["kind"] for g in gpu] == ["kernel", "kernel", "memcpy", "memset"]
    assert gpu[0]["family"] == "gemm" and gpu[1]["short_name"] == "vectorized_elementwise_kernel"
    assert sum(g["total_us"] for g in gpu) == pytest.approx(2000.0)
    assert sum(g["calls"] for g in gpu) == 36
    assert sum(a["total_us"] for a in api) == pytest.approx(278_333.0)
    # each column scaled with its own unit: Time ms, Avg/Min us, Max ms
    assert (gpu[0]["total_us"], gpu[0]["avg_us"], gpu[0]["min_us"], gpu[0]["max_us"]) == (1200.0, 120.0, 100.5, 150.0)


@pytest.mark.parametrize(("unit", "scale"), [("s", 1e6), ("ms", 1e3), ("us", 1.0), ("ns", 1e-3)])
def test_summary_units(tmp_path: Path, unit: str, scale: float) -> None:
    f = tmp_path / "s.csv"
    f.write_text(f'"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"\n"","%","{unit}","","{unit}","{unit}",'
                 f'"{unit}",""\n"GPU activities",100.0,2.5,2,1.25,1.0,1.5,"k"\n')
    r = read_nvprof_summary(f).gpu_activities[0]
    assert (r.total_us, r.avg_us, r.min_us, r.max_us) == pytest.approx((2.5 * scale, 1.25 * scale, scale, 1.5 * scale))


_HEAD = '"Type","Time(%)","Time","Calls","Avg","Min","Max","Name"\n'
_ROW = '"GPU activities",90.0,1.0,2,500.0,400.0,0.6,"volta_sgemm"\n'


@pytest.mark.parametrize(("text", "says"), [
    (_HEAD + _ROW, "no units row"),
    ('"Type","Time(%)","Time","Calls","Name"\n,%,ms,,\n"GPU activities",90.0,1.0,2,"k"\n', "columns"),
    (_HEAD + ',%,ms,,us,us,ms,\n"GPU activities",90.0,1.0,2,"k"\n', "columns"),
    (_HEAD + ',%,ms,,us,us,furlong,\n' + _ROW, "not a time unit"),
    (_HEAD + ',%,ms,,us,us,ms,\n' + _ROW.replace("1.0", "lots"), "not a number"),
    (_HEAD + ',%,ms,,us,us,ms,\n' + _ROW.replace("GPU activities", "Other"), "neither"),
])
def test_malformed_summary_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                       says: str) -> None:
    f = tmp_path / "summary.csv"
    f.write_text("==7== Profiling result:\n" + text)
    assert main(["analyze", str(f), "--quiet", "--json", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "o.json").exists()


def test_summary_has_no_timeline_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SUMMARY), "--perfetto", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--print-gpu-trace" in err[0]
