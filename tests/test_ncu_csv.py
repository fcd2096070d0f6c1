"""Nsight Compute CSV/report parsing on real H200 output (tests/data/ncu_gpt2_h200) and on crafted bad input."""

from __future__ import annotations

import csv
import gzip
import io
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest import ncu_csv
from dnnprof.ingest.ncu_csv import (
    NcuFormatError,
    NcuPermissionError,
    NcuTruncatedError,
    normalize_unit,
    parse_ncu_csv,
    read_ncu,
    read_ncu_csv,
    read_ncu_report,
)

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h200"
RAW = DATA / "ncu_raw.csv"
DETAILS = DATA / "ncu_details.csv"


def _reference_rows(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """Plain csv-module reading of the raw page: the simple reference the parser is checked against."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(lines))
    return rows[0], rows[1], rows[2:]


def test_raw_page_shape_and_launch_columns() -> None:
    t = read_ncu_csv(RAW)
    assert t.page == "raw" and len(t) == 41
    assert t.launch_id[:3].tolist() == [0, 1, 2]
    assert t.kernel_name[0].startswith("void native::vectorized_gather_kernel<16, long>")
    assert t.grid[0].tolist() == [4096, 1, 1] and t.block[0].tolist() == [192, 1, 1]
    nvjet = next(i for i, n in enumerate(t.kernel_name) if n.startswith("nvjet_sm90_tst_192x192"))
    assert t.grid[nvjet].tolist() == [2, 66, 1] and t.block[nvjet].tolist() == [384, 1, 1]
    assert t.registers_per_thread[nvjet] == 168
    assert t.dynamic_smem_bytes[nvjet] == 188_604 and t.static_smem_bytes[nvjet] == 0
    assert t.smem_bytes[nvjet] == 188_604  # the driver's 1 KB is not part of it
    assert "step3" in t.nvtx[0]
    assert set(t.text["device__attribute_display_name"]) == {"NVIDIA H200"}


def test_raw_page_numbers_match_a_plain_reading() -> None:
    t = read_ncu_csv(RAW)
    header, _units, rows = _reference_rows(RAW)
    for name in ("gpu__time_duration.sum", "dram__bytes.sum.per_second", "launch__grid_size",
                 "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "launch__waves_per_multiprocessor"):
        j = header.index(name)
        expect = [float(r[j].replace(",", "")) for r in rows]
        np.testing.assert_allclose(t.metric(name), expect, rtol=0, atol=0)
    assert t.metric("gpu__time_duration.sum")[0] == 8352.0  # "8,352" ns
    assert t.metric("dram__bytes.sum.peak_sustained")[0] == 1504.0  # "1,504"
    assert t.units["gpu__time_duration.sum"] == "ns" and t.units["sm__cycles_elapsed.avg.per_second"] == "hz"
    assert t.units["dram__bytes.sum.per_second"] == "byte/s"
    assert np.isnan(t.metric("not__a_metric.sum")).all() and not t.has("not__a_metric.sum")


def test_gzipped_file_and_read_ncu_dispatch(tmp_path: Path) -> None:
    gz = tmp_path / "raw.csv.gz"
    gz.write_bytes(gzip.compress(RAW.read_bytes()))
    a, b = read_ncu(gz), read_ncu_csv(RAW)
    assert len(a) == len(b)
    np.testing.assert_array_equal(a.metric("gpu__time_duration.sum"), b.metric("gpu__time_duration.sum"))


def test_details_page_labels_rules_and_ragged_rows() -> None:
    text = DETAILS.read_text()
    assert any(len(r) == 16 for r in csv.reader(io.StringIO(text)))  # metric rows end after an empty Rule Name
    assert any(len(r) == 20 for r in csv.reader(io.StringIO(text)))  # rule rows carry all 20 fields
    t = read_ncu_csv(DETAILS)
    raw = read_ncu_csv(RAW)
    assert t.page == "details" and t.launch_id.tolist() == [0, 10, 14]
    for name in ("gpu__time_duration.sum", "launch__registers_per_thread", "launch__waves_per_multiprocessor",
                 "launch__occupancy_limit_registers", "sm__maximum_warps_per_active_cycle_pct",
                 "dram__cycles_elapsed.avg.per_second"):
        np.testing.assert_array_equal(t.metric(name), raw.metric(name)[[0, 10, 14]])
    assert t.grid[1].tolist() == [2, 66, 1] and t.smem_bytes.tolist() == [0, 188_604, 134_144]
    assert t.units["launch__shared_mem_per_block_dynamic"] == "byte/block"
    assert t.text["launch__func_cache_config"].tolist() == ["CachePreferNone"] * 3
    assert [(r.launch_id, r.rule, r.kind) for r in t.rules] == [(0, "LaunchConfiguration", "OPT"),
                                                                (14, "TheoreticalOccupancy", "OPT")]
    assert t.rules[0].speedup_pct == 25.0 and t.rules[0].speedup_type == "global"


def _details(rows: list[tuple[str, str, str, str]], launch: str = "0") -> str:
    head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
            '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
            '"Rule Description","Estimated Speedup Type","Estimated Speedup"\n')
    lead = f'"{launch}","1","p","h","k(float *)","1","7","(256, 1, 1)","(1024, 2, 1)","0","9.0",'
    return head + "".join(lead + ",".join(f'"{x}"' for x in r) + ",\n" for r in rows)


def test_details_page_scaled_units_and_metric_names() -> None:
    text = _details([
        ("GPU Speed Of Light Throughput", "Duration", "usecond", "12.50"),
        ("GPU Speed Of Light Throughput", "SM Frequency", "Ghz", "1.98"),
        ("GPU Speed Of Light Throughput", "Memory Throughput", "%", "71.20"),
        ("Memory Workload Analysis", "Memory Throughput", "Tbyte/second", "3.41"),
        ("Launch Statistics", "Driver Shared Memory Per Block", "Kbyte/block", "1.02"),
        ("Launch Statistics", "Shared Memory Configuration Size", "Kbyte", "32.77"),
        ("Command line profiler metrics", "dram__bytes.sum", "Mbyte", "786.90"),
        ("Some Section", "Some Unknown Label", "", "7"),
    ])
    t = parse_ncu_csv(text)
    assert t.metric("gpu__time_duration.sum")[0] == pytest.approx(12_500.0)
    assert t.units["gpu__time_duration.sum"] == "ns"
    assert t.metric("gpc__cycles_elapsed.avg.per_second")[0] == pytest.approx(1.98e9)
    assert t.metric("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")[0] == pytest.approx(71.2)
    assert t.metric("dram__bytes.sum.per_second")[0] == pytest.approx(3.41e12)
    assert t.units["dram__bytes.sum.per_second"] == "byte/s"
    assert t.metric("launch__shared_mem_per_block_driver")[0] == pytest.approx(1020.0)
    assert t.metric("launch__shared_mem_config_size")[0] == pytest.approx(32_770.0)
    assert t.metric("dram__bytes.sum")[0] == pytest.approx(786.9e6)
    assert t.metric("label:Some Section/Some Unknown Label")[0] == 7.0
    assert t.grid[0].tolist() == [1024, 2, 1]


@pytest.mark.parametrize(("unit", "base", "factor"), [
    ("ns", "ns", 1.0), ("usecond", "ns", 1e3), ("msecond", "ns", 1e6), ("second", "ns", 1e9),
    ("byte", "byte", 1.0), ("Kbyte", "byte", 1e3), ("Mbyte", "byte", 1e6), ("Gbyte", "byte", 1e9), ("KB", "byte", 1e3),
    ("Kbyte/block", "byte/block", 1e3), ("byte/s", "byte/s", 1.0), ("Gbyte/second", "byte/s", 1e9),
    ("Mbyte/usecond", "byte/s", 1e12), ("cycle/nsecond", "hz", 1e9), ("cycle/usecond", "hz", 1e6),
    ("hz", "hz", 1.0), ("Mhz", "hz", 1e6), ("Ghz", "hz", 1e9), ("%", "%", 1.0), ("inst/cycle", "inst/cycle", 1.0),
    ("Kinst", "inst", 1e3), ("Msector", "sector", 1e6), ("register/thread", "register/thread", 1.0), ("", "", 1.0),
])
def test_normalize_unit(unit: str, base: str, factor: float) -> None:
    assert normalize_unit(unit) == (base, pytest.approx(factor))


def test_european_number_format() -> None:
    text = ('"ID","Kernel Name","Grid Size","Block Size","gpu__time_duration.sum","dram__bytes.sum"\n'
            '"","","","","ns","byte"\n"0","k","(1, 1, 1)","(32, 1, 1)","1.234,5","2.048.000,00"\n')
    t = parse_ncu_csv(text)
    assert t.metric("gpu__time_duration.sum")[0] == 1234.5 and t.metric("dram__bytes.sum")[0] == 2_048_000.0


def test_missing_values_are_nan_and_text_is_kept() -> None:
    text = ('"ID","Kernel Name","gpu__time_duration.sum","launch__func_cache_config"\n'
            '"","","ns",""\n"0","k","n/a","CachePreferL1"\n"1","k","1,000",""\n')
    t = parse_ncu_csv(text)
    assert math.isnan(t.metric("gpu__time_duration.sum")[0]) and t.metric("gpu__time_duration.sum")[1] == 1000
    assert t.text["launch__func_cache_config"].tolist() == ["CachePreferL1", ""]
    assert t.grid.tolist() == [[-1, -1, -1]] * 2 and t.registers_per_thread.tolist() == [-1, -1]


# --- bad input -----------------------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NcuFormatError, match="no such file"):
        read_ncu_csv(tmp_path / "nope.csv")


def test_not_an_ncu_csv(tmp_path: Path) -> None:
    p = tmp_path / "other.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(NcuFormatError, match="not an Nsight Compute CSV") as e:
        read_ncu_csv(p)
    assert str(p) in str(e.value)
    with pytest.raises(NcuFormatError, match="not an Nsight Compute CSV"):
        parse_ncu_csv("")


def test_no_kernels_profiled_output() -> None:
    with pytest.raises(NcuFormatError, match="no kernels were profiled"):
        parse_ncu_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")


def test_permission_error_names_the_fix(tmp_path: Path) -> None:
    p = tmp_path / "perm.csv"
    p.write_text("==PROF== Connected to process 42 (python)\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                 "permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    with pytest.raises(NcuPermissionError) as e:
        read_ncu_csv(p)
    assert isinstance(e.value, ValueError)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in str(e.value) and "CAP_PERFMON" in str(e.value)


def test_truncated_raw_page(tmp_path: Path) -> None:
    text = RAW.read_text()
    p = tmp_path / "cut.csv"
    p.write_text(text[: len(text) - 700])  # cut inside the last launch row
    with pytest.raises(NcuTruncatedError, match="truncated"):
        read_ncu_csv(p)
    header_only = "\n".join(text.splitlines()[:5]) + "\n"
    with pytest.raises(NcuTruncatedError, match="no launch rows"):
        parse_ncu_csv(header_only)


def test_truncated_details_page() -> None:
    lines = DETAILS.read_text().rstrip("\n").splitlines()
    lines[-1] = ",".join(lines[-1].split(",")[:8])  # the file ends inside a row
    with pytest.raises(NcuTruncatedError, match="truncated"):
        parse_ncu_csv("\n".join(lines) + "\n")


def test_bad_launch_id() -> None:
    with pytest.raises(NcuFormatError, match="launch ID"):
        parse_ncu_csv('"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"x","k","1"\n')


# --- .ncu-rep through ncu_report -------------------------------------------------------------------------------
class _Metric:
    def __init__(self, value: object, unit: str) -> None:
        self._v, self._u = value, unit

    def has_value(self) -> bool:
        return self._v is not None

    def value(self) -> object:
        return self._v

    def unit(self) -> str:
        return self._u


class _Action:
    NameBase_DEMANGLED = 1

    def __init__(self, name: str, metrics: dict[str, tuple[object, str]]) -> None:
        self._name, self._m = name, metrics

    def name(self, base: int | None = None) -> str:
        return self._name if base == 1 else self._name.split("<")[0]

    def metric_names(self) -> list[str]:
        return list(self._m)

    def metric_by_name(self, name: str) -> _Metric | None:
        return _Metric(*self._m[name]) if name in self._m else None


class _Range:
    def __init__(self, actions: list[_Action]) -> None:
        self._a = actions

    def num_actions(self) -> int:
        return len(self._a)

    def action_by_idx(self, i: int) -> _Action:
        return self._a[i]


def _fake_report_module(actions: list[_Action]) -> types.ModuleType:
    mod = types.ModuleType("ncu_report")
    ctx = types.SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: _Range(actions))
    mod.load_report = lambda path: ctx  # type: ignore[attr-defined]
    return mod


def test_ncu_report_through_a_fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"\0")
    actions = [
        _Action("void gemm<float>(float *)", {
            "gpu__time_duration.sum": (1500, "usecond"), "launch__grid_dim_x": (64, ""), "launch__grid_dim_y": (2, ""),
            "launch__grid_dim_z": (1, ""), "launch__block_dim_x": (256, ""), "launch__block_dim_y": (1, ""),
            "launch__block_dim_z": (1, ""), "launch__registers_per_thread": (64, "register/thread"),
            "launch__func_cache_config": ("CachePreferNone", ""), "dram__bytes.sum": (None, "byte")}),
        _Action("copy", {"gpu__time_duration.sum": (2000.0, "ns")}),
    ]
    monkeypatch.setitem(sys.modules, "ncu_report", _fake_report_module(actions))
    t = read_ncu(rep)
    assert t.page == "report" and len(t) == 2
    assert t.kernel_name.tolist() == ["void gemm<float>(float *)", "copy"]
    assert t.metric("gpu__time_duration.sum").tolist() == [1_500_000.0, 2000.0]
    assert t.grid[0].tolist() == [64, 2, 1] and t.block[0].tolist() == [256, 1, 1]
    assert t.registers_per_thread.tolist() == [64, -1]
    assert t.text["launch__func_cache_config"][0] == "CachePreferNone"
    assert not t.has("dram__bytes.sum")  # metrics without a value are dropped


def test_ncu_report_module_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"\0")
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # makes "import ncu_report" fail
    monkeypatch.setattr(ncu_csv, "ncu_install_dirs", lambda: [])
    with pytest.raises(NcuFormatError, match="ncu_report module was not found"):
        read_ncu_report(rep)
    with pytest.raises(NcuFormatError, match="no such file"):
        read_ncu_report(tmp_path / "absent.ncu-rep")


def test_ncu_report_from_an_install_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extras = tmp_path / "nsight-compute-2025.3.1" / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").write_text("def load_report(path):\n    raise RuntimeError('bad report')\n")
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    monkeypatch.setattr(ncu_csv, "ncu_install_dirs", lambda: [extras.parent.parent])
    monkeypatch.setattr(sys, "path", list(sys.path))
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"\0")
    with pytest.raises(NcuFormatError, match="cannot load it"):
        read_ncu_report(rep)
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
