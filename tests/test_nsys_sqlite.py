"""Nsight Systems SQLite exports and reports: the real export of the foreign corpus read end to end and checked
against plain SQL over the same file; a small export in a later schema (META_DATA_EXPORT, memset, repeating NVTX
steps, emit_nvtx op ranges, columns missing) written here; partial and foreign databases; ``.nsys-rep`` through a
stand-in ``nsys`` on the PATH."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.detect import kind_of
from dnnprof.ingest.nsys_sqlite import read_nsys_sqlite
from dnnprof.model.schema import MEMCPY_KINDS

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
REAL = FOREIGN / "memfusion__rtx3090_trt_conv_nsys.sqlite"
needs_real = pytest.mark.skipif(not REAL.is_file(), reason=f"the foreign trace corpus ({FOREIGN}) is not here")


def _sql(path: Path, query: str) -> tuple:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(query).fetchone()
    finally:
        con.close()


def _analyze(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    out = tmp_path / "s.json"
    rc = main(["analyze", str(path), "--json", str(out), "--quiet"])
    err = capsys.readouterr().err
    return rc, (json.loads(out.read_text()) if out.exists() else {}), err


@needs_real
def test_real_export_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n, total_ns = _sql(REAL, 'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
    copies, copy_bytes = _sql(REAL, "SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    (device,) = _sql(REAL, "SELECT name FROM TARGET_INFO_GPU WHERE id = (SELECT deviceId FROM "
                           "CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    (calls,) = _sql(REAL, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    (linked,) = _sql(REAL, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "ON r.correlationId = k.correlationId")
    assert kind_of(REAL) == "nsys-sqlite"
    p = read_nsys_sqlite(REAL)
    assert p.self_check() == []
    k = p.tables["kernels"]
    assert k["dur_ns"].size == n == 36 and int(k["dur_ns"].sum()) == total_ns
    assert int((k["launch_row"] >= 0).sum()) == linked
    assert p.rows("memcpy") == copies and int(p.tables["memcpy"]["bytes"].sum()) == copy_bytes
    assert p.rows("runtime") == calls
    assert p.devices[0].name == device and p.devices[0].sm_count == 82 and p.devices[0].compute_capability == "8.6"
    assert p.meta["source"]["nsys_version"] == "2023.1.2.43"
    # API names lose nsys's version suffix (cudaLaunchKernel_v7000), so rules see CUPTI's names.
    names = set(p.names(p.tables["runtime"]["name_id"]))
    assert "cudaLaunchKernel" in names and not any(s.endswith("_v7000") for s in names)

    rc, doc, err = _analyze(REAL, tmp_path, capsys)
    assert rc == 0, err
    assert sum(x["calls"] for x in doc["kernels"]) == n
    assert sum(round(x["total_us"] * 1000) for x in doc["kernels"]) == total_ns
    assert sum(m["bytes"] for m in doc["memcpy"]) == copy_bytes
    assert doc["device"]["name"] == device
    # TensorRT's per-layer NVTX ranges under its one ExecutionContext::execute range are the layers.
    layers = {x["name"] for x in doc["layers"]}
    assert "/conv1/Conv + /relu/Relu" in layers and "ExecutionContext::execute" not in layers


def _fixture(path: Path, *, kernels: bool = True) -> Path:
    """A small export in the later schema (nsys 2024: META_DATA_EXPORT, no EXPORT_META_DATA), three repeating
    ``train_step`` ranges on one thread, each with an emit_nvtx op range launching one kernel, one memset."""
    con = sqlite3.connect(path)
    x = con.execute
    x("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    x("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    x("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2024.2.1.106')")
    x("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, totalMemory INTEGER, "
      "computeMajor INTEGER, computeMinor INTEGER)")  # fewer columns than 2023.1 writes
    x("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0)")
    x("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT, "
      "correlationId INT, nameId INT, returnValue INT, callchainId INT)")
    x("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT, "
      "text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT)")
    x("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, contextId INT, streamId INT, "
      "correlationId INT, globalPid INT, value INT, bytes INT, graphNodeId INT, memKind INT)")
    if kernels:
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT, "
          "correlationId INT, globalPid INT, demangledName INT, shortName INT, gridX INT, gridY INT, gridZ INT, "
          "blockX INT, blockY INT, blockZ INT, registersPerThread INT, staticSharedMemory INT, "
          "dynamicSharedMemory INT)")
    x("INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'ampere_sgemm_128x64_tn'), "
      "(3, 'sgemm'), (4, 'cudaMemsetAsync_v3020')")
    tid = (4242 << 24) | 4243
    for i in range(3):
        t0 = 1_000_000 * (i + 1)
        x("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, 'train_step', ?, NULL, NULL, 0)",
          (t0, t0 + 900_000, tid))
        x("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, ?, NULL, NULL, 0)",
          (t0 + 10_000, t0 + 100_000, f"aten::mm, seq = {i}, sizes = [[64, 64], [64, 64]]", tid))
        x("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0, NULL)", (t0 + 20_000, t0 + 25_000,
                                                                                        tid, 10 + i))
        if kernels:
            x("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, 0, 2, 3, 8, 1, 1, 128, 1, 1, 64, "
              "0, 1024)", (t0 + 30_000, t0 + 230_000 + i, 10 + i))
    x("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (3500000, 3501000, 0, ?, 99, 4, 0, NULL)", (tid,))
    x("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (3502000, 3503000, 0, 1, 7, 99, 0, 0, 4096, NULL, 2)")
    x("INSERT INTO NVTX_EVENTS VALUES (50, NULL, 34, NULL, NULL, NULL, 'a mark', ?, NULL, NULL, 0)", (tid,))
    con.commit()
    con.close()
    return path


def test_later_schema_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = read_nsys_sqlite(_fixture(tmp_path / "report2.sqlite"))
    assert p.self_check() == []
    k = p.tables["kernels"]
    assert k["dur_ns"].tolist() == [200_000, 200_001, 200_002]
    assert k["grid_x"].tolist() == [8] * 3 and k["shared_memory_bytes"].tolist() == [1024] * 3
    assert k["registers_per_thread"].tolist() == [64] * 3 and (k["launch_row"] >= 0).all()
    assert k["stream"].tolist() == [7] * 3
    # A repeating top-level NVTX range is the step; the memset launched in step 2 belongs to it.
    steps = p.tables["steps"]
    assert steps["number"].tolist() == [0, 1, 2] and p.names(steps["name_id"]).tolist() == ["train_step"] * 3
    assert k["step"].tolist() == [0, 1, 2] and p.tables["memset"]["step"].tolist() == [2]
    assert p.tables["memset"]["bytes"].tolist() == [4096] and p.name(int(p.tables["memset"]["name_id"][0])) == \
        "Memset (Device)"
    # emit_nvtx op ranges are CPU ops named by the op, carrying their sequence number; a mark is no range.
    ops = p.tables["ops"]
    assert sorted(set(p.names(ops["name_id"]))) == ["aten::mm", "train_step"]
    mm = p.names(ops["name_id"]) == "aten::mm"
    assert ops["sequence_nr"][mm].tolist() == [0, 1, 2] and (k["op_row"] == np.flatnonzero(mm)).all()
    assert p.tables["runtime"]["tid"].tolist() == [4243] * 4
    assert p.devices[0].name == "NVIDIA H100 80GB HBM3" and p.devices[0].compute_capability == "9.0"
    assert p.meta["source"]["nsys_version"] == "2024.2.1.106"

    rc, doc, err = _analyze(tmp_path / "report2.sqlite", tmp_path, capsys)
    assert rc == 0, err
    assert doc["steps"]["count"] == 3 and doc["steps"]["source"] == "marker"
    assert {x["name"] for x in doc["layers"]} == {"aten::mm"}


def test_diff_of_two_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _fixture(tmp_path / "a.sqlite"), _fixture(tmp_path / "b.sqlite")
    assert main(["diff", str(a), str(b)]) == 0, capsys.readouterr().err


def test_partial_export_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, err = _analyze(_fixture(tmp_path / "nocuda.sqlite", kernels=False), tmp_path, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and not doc and len(lines) == 1
    assert "without CUPTI_ACTIVITY_KIND_KERNEL" in lines[0] and "--trace=cuda" in lines[0]


def test_other_sqlite_database_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "notes.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.commit()
    con.close()
    rc, _, err = _analyze(db, tmp_path, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "not an Nsight Systems export" in err


def test_sqlite_suffix_without_sqlite_content_is_not_read_as_one(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "report.sqlite"
    f.write_text("hello\n")
    rc, _, err = _analyze(f, tmp_path, capsys)
    assert rc == 2 and "not a trace dnnprof can read" in err


# --- .nsys-rep ------------------------------------------------------------------------------------------------
def _fake_nsys(bin_dir: Path, source: Path) -> Path:
    """An ``nsys`` that answers ``nsys export --type sqlite --output OUT REPORT`` with a copy of ``source``, and
    counts its calls."""
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"""#!{sys.executable}
import shutil, sys
from pathlib import Path
args = sys.argv[1:]
assert args[:3] == ["export", "--type", "sqlite"], args
out = args[args.index("--output") + 1]
shutil.copyfile({str(source)!r}, out)
calls = Path({str(bin_dir / 'calls')!r})
calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_nsys_rep_without_nsys_says_how_to_export(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"\x00not readable without nsys")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc, _, err = _analyze(rep, tmp_path, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "nsys export --type sqlite" in lines[0] and "not on the PATH" in lines[0]


def test_nsys_rep_exported_once_and_cached_beside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    source = _fixture(tmp_path / "src.sqlite")
    bin_dir = _fake_nsys(tmp_path / "bin", source)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    work = tmp_path / "w"
    work.mkdir()
    rep = work / "report1.nsys-rep"
    rep.write_bytes(b"report")
    users = work / "report1.dnnprof.sqlite"  # a file of the user's with the name dnnprof would pick: kept
    users.write_text("mine")
    rc, doc, err = _analyze(rep, tmp_path, capsys)
    assert rc == 0, err
    assert sum(x["calls"] for x in doc["kernels"]) == 3
    assert users.read_text() == "mine"
    cached = work / "report1.dnnprof-2.sqlite"
    assert cached.is_file() and (bin_dir / "calls").read_text() == "1"
    assert sorted(f.name for f in work.iterdir()) == ["report1.dnnprof-2.sqlite", "report1.dnnprof.sqlite",
                                                      "report1.nsys-rep"]
    rc, _, err = _analyze(rep, tmp_path, capsys)  # again: the cached export is reused
    assert rc == 0 and (bin_dir / "calls").read_text() == "1", err
    rep.write_bytes(b"report, recorded again")  # the report changed: dnnprof's own export is redone in place
    rc, _, err = _analyze(rep, tmp_path, capsys)
    assert rc == 0 and (bin_dir / "calls").read_text() == "2", err
    assert users.read_text() == "mine" and not (work / "report1.dnnprof-3.sqlite").exists()


@needs_real
def test_nsys_rep_of_the_real_export(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _fake_nsys(tmp_path / "bin", REAL)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"report")
    rc, doc, err = _analyze(rep, tmp_path, capsys)
    assert rc == 0, err
    assert sum(x["calls"] for x in doc["kernels"]) == 36
    assert shutil.which("nsys") == str(bin_dir / "nsys")


def test_memcpy_kinds_follow_the_exports_enum(tmp_path: Path) -> None:
    """Copy kinds are read through the export's ENUM_CUDA_MEMCPY_OPER/ENUM_CUDA_MEM_KIND, not fixed numbers."""
    db = _fixture(tmp_path / "c.sqlite")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, "
                "correlationId INT, bytes INT, copyKind INT, srcKind INT, dstKind INT)")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (10, 20, 0, 7, -5, 256, 1, 0, 2)")
    con.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)")
    con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, '')",
                    [(0, "CUDA_MEMOPR_MEMORY_KIND_PINNED"), (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE")])
    con.commit()
    con.close()
    m = read_nsys_sqlite(db).tables["memcpy"]
    assert MEMCPY_KINDS[int(m["kind"][0])] == "HtoD" and m["bytes"].tolist() == [256]
    assert m["src_mem"].tolist() == [3] and m["dst_mem"].tolist() == [1]  # pinned, device in MEMORY_KINDS


def _add_gpu_metrics(path: Path, *, lie: bool = False, period_ns: int = 20_000) -> None:
    """``nsys profile --gpu-metrics-devices=0`` tables (nsys 2024 schema): GR Active, SMs Active and one metric
    dnnprof has no name for, each sample the share of its period the fixture's kernels ran (integer %, as nsys
    stores them); ``lie``: GR Active says 100 % throughout."""
    con = sqlite3.connect(path)
    x = con.execute
    x("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, "
      "typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)")
    x("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, "
      "value INTEGER NOT NULL)")
    names = {0: "GR Active [Throughput %]", 1: "SMs Active [Throughput %]", 2: "PCIe Read Throughput [Throughput %]"}
    for m, n in names.items():
        x("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (65536, 0, 'GH100', ?, ?)", (m, n))
    kernels = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    for ts in range(period_ns, 4_200_000, period_ns):
        lo = ts - period_ns
        cov = sum(max(0, min(e, ts) - max(s, lo)) for s, e in kernels) / period_ns
        for m in names:
            v = 100 if (lie and m == 0) else (round(100 * cov) if m < 2 else 3)
            x("INSERT INTO GPU_METRICS VALUES (?, 65536, ?, ?)", (ts, m, v))
    con.commit()
    con.close()


def test_gpu_metrics_are_read_as_samples_and_checked_against_the_trace(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _fixture(tmp_path / "report3.sqlite")
    _add_gpu_metrics(path)
    p = read_nsys_sqlite(path)
    s = p.tables["samples"]
    names = set(p.names(s["metric_id"]).astype(str))
    assert names == {"gr_engine_active_pct", "sm_active_pct", "nsys:PCIe Read Throughput [Throughput %]"}
    assert s["ts_ns"].size == 3 * 209 and (np.diff(s["ts_ns"]) >= 0).all() and set(s["device"]) == {0}
    assert p.meta["sample_spans_ns"]["sm_active_pct"] == 20_000
    rc, doc, _ = _analyze(path, tmp_path, capsys)
    assert rc == 0
    check = next(c for c in doc["checks"] if c["id"] == "busy-vs-nvml")
    assert check["ok"], check
    assert "nsys GPU metrics graphics engine active" in check["detail"]
    assert "nsys GPU metrics SM active" in check["detail"]


def test_gpu_metrics_that_disagree_with_the_trace_break_the_check(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _fixture(tmp_path / "report4.sqlite")
    _add_gpu_metrics(path, lie=True)
    rc, doc, _ = _analyze(path, tmp_path, capsys)
    assert rc == 0
    check = next(c for c in doc["checks"] if c["id"] == "busy-vs-nvml")
    assert not check["ok"] and "differs by" in check["detail"], check


def _two_process_export(path: Path) -> Path:
    """``nsys profile torchrun --nproc-per-node 2 …`` as the export lays it out: two worker processes (pids 300 on
    GPU 1, 200 on GPU 0) with the same correlation ids (CUPTI counts per process) and the same NVTX step ranges, and
    the launcher (pid 100) with host calls only."""
    con = sqlite3.connect(path)
    x = con.execute
    x("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    x("INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'sm90_xmma_gemm'), (3, 'gemm'), "
      "(5, 'cudaGetDeviceCount_v5000')")
    x("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, totalMemory INTEGER, "
      "computeMajor INTEGER, computeMinor INTEGER)")
    x("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0), "
      "(1, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0)")
    x("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT, "
      "correlationId INT, nameId INT, returnValue INT, callchainId INT)")
    x("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT, "
      "text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT)")
    x("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT, "
      "correlationId INT, globalPid INT, demangledName INT, shortName INT, gridX INT, gridY INT, gridZ INT, "
      "blockX INT, blockY INT, blockZ INT, registersPerThread INT, staticSharedMemory INT, "
      "dynamicSharedMemory INT)")
    x("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1000, 2000, 0, ?, 1, 5, 0, NULL)", ((100 << 24) | 101,))
    for pid, dev, late in ((300, 1, 40_000), (200, 0, 0)):
        tid = (pid << 24) | (pid + 1)
        for i in range(3):
            t0 = 1_000_000 * (i + 1) + late
            x("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, 'train_step', ?, NULL, NULL, 0)",
              (t0, t0 + 900_000, tid))
            x("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0, NULL)",
              (t0 + 20_000, t0 + 25_000, tid, 10 + i))
            x("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, 7, ?, ?, 2, 3, 8, 1, 1, 128, 1, 1, 64, 0, "
              "1024)", (t0 + 30_000, t0 + 230_000 + dev * 50_000, dev, 10 + i, pid << 24))
    con.commit()
    con.close()
    return path


def test_each_process_of_a_multi_process_export_is_a_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _two_process_export(tmp_path / "ddp.sqlite")
    p = read_nsys_sqlite(path)
    assert p.self_check() == []
    assert p.meta["ranks"] == [0, 1] and p.meta["processes"] == {"0": 200, "1": 300}  # numbered by first GPU
    k, rt = p.tables["kernels"], p.tables["runtime"]
    assert sorted(set(zip(k["rank"].tolist(), k["device"].tolist(), strict=True))) == [(0, 0), (1, 1)]
    # the same correlation ids in both processes: each kernel joins its own process's launch
    assert (k["launch_row"] >= 0).all() and (rt["rank"][k["launch_row"]] == k["rank"]).all()
    assert rt["rank"].size == 6  # the launcher's host call is left out
    assert sorted((d.rank, d.id) for d in p.devices) == [(0, 0), (1, 1)]
    st = p.tables["steps"]
    assert sorted(st["rank"].tolist()) == [0, 0, 0, 1, 1, 1]
    rc, doc, _ = _analyze(path, tmp_path, capsys)
    assert rc == 0 and doc["ranks"]["count"] == 2
    assert {r["rank"] for r in doc["ranks"]["per_rank"]} == {0, 1}


def test_one_process_keeps_the_rank_it_is_given(tmp_path: Path) -> None:
    p = read_nsys_sqlite(_fixture(tmp_path / "one.sqlite"), rank=3)
    assert p.meta["ranks"] == [3] and "processes" not in p.meta
    assert set(p.tables["kernels"]["rank"].tolist()) == {3}
