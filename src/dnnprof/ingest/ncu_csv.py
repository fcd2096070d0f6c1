"""Nsight Compute results → one canonical per-launch table (:class:`NcuTable`).

Reads the three forms ncu writes:

* ``ncu --csv --page raw`` (wide): header row of metric names, a units row, then one row per profiled launch.
  Numbers carry thousands separators (``"1,466,636,015,325.67"``); ncu's own ``==PROF==`` lines may precede it.
* ``ncu --csv`` details page (long): one row per launch × section metric; metric rows stop after an empty
  ``Rule Name`` (16 fields), rule rows carry 20 with empty metric fields. ``Metric Name`` is the section *label*
  (``Compute (SM) Throughput``) unless ``--print-metric-name name`` was given; labels map back to metric names
  through :data:`DETAIL_LABELS`.
* ``.ncu-rep`` through NVIDIA's ``ncu_report`` module (``<nsight-compute>/extras/python``), when importable.

Every metric is stored in base units (``ns``, ``byte``, ``byte/s``, ``hz``, ``%``, ``inst`` …): auto-scaled units
(``usecond``, ``Kbyte``, ``Gbyte/second``, ``cycle/nsecond``, ``Ghz``) are converted, decimal prefixes (K = 1000,
as ncu prints 32,768 B as "32.77 Kbyte").
"""

from __future__ import annotations

import csv
import glob
import gzip
import importlib
import io
import math
import os
import re
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

#: How to lift the counter restriction; shown with every ERR_NVGPUCTRPERM.
PERMISSION_HELP = (
    "GPU performance counters are restricted to admin users (ERR_NVGPUCTRPERM). Run as root, give ncu "
    "CAP_PERFMON/CAP_SYS_ADMIN, or set the driver option NVreg_RestrictProfilingToAdminUsers=0 "
    "(e.g. 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/, then reload the driver); "
    "see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


class NcuFormatError(ValueError):
    """An Nsight Compute result is missing, unreadable or not in a form dnnprof understands."""


class NcuPermissionError(NcuFormatError):
    """The result only says the counters could not be read (ERR_NVGPUCTRPERM)."""


class NcuTruncatedError(NcuFormatError):
    """The file stops in the middle of the table."""


@dataclass
class NcuRule:
    """One rule result of the details page (SOLBottleneck, AchievedOccupancy …)."""

    launch_id: int
    section: str
    rule: str
    kind: str
    description: str
    speedup_type: str = ""
    speedup_pct: float = math.nan


@dataclass
class NcuTable:
    """One row per profiled kernel launch; every metric is a float64 column in base units (NaN when absent)."""

    launch_id: np.ndarray  # int64, ncu's "ID"
    kernel_name: np.ndarray  # object (str), as ncu printed it
    grid: np.ndarray  # (n, 3) int64, -1 unknown
    block: np.ndarray  # (n, 3) int64
    registers_per_thread: np.ndarray  # int32, -1 unknown
    static_smem_bytes: np.ndarray  # int64, -1 unknown
    dynamic_smem_bytes: np.ndarray  # int64, -1 unknown
    device: np.ndarray  # int16
    stream: np.ndarray  # int64
    nvtx: np.ndarray  # object (str): the NVTX stack ncu recorded, "" when not collected
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    text: dict[str, np.ndarray] = field(default_factory=dict)  # non-numeric values (launch__func_cache_config …)
    rules: list[NcuRule] = field(default_factory=list)
    source: str = ""
    page: str = ""  # "raw", "details" or "report"

    def __len__(self) -> int:
        return int(self.launch_id.shape[0])

    def has(self, name: str) -> bool:
        return name in self.metrics

    def metric(self, name: str) -> np.ndarray:
        """Column ``name`` in base units, or all-NaN when ncu did not collect it."""
        v = self.metrics.get(name)
        return v if v is not None else np.full(len(self), np.nan)

    @property
    def smem_bytes(self) -> np.ndarray:
        """Static + dynamic shared memory per block (the driver's 1 KB reservation excluded), -1 unknown."""
        s, d = self.static_smem_bytes, self.dynamic_smem_bytes
        return np.where((s >= 0) & (d >= 0), s + d, np.where(d >= 0, d, -1))


# --- units ---------------------------------------------------------------------------------------------------
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9,
            "s": 1e9}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNTABLE = re.compile(r"^([KMGTP])(byte|inst|sector|request|cycle|warp|thread|block|transaction|wavefront|"
                        r"op|flop|register|B)$")


def normalize_unit(unit: str) -> tuple[str, float]:
    """(base unit, factor): ``value_in_unit * factor`` is the value in the base unit.

    ``usecond`` → (``ns``, 1e3); ``Kbyte/block`` → (``byte/block``, 1e3); ``Gbyte/second`` → (``byte/s``, 1e9);
    ``cycle/nsecond`` and ``Ghz`` → (``hz``, 1e9). Unknown units pass through with factor 1.
    """
    u = (unit or "").strip()
    if not u:
        return "", 1.0
    num, _, den = u.partition("/")
    factor = 1.0
    if num in _TIME_NS:
        num, factor = "ns", _TIME_NS[num]
    elif num.lower() in ("hz", "khz", "mhz", "ghz"):
        num, factor = "hz", {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}[num.lower()]
    elif (m := _COUNTABLE.match(num)) is not None:
        num, factor = ("byte" if m.group(2) == "B" else m.group(2)), _PREFIX[m.group(1)]
    elif num in ("KB", "MB", "GB", "TB"):
        num, factor = "byte", _PREFIX[num[0]]
    if not den:
        return num, factor
    if den in _TIME_NS:  # a rate: scale to per second
        factor *= 1e9 / _TIME_NS[den]
        return ("hz" if num == "cycle" else f"{num}/s"), factor
    return f"{num}/{den}", factor


# --- numbers -------------------------------------------------------------------------------------------------
_INT64_MAX = 2**63 - 1
#: Largest CSV field read (csv's default is 128 KiB; a demangled template name or an NVTX stack can be longer).
FIELD_LIMIT = 64 << 20
_EUROPEAN = re.compile(r"^-?\d{1,3}(\.\d{3})+,\d+$")
_MISSING = frozenset({"", "n/a", "na", "nan", "-", "--"})


def _number(s: str, european: bool) -> float | None:
    """A locale-formatted number, NaN for an empty cell, None when the cell is text."""
    t = s.strip()
    if t.lower() in _MISSING:
        return math.nan
    t = t.replace(".", "").replace(",", ".") if european else t.replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def _dim3(s: str) -> tuple[int, int, int]:
    """``"(256, 1, 1)"`` → (256, 1, 1); (-1, -1, -1) when absent."""
    parts = [p.strip().replace(",", "").replace(".", "") for p in s.strip().strip("()[]").split(", ")]
    try:
        vals = [int(p) for p in parts if p]
    except ValueError:
        return (-1, -1, -1)
    if not vals or not all(-_INT64_MAX <= v <= _INT64_MAX for v in vals):  # absent, or beyond int64: unknown
        return (-1, -1, -1)
    x, y, z = [*vals, 1, 1][:3]
    return (x, y, z)


# --- details-page labels -------------------------------------------------------------------------------------
#: Section label → metric name (Nsight Compute 2025.x section files: SpeedOfLight, LaunchStats, Occupancy,
#: ComputeWorkloadAnalysis, MemoryWorkloadAnalysis). "Memory Throughput" is resolved by its unit.
DETAIL_LABELS: dict[str, str] = {
    "Duration": "gpu__time_duration.sum",
    "Compute (SM) Throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM Throughput": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "L1/TEX Cache Throughput": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "L2 Cache Throughput": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "Elapsed Cycles": "gpc__cycles_elapsed.max",
    "SM Active Cycles": "sm__cycles_active.avg",
    "SM Frequency": "gpc__cycles_elapsed.avg.per_second",
    "DRAM Frequency": "dram__cycles_elapsed.avg.per_second",
    "Waves Per SM": "launch__waves_per_multiprocessor",
    "Block Size": "launch__block_size",
    "Grid Size": "launch__grid_size",
    "Threads": "launch__thread_count",
    "Registers Per Thread": "launch__registers_per_thread",
    "Static Shared Memory Per Block": "launch__shared_mem_per_block_static",
    "Dynamic Shared Memory Per Block": "launch__shared_mem_per_block_dynamic",
    "Driver Shared Memory Per Block": "launch__shared_mem_per_block_driver",
    "Shared Memory Configuration Size": "launch__shared_mem_config_size",
    "Function Cache Configuration": "launch__func_cache_config",
    "# SMs": "launch__sm_count",
    "# TPCs": "launch__tpc_count",
    "Stack Size": "launch__stack_size",
    "Cluster Size": "launch__cluster_size",
    "Preferred Cluster Size": "launch__preferred_cluster_size",
    "Cluster Scheduling Policy": "launch__cluster_scheduling_policy",
    "Enabled TPC IDs": "launch__tpc_enabled",
    "Uses Green Context": "launch__uses_green_context",
    "Max Active Clusters": "launch__cluster_max_active",
    "Max Cluster Size": "launch__cluster_max_potential_size",
    "Overall GPU Occupancy": "launch__occupancy_cluster_gpu_pct",
    "Cluster Occupancy": "launch__occupancy_cluster_pct",
    "Theoretical Occupancy": "sm__maximum_warps_per_active_cycle_pct",
    "Theoretical Active Warps per SM": "sm__maximum_warps_avg_per_active_cycle",
    "Achieved Occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "Achieved Active Warps Per SM": "sm__warps_active.avg.per_cycle_active",
    "Block Limit Registers": "launch__occupancy_limit_registers",
    "Block Limit Shared Mem": "launch__occupancy_limit_shared_mem",
    "Block Limit Warps": "launch__occupancy_limit_warps",
    "Block Limit SM": "launch__occupancy_limit_blocks",
    "Block Limit Barriers": "launch__occupancy_limit_barriers",
    "Executed Ipc Elapsed": "sm__inst_executed.avg.per_cycle_elapsed",
    "Executed Ipc Active": "sm__inst_executed.avg.per_cycle_active",
    "SM Busy": "sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed",
    "Issue Slots Busy": "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    "Issued Ipc Active": "sm__inst_issued.avg.per_cycle_active",
    "Mem Busy": "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
    "Max Bandwidth": "gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed",
    "Mem Pipes Busy": "sm__memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "L1/TEX Hit Rate": "l1tex__t_sector_hit_rate.pct",
    "L2 Hit Rate": "lts__t_sector_hit_rate.pct",
}
# The lookbehind starts a match only where a word starts: without it a long label of letters ("xxx…", 200 kB)
# is searched from every position, each scanning to the end (quadratic: minutes).
_METRIC_NAME = re.compile(r"(?<![a-z0-9])[a-z0-9]+__[A-Za-z0-9_.]+")


def _metric_key(label: str, section: str, unit: str) -> str:
    """Canonical metric name for a details-page ``Metric Name`` cell (label, raw name, or "label (name)")."""
    if "__" in label and (m := _METRIC_NAME.search(label)) is not None:
        return m.group(0)
    if label == "Memory Throughput":
        return ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed" if unit.strip() == "%"
                else "dram__bytes.sum.per_second")
    return DETAIL_LABELS.get(label, f"label:{section}/{label}")


# --- reading -------------------------------------------------------------------------------------------------
_FIXED = frozenset({"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
                    "Stream", "Block Size", "Grid Size", "Device", "CC"})


def read_ncu(path: str | os.PathLike[str]) -> NcuTable:
    """Read an ncu CSV (raw or details page, optionally gzipped) or an ``.ncu-rep`` report."""
    p = Path(path)
    if p.suffix == ".ncu-rep":
        return read_ncu_report(p)
    return read_ncu_csv(p)


def read_ncu_csv(path: str | os.PathLike[str]) -> NcuTable:
    """Parse a file written by ``ncu --csv`` (``--page raw`` or the details page)."""
    p = Path(path)
    if not p.is_file():
        raise NcuFormatError(f"{p}: no such file")
    try:
        raw = gzip.open(p, "rb").read() if p.suffix == ".gz" else p.read_bytes()
    except (OSError, EOFError) as e:
        raise NcuFormatError(f"{p}: cannot read ({e})") from None
    except zlib.error as e:  # a corrupt deflate stream (gzip.BadGzipFile covers only the header)
        raise NcuFormatError(f"{p}: corrupt gzip ({e})") from None
    return parse_ncu_csv(raw.decode("utf-8", errors="replace"), source=str(p))


def parse_ncu_csv(text: str, source: str = "<ncu csv>") -> NcuTable:
    """Parse ncu CSV text (either page); ncu's ``==PROF==``/``==WARNING==`` lines are skipped."""
    if "ERR_NVGPUCTRPERM" in text:
        raise NcuPermissionError(f"{source}: ncu could not read the GPU counters. {PERMISSION_HELP}")
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("=="))
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, FIELD_LIMIT))
    try:
        rows = list(csv.reader(io.StringIO(body)))
    except csv.Error as e:  # a field beyond FIELD_LIMIT, a NUL byte …
        raise NcuFormatError(f"{source}: not a CSV dnnprof can read ({e})") from None
    finally:
        csv.field_size_limit(limit)
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID" and "Kernel Name" in r), None)
    if start is None:
        hint = " (ncu says no kernels were profiled)" if "No kernels were profiled" in text else ""
        raise NcuFormatError(f"{source}: not an Nsight Compute CSV: no \"ID\",…,\"Kernel Name\" header{hint}")
    header, rows = rows[start], [r for r in rows[start + 1:] if r]
    european = any(_EUROPEAN.match(c) for r in rows[:50] for c in r)
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_details(header, rows, source, european)
    if "Invocations" in header:
        raise NcuFormatError(f"{source}: a --print-summary table, not per-launch results; re-export without it")
    return _parse_raw(header, rows, source, european)


def _launch_id(cell: str, source: str, line: int) -> int:
    try:
        v = int(cell.replace(",", ""))
    except ValueError:
        raise NcuFormatError(f"{source}: row {line}: launch ID {cell[:40]!r} is not a number") from None
    if not 0 <= v <= _INT64_MAX:
        raise NcuFormatError(f"{source}: row {line}: launch ID {cell[:40]!r} is out of range")
    return v


def _parse_raw(header: list[str], rows: list[list[str]], source: str, european: bool) -> NcuTable:
    units_row = rows[0] if rows and rows[0][0] == "" else [""] * len(header)
    data = rows[1:] if rows and rows[0][0] == "" else rows
    if not data:
        raise NcuTruncatedError(f"{source}: header but no launch rows (truncated, or nothing was profiled)")
    n, width = len(data), len(header)
    for i, r in enumerate(data):
        if len(r) < width:
            raise NcuTruncatedError(f"{source}: launch row {i + 1} has {len(r)} of {width} fields (truncated file?)")
    col = {name: j for j, name in enumerate(header)}
    cells = {name: [r[j] for r in data] for name, j in col.items()}
    values: dict[str, tuple[list[str], str]] = {}
    for name, j in col.items():
        if name in _FIXED or "_Range:" in name:
            continue
        values[name] = (cells[name], units_row[j] if j < len(units_row) else "")
    ids = [_launch_id(c, source, i + 1) for i, c in enumerate(cells["ID"])]
    nvtx_cols = [name for name in header if "_Range:" in name]
    nvtx = [" | ".join(x.strip() for x in vals if x.strip()) for vals in zip(*(cells[c] for c in nvtx_cols),
                                                                          strict=True)] if nvtx_cols else [""] * n
    return _build(ids, cells["Kernel Name"], cells.get("Grid Size"), cells.get("Block Size"),
                  cells.get("Device"), cells.get("Stream"), nvtx, values, [], source, "raw", european)


def _parse_details(header: list[str], rows: list[list[str]], source: str, european: bool) -> NcuTable:
    c = {name: j for j, name in enumerate(header)}
    need = c["Metric Value"]
    order: list[int] = []
    per: dict[int, dict[str, tuple[str, str]]] = {}
    first: dict[int, list[str]] = {}
    rules: list[NcuRule] = []
    for i, r in enumerate(rows):
        if len(r) <= need:
            raise NcuTruncatedError(f"{source}: row {i + 2} has {len(r)} fields, a metric row needs {need + 1} "
                                    "(truncated file?)")
        lid = _launch_id(r[0], source, i + 2)
        if lid not in per:
            order.append(lid)
            per[lid], first[lid] = {}, r
        label, section = r[c["Metric Name"]], r[c.get("Section Name", need)]
        rule = r[c["Rule Name"]] if "Rule Name" in c and len(r) > c["Rule Name"] else ""
        if not label and rule:
            cell = {k: (r[j] if j < len(r) else "") for k, j in c.items()}
            sp = _number(cell.get("Estimated Speedup", ""), european)
            rules.append(NcuRule(lid, section, rule, cell.get("Rule Type", ""), cell.get("Rule Description", ""),
                                 cell.get("Estimated Speedup Type", ""), math.nan if sp is None else sp))
            continue
        if label:
            unit = r[c["Metric Unit"]] if "Metric Unit" in c else ""
            per[lid][_metric_key(label, section, unit)] = (r[need], unit)
    names: dict[str, str] = {}
    for d in per.values():
        for k, (_, u) in d.items():
            names.setdefault(k, u)
    values = {k: ([per[lid].get(k, ("", u))[0] for lid in order], u) for k, u in names.items()}

    def pick(key: str) -> list[str] | None:
        return [first[lid][c[key]] for lid in order] if key in c else None

    return _build(order, pick("Kernel Name") or [""] * len(order), pick("Grid Size"), pick("Block Size"),
                  pick("Device"), pick("Stream"), [""] * len(order), values, rules, source, "details", european)


def _int_col(v: np.ndarray) -> np.ndarray:
    """int64 of a metric column; -1 where unknown or beyond int64."""
    return np.where(np.isfinite(v) & (np.abs(v) < 2.0**63), v, -1).astype(np.int64)


def _build(ids: list[int], names: list[str], grid: list[str] | None, block: list[str] | None,
           device: list[str] | None, stream: list[str] | None, nvtx: list[str],
           values: dict[str, tuple[list[str], str]], rules: list[NcuRule], source: str, page: str,
           european: bool) -> NcuTable:
    n = len(ids)
    if n and not values:  # launch columns only (ID, names, grid …): nothing to measure a kernel by
        raise NcuFormatError(f"{source}: no metric values, only launch columns: not the per-launch results of "
                             "'ncu --csv' (--page raw or details)")
    metrics: dict[str, np.ndarray] = {}
    units: dict[str, str] = {}
    text: dict[str, np.ndarray] = {}
    for name, (cells, unit) in values.items():
        base, factor = normalize_unit(unit)
        nums = [_number(s, european) for s in cells]
        if any(x is None for x in nums):
            text[name] = np.asarray([s.strip() for s in cells], dtype=object)
        arr = np.asarray([math.nan if x is None else x for x in nums], dtype=np.float64)
        if factor != 1.0:
            with np.errstate(over="ignore"):
                arr = arr * factor
        # ±inf ("inf", "1e400", or a value that overflows its unit's scale) is no measurement: unknown, as empty
        metrics[name], units[name] = np.where(np.isfinite(arr), arr, np.nan), base
    tbl = NcuTable(
        launch_id=np.asarray(ids, dtype=np.int64), kernel_name=np.asarray(names, dtype=object),
        grid=np.full((n, 3), -1, dtype=np.int64), block=np.full((n, 3), -1, dtype=np.int64),
        registers_per_thread=np.full(n, -1, dtype=np.int32), static_smem_bytes=np.full(n, -1, dtype=np.int64),
        dynamic_smem_bytes=np.full(n, -1, dtype=np.int64), device=np.zeros(n, dtype=np.int16),
        stream=np.full(n, -1, dtype=np.int64), nvtx=np.asarray(nvtx, dtype=object), metrics=metrics,
        units=units, text=text, rules=rules, source=source, page=page)
    _fill_launch_columns(tbl, grid, block, device, stream)
    return tbl


def _fill_launch_columns(t: NcuTable, grid: list[str] | None, block: list[str] | None,
                         device: list[str] | None, stream: list[str] | None) -> None:
    """Launch geometry from the fixed columns, completed from ``launch__*`` metrics where those are present."""
    for dst, cells, prefix in ((t.grid, grid, "launch__grid_dim_"), (t.block, block, "launch__block_dim_")):
        if cells is not None:
            dst[:] = np.asarray([_dim3(s) for s in cells], dtype=np.int64).reshape(-1, 3)
        for k, axis in enumerate("xyz"):
            if t.has(prefix + axis):
                v = _int_col(t.metrics[prefix + axis])
                dst[:, k] = np.where(v >= 0, v, dst[:, k])
    for attr, name in (("registers_per_thread", "launch__registers_per_thread"),
                       ("static_smem_bytes", "launch__shared_mem_per_block_static"),
                       ("dynamic_smem_bytes", "launch__shared_mem_per_block_dynamic")):
        if t.has(name):
            getattr(t, attr)[:] = _int_col(t.metrics[name])
    if device is not None:  # a device id beyond int16 is unknown (-1)
        t.device[:] = [_small_int(x, 0, np.iinfo(np.int16).max) for x in device]
    if stream is not None:
        t.stream[:] = [_small_int(x, -1, _INT64_MAX) for x in stream]


def _small_int(cell: str, default: int, limit: int) -> int:
    """A non-negative int cell; ``default`` when not a number, -1 when beyond ``limit``."""
    x = cell.strip()
    if not (x.isascii() and x.isdigit()):
        return default
    v = int(x)
    return v if v <= limit else -1


# --- .ncu-rep through ncu_report ------------------------------------------------------------------------------
def ncu_install_dirs() -> list[Path]:
    """Nsight Compute installs on this machine: the one ``ncu`` on PATH resolves to, /opt/nvidia/nsight-compute/*,
    /usr/local/cuda*/nsight-compute*. Newest version last within each pattern."""
    found: list[Path] = []
    on_path = shutil.which("ncu")
    if on_path:
        real = Path(on_path).resolve()
        found.append(real.parent)
        found += [Path(d) for d in sorted(glob.glob(str(real.parent.parent / "nsight-compute*")))]
    for pattern in ("/opt/nvidia/nsight-compute/*", "/usr/local/cuda*/nsight-compute*",
                    "/usr/local/NVIDIA-Nsight-Compute*"):
        found += [Path(d) for d in sorted(glob.glob(pattern))]
    seen: set[Path] = set()
    return [d for d in found if d.is_dir() and not (d in seen or seen.add(d))]


def import_ncu_report() -> ModuleType:
    """NVIDIA's ``ncu_report`` module: importable as is, or from an install's ``extras/python``."""
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for root in reversed(ncu_install_dirs()):
        extras = root / "extras" / "python"
        if (extras / "ncu_report.py").is_file():
            sys.path.insert(0, str(extras))
            try:
                return importlib.import_module("ncu_report")
            except ImportError as e:
                raise NcuFormatError(f"{extras}: ncu_report failed to import ({e})") from None
    raise NcuFormatError("cannot read .ncu-rep files: the ncu_report module was not found (install Nsight Compute, "
                         "or add <nsight-compute>/extras/python to PYTHONPATH); or export a CSV with "
                         "'ncu --import REPORT --csv --page raw'")


def read_ncu_report(path: str | os.PathLike[str]) -> NcuTable:
    """Read a ``.ncu-rep`` with ``ncu_report``: every kernel action of every range, every metric with a value."""
    p = Path(path)
    if not p.is_file():
        raise NcuFormatError(f"{p}: no such file")
    mod = import_ncu_report()
    try:
        ctx = mod.load_report(str(p))
    except Exception as e:  # noqa: BLE001 - ncu_report raises its own (undocumented) exception types
        raise NcuFormatError(f"{p}: ncu_report cannot load it ({e})") from None
    ids: list[int] = []
    names: list[str] = []
    per: list[dict[str, tuple[Any, str]]] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            base = getattr(act, "NameBase_DEMANGLED", None)
            names.append(str(act.name(base) if base is not None else act.name()))
            ids.append(len(ids))
            vals: dict[str, tuple[Any, str]] = {}
            for m_name in act.metric_names():
                m = act.metric_by_name(m_name)
                if m is not None and m.has_value():  # to base units per value: units may differ per action
                    v, (unit, factor) = m.value(), normalize_unit(str(m.unit() or ""))
                    num = isinstance(v, (int, float)) and not isinstance(v, bool)
                    vals[str(m_name)] = (float(v) * factor if num else v, unit)
            per.append(vals)
    if not ids:
        raise NcuFormatError(f"{p}: the report holds no kernel results")
    units: dict[str, str] = {}
    for d in per:
        for k, (_, u) in d.items():
            units.setdefault(k, u)
    values = {k: ([_cell(d.get(k, ("", u))[0]) for d in per], u) for k, u in units.items()}
    return _build(ids, names, None, None, None, None, [""] * len(ids), values, [], str(p), "report", False)


def _cell(v: Any) -> str:
    return repr(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
