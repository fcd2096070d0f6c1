"""nvprof ``--csv --print-gpu-trace`` output → canonical Profile (kernels, copies, sets).

Layout (nvprof's documented CSV mode): ``==<pid>==`` lines (and program output) first, then a header row starting
with ``"Start","Duration"``, then a units row (``ms``, ``us``, ``KB`` …) that gives the unit of each column, then
one row per GPU activity. Copies and sets are named ``[CUDA memcpy HtoD]`` / ``[CUDA memset]``; the device column
reads ``Tesla V100-SXM2-16GB (0)``. Times are scaled to ns and sizes to bytes with the units row. The summary mode
(``--print-summary``) has no timeline and is not read here.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np

from dnnprof.ingest.errors import TraceError
from dnnprof.model.device import DeviceInfo
from dnnprof.model.profile import Profile
from dnnprof.model.schema import MEMCPY_KINDS, MEMORY_KINDS, empty_table

_TIME_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_SIZE_B = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
_DEVICE = re.compile(r"^(?P<name>.*?)\s*\((?P<id>\d+)\)$")


def is_nvprof_csv(head: bytes) -> bool:
    """True for the start of an nvprof CSV: ``==<pid>==`` lines or its gpu-trace/summary header."""
    return bool(re.search(rb"^==\d+== ", head, re.M)) or b'"Start","Duration"' in head


def read_nvprof_csv(path: str | Path) -> Profile:
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, s in enumerate(lines) if s.startswith('"Start","Duration"')), None)
    if start is None:
        if any(s.startswith('"Type","Time(%)"') for s in lines):
            raise TraceError(f"{path}: an nvprof --print-summary CSV has no timeline; record with "
                             "`nvprof --csv --print-gpu-trace` instead")
        raise TraceError(f"{path}: nvprof output without a --print-gpu-trace table (\"Start\",\"Duration\",…)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units = rows[0], rows[1] if len(rows) > 1 else []
    unit = dict(zip(header, [*units, *[""] * len(header)][:len(header)], strict=True))
    body = [dict(zip(header, r, strict=False)) for r in rows[2:] if len(r) >= 2 and r[0]]

    def num(r: dict[str, str], col: str, scale: float) -> float:
        v = (r.get(col) or "").strip()
        try:
            return float(v) * scale
        except ValueError:
            return -1.0

    p = Profile()
    tscale = {c: _TIME_NS.get(unit.get(c, ""), 0.0) for c in ("Start", "Duration")}
    if not all(tscale.values()):
        raise TraceError(f"{path}: the units row gives no time unit for Start/Duration")
    sscale = _SIZE_B.get(unit.get("Size", ""), 1)
    devices: dict[int, str] = {}
    parts: dict[str, list[dict[str, str]]] = {"kernels": [], "memcpy": [], "memset": []}
    for r in body:
        name = r.get("Name", "")
        parts["memcpy" if name.startswith("[CUDA memcpy") else "memset" if name.startswith("[CUDA memset")
              else "kernels"].append(r)
    for table, rs in parts.items():
        t = empty_table(table, len(rs))
        st = np.array([round(num(r, "Start", tscale["Start"])) for r in rs], dtype=np.int64)
        order = np.argsort(st, kind="stable")
        rs = [rs[i] for i in order.tolist()]
        t["rank"][:] = 0
        t["start_ns"][:] = st[order]
        t["dur_ns"][:] = [max(0, round(num(r, "Duration", tscale["Duration"]))) for r in rs]
        t["name_id"][:] = [p.intern(r.get("Name", "")) for r in rs]
        t["stream"][:] = [int(num(r, "Stream", 1)) for r in rs]
        t["correlation"][:] = [int(num(r, "Correlation_ID", 1)) for r in rs]
        for i, r in enumerate(rs):
            m = _DEVICE.match(r.get("Device", "").strip())
            if m:
                t["device"][i] = int(m["id"])
                devices.setdefault(int(m["id"]), m["name"])
        if table == "kernels":
            for col, c in (("Grid X", "grid_x"), ("Grid Y", "grid_y"), ("Grid Z", "grid_z"), ("Block X", "block_x"),
                           ("Block Y", "block_y"), ("Block Z", "block_z"), ("Registers Per Thread",
                                                                           "registers_per_thread")):
                t[c][:] = [int(num(r, col, 1)) for r in rs]
            smem = {c: _SIZE_B.get(unit.get(c, ""), 1) for c in ("Static SMem", "Dynamic SMem")}
            t["shared_memory_bytes"][:] = [int(max(num(r, "Static SMem", smem["Static SMem"]), 0)
                                               + max(num(r, "Dynamic SMem", smem["Dynamic SMem"]), 0)) for r in rs]
        else:
            t["bytes"][:] = [max(0, round(num(r, "Size", sscale))) for r in rs]
            mem = [MEMORY_KINDS.index(x) if (x := r.get("DstMemType", "").strip().lower()) in MEMORY_KINDS else 0
                   for r in rs]
            t["dst_mem"][:] = mem
        if table == "memcpy":
            t["kind"][:] = [next((k for k, s in enumerate(MEMCPY_KINDS) if k and f" {s}]" in r["Name"]), 0)
                            for r in rs]
            t["src_mem"][:] = [MEMORY_KINDS.index(x) if (x := r.get("SrcMemType", "").strip().lower())
                               in MEMORY_KINDS else 0 for r in rs]
        p.tables[table] = t
    p.devices = [DeviceInfo(id=i, name=n, vendor="nvidia") for i, n in sorted(devices.items())]
    p.meta.update({"source": {"path": str(path), "format": "nvprof-csv"}, "base_time_ns": 0, "distributed": {},
                   "ranks": [0], "device_vendor": "nvidia"})
    return p
