"""One workload through both readers: the real H200 GPT-2 training trace (Kineto) written into an Nsight Systems
database with the schema of a real export (the RTX 3090 export in ``../shared/foreign``: its CREATE statements and
enum tables, copied at test time), then read back by the nsys reader. Kernel count, total kernel time, per-kernel
totals, launch links, copies and steps' kernel time must come out the same as from the Kineto reader.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest.kineto import read_kineto

DATA = Path(__file__).parent / "data"
GPT2 = DATA / "gpt2_bf16_train_h200" / "trace.json.gz"
REAL_EXPORT = Path(__file__).resolve().parents[2] / "shared" / "foreign" / "memfusion__rtx3090_trt_conv_nsys.sqlite"
_TID = 0x1000000  # a globalTid whose low 24 bits are the thread id

pytestmark = pytest.mark.skipif(not REAL_EXPORT.is_file(), reason=f"{REAL_EXPORT} is not here (../shared/foreign)")


def _nsys_from_kineto(dst: Path) -> object:
    """Write the Kineto profile's kernels, copies and launches into an empty copy of the real export's schema."""
    p = read_kineto(GPT2)
    src = sqlite3.connect(REAL_EXPORT)
    db = sqlite3.connect(dst)
    for (sql,) in src.execute("select sql from sqlite_master where type='table' and sql is not null"):
        db.execute(sql)
    for (name,) in src.execute("select name from sqlite_master where type='table' and name like 'ENUM_%'"):
        rows = src.execute(f"select * from {name}").fetchall()
        if rows:
            db.executemany(f"insert into {name} values ({','.join('?' * len(rows[0]))})", rows)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        return strings.setdefault(s, len(strings) + 1)

    k, rt, mc = p.tables["kernels"], p.tables["runtime"], p.tables["memcpy"]
    names = p.names(k["name_id"])
    db.executemany(
        "insert into CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid,"
        " demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ,"
        " staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId)"
        " values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,0,?)",
        [(int(s), int(s + d), int(dev), 1, int(st), int(c), _TID, sid(str(n)), sid(str(n)[:40]), int(r), int(gx),
          int(gy), int(gz), int(bx), int(by), int(bz), int(max(sm, 0)), 0, i)
         for i, (s, d, dev, st, c, n, r, gx, gy, gz, bx, by, bz, sm) in enumerate(zip(
             k["start_ns"], k["dur_ns"], k["device"], k["stream"], k["correlation"], names,
             k["registers_per_thread"], k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"],
             k["block_z"], k["shared_memory_bytes"], strict=True))])
    db.executemany(
        "insert into CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
        " returnValue) values (?,?,1,?,?,?,0)",
        [(int(s), int(s + d), _TID + int(t) % _TID, int(c), sid(str(n)))
         for s, d, t, c, n in zip(rt["start_ns"], rt["dur_ns"], rt["tid"], rt["correlation"],
                                  p.names(rt["name_id"]), strict=True)])
    db.executemany(
        "insert into CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, globalPid,"
        " bytes, copyKind) values (?,?,?,1,?,?,?,?,?)",
        [(int(s), int(s + d), int(dev), int(st), int(c), _TID, int(b), 8)  # 8: device to device
         for s, d, dev, st, c, b in zip(mc["start_ns"], mc["dur_ns"], mc["device"], mc["stream"], mc["correlation"],
                                        mc["bytes"], strict=True)])
    db.executemany("insert into StringIds (id, value) values (?, ?)", [(i, s) for s, i in strings.items()])
    dev = p.devices[0]
    major, minor = (int(x) for x in str(dev.compute_capability or "0.0").split(".")[:2])
    db.execute("insert into TARGET_INFO_GPU (vmId, id, name, totalMemory, smCount, computeMajor, computeMinor)"
               " values (0, 0, ?, ?, ?, ?, ?)", (dev.name, int(dev.memory_bytes or 0), int(dev.sm_count or 0),
                                                 major, minor))
    db.commit()
    db.close()
    return p


def test_the_same_workload_gives_the_same_kernels_through_kineto_and_nsys(tmp_path: Path) -> None:
    from dnnprof.ingest.detect import open_profile

    kin = _nsys_from_kineto(tmp_path / "gpt2.sqlite")
    ns = open_profile(tmp_path / "gpt2.sqlite")
    a, b = kin.tables["kernels"], ns.tables["kernels"]  # type: ignore[attr-defined]
    assert a["start_ns"].size == b["start_ns"].size == 2306
    assert int(a["dur_ns"].sum()) == int(b["dur_ns"].sum())
    per_a = Counter()
    for n, d in zip(kin.names(a["name_id"]), a["dur_ns"], strict=True):  # type: ignore[attr-defined]
        per_a[str(n)] += int(d)
    per_b = Counter()
    for n, d in zip(ns.names(b["name_id"]), b["dur_ns"], strict=True):
        per_b[str(n)] += int(d)
    assert per_a == per_b
    # every launch linked in Kineto is linked through nsys's correlation ids too
    assert int((b["launch_row"] >= 0).sum()) == int((a["launch_row"] >= 0).sum())
    assert np.array_equal(np.sort(a["grid_x"]), np.sort(b["grid_x"]))
    assert int(ns.tables["memcpy"]["bytes"].sum()) == int(kin.tables["memcpy"]["bytes"].sum())  # type: ignore[attr-defined]
    assert ns.devices[0].name == kin.devices[0].name  # type: ignore[attr-defined]


def test_the_same_workload_gives_the_same_summary_numbers(tmp_path: Path) -> None:
    """What a user reads: kernel time, the top kernels and their families, the same from both inputs."""
    from dnnprof.ingest.detect import open_profile
    from dnnprof.runs.report import report

    kin = _nsys_from_kineto(tmp_path / "gpt2.sqlite")
    _, dk = report(kin)  # type: ignore[arg-type]
    _, dn = report(open_profile(tmp_path / "gpt2.sqlite"))
    # the Kineto trace has ProfilerStep markers the database does not, so compare whole-trace kernel totals
    assert sum(k["total_us"] for k in dk["kernels"]) == pytest.approx(sum(k["total_us"] for k in dn["kernels"]))
    top_k = [(k["name"], k["calls"], k["family"], k["tensor_core"]) for k in dk["kernels"][:10]]
    top_n = [(k["name"], k["calls"], k["family"], k["tensor_core"]) for k in dn["kernels"][:10]]
    assert top_k == top_n
