"""Live GPU samples as ``dnnprof monitor`` reads and records them: the per-GPU frame, the backend interface that
produces frames (NVML in production, a fake in tests), and the recorded columns (units in every name).

A recording is one wide table, one row per GPU per tick. Metric columns a GPU cannot give (GPM before Hopper,
power on some boards) are empty (null in Parquet, blank in CSV), never zero.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

#: Recorded metric columns in display order: (column, label, what it is / the vendor name it matches).
METRICS: tuple[tuple[str, str, str], ...] = (
    ("gpu_util_pct", "GPU-Util", "nvidia-smi utilization.gpu: share of time any kernel ran"),
    ("sm_active_pct", "SM active", "GPM SM_UTIL: share of SMs busy (DCGM SM_ACTIVE)"),
    ("sm_occupancy_pct", "SM occupancy", "GPM SM_OCCUPANCY: resident warps / max warps (DCGM SM_OCCUPANCY)"),
    ("tensor_active_pct", "Tensor", "GPM ANY_TENSOR_UTIL: tensor pipes busy (DCGM PIPE_TENSOR_ACTIVE)"),
    ("dram_bw_util_pct", "DRAM BW", "GPM DRAM_BW_UTIL: DRAM bandwidth / peak (DCGM DRAM_ACTIVE)"),
    ("fp16_active_pct", "FP16 pipe", "GPM FP16_UTIL: non-tensor FP16 pipe busy"),
    ("fp32_active_pct", "FP32 pipe", "GPM FP32_UTIL: FP32 pipe busy"),
    ("fp64_active_pct", "FP64 pipe", "GPM FP64_UTIL: FP64 pipe busy"),
    ("mem_util_pct", "Mem-Util", "nvidia-smi utilization.memory: share of time DRAM was read or written"),
    ("pcie_tx_mib_per_s", "PCIe TX", "GPM PCIE_TX_PER_SEC"),
    ("pcie_rx_mib_per_s", "PCIe RX", "GPM PCIE_RX_PER_SEC"),
    ("nvlink_tx_mib_per_s", "NVLink TX", "GPM NVLINK_TOTAL_TX_PER_SEC"),
    ("nvlink_rx_mib_per_s", "NVLink RX", "GPM NVLINK_TOTAL_RX_PER_SEC"),
    ("memory_used_bytes", "Memory used", "nvidia-smi memory.used"),
    ("memory_total_bytes", "Memory total", "nvidia-smi memory.total"),
    ("power_w", "Power", "nvidia-smi power.draw"),
    ("sm_clock_mhz", "SM clock", "nvidia-smi clocks.sm"),
    ("mem_clock_mhz", "Mem clock", "nvidia-smi clocks.mem"),
    ("temperature_c", "Temperature", "nvidia-smi temperature.gpu"),
)
METRIC_NAMES: tuple[str, ...] = tuple(m[0] for m in METRICS)
#: Columns before the metrics: seconds since the monitor started, Unix time, the NVML GPU index.
KEY_COLUMNS: tuple[str, ...] = ("t_s", "unix_time_s", "gpu")
#: After the metrics: active clock-throttle reasons, ``;``-separated (empty when none).
TEXT_COLUMNS: tuple[str, ...] = ("throttle_reasons",)
COLUMNS: tuple[str, ...] = KEY_COLUMNS + METRIC_NAMES + TEXT_COLUMNS
FORMATS = (".parquet", ".csv")


@dataclass(frozen=True)
class GpuInfo:
    """What does not change while monitoring one GPU."""

    index: int
    name: str
    uuid: str = ""
    memory_total_bytes: float | None = None
    gpm_supported: bool = False
    gpm_reason: str = ""


@dataclass(frozen=True)
class ProcessUse:
    """A process on a GPU. ``used_memory_bytes`` is None where NVML does not say (another user's process
    seen without root); ``name``/``user`` are ``"?"`` where this host cannot see the process (another
    container's PID namespace)."""

    pid: int
    used_memory_bytes: float | None
    name: str = "?"
    user: str = "?"


@dataclass
class GpuFrame:
    """One reading of one GPU: metric values by :data:`METRIC_NAMES` (missing = not available)."""

    gpu: int
    t_s: float
    unix_time_s: float
    values: dict[str, float] = field(default_factory=dict)
    throttle_reasons: tuple[str, ...] = ()
    processes: tuple[ProcessUse, ...] = ()


class GpuBackend(Protocol):
    """What ``dnnprof monitor`` needs from the GPU: NVML through ``collect.nvml.Nvml`` in production
    (``collect.gpu_monitor.NvmlBackend``), a scripted fake in tests."""

    reason: str

    def open(self) -> bool:
        """Start; False (with :attr:`reason`) when there is no usable GPU or driver."""
        ...

    def close(self) -> None: ...

    def device_count(self) -> int: ...

    def info(self, gpu: int) -> GpuInfo: ...

    def read(self, gpu: int, t_s: float, unix_time_s: float) -> GpuFrame:
        """One reading; GPM values cover the time since this GPU's previous :meth:`read` (none on the first)."""
        ...


class SampleTable:
    """Frames accumulated as columns (the recording, and what the summary is computed from)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {c: [] for c in COLUMNS}

    def add(self, frame: GpuFrame) -> None:
        c = self.columns
        c["t_s"].append(round(frame.t_s, 6))
        c["unix_time_s"].append(round(frame.unix_time_s, 6))
        c["gpu"].append(frame.gpu)
        for name in METRIC_NAMES:
            c[name].append(frame.values.get(name))
        c["throttle_reasons"].append(";".join(frame.throttle_reasons))

    def __len__(self) -> int:
        return len(self.columns["t_s"])

    def write(self, path: str | Path) -> Path:
        """Write the samples as Parquet or CSV (by the file's extension), atomically."""
        from dnnprof.model.outputs import OutputError, write_bytes_atomic

        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".csv":
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(COLUMNS)
            for row in zip(*(self.columns[c] for c in COLUMNS), strict=True):
                w.writerow(["" if v is None else v for v in row])
            return write_bytes_atomic(target, buf.getvalue().encode(), option="--record")
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            types = {"gpu": pa.int32(), "throttle_reasons": pa.string()}
            table = pa.table({c: pa.array(self.columns[c], type=types.get(c, pa.float64())) for c in COLUMNS})
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            return write_bytes_atomic(target, sink.getvalue().to_pybytes(), option="--record")
        raise OutputError(f"{target}: --record writes {' or '.join(FORMATS)} files, not {suffix or 'no extension'!r}")


def read_samples(path: str | Path) -> dict[str, list[object]]:
    """Columns of a recording written by :meth:`SampleTable.write` (Parquet or CSV)."""
    target = Path(path)
    if target.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return {k: list(v) for k, v in pq.read_table(target).to_pydict().items()}
    with open(target, newline="") as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    out: dict[str, list[object]] = {h: [] for h in head}
    for row in body:
        for h, v in zip(head, row, strict=True):
            if h == "throttle_reasons":
                out[h].append(v)
            elif h == "gpu":
                out[h].append(int(v))
            else:
                out[h].append(float(v) if v != "" else None)
    return out


def is_recording(path: str | Path) -> bool:
    """True when ``path`` is a ``dnnprof monitor --record`` file: a .parquet or .csv whose columns are the
    recording's (``t_s``, ``gpu``, ``gpu_util_pct`` …)."""
    target = Path(path)
    suffix = target.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            names = set(pq.read_schema(target).names)
        elif suffix == ".csv":
            with open(target, newline="") as f:
                names = set(next(csv.reader(f), []))
        else:
            return False
    except (OSError, ValueError, StopIteration, UnicodeDecodeError):
        return False
    except Exception:  # noqa: BLE001 - pyarrow's own errors on a file that is not Parquet: not a recording
        return False
    return {"t_s", "gpu", "gpu_util_pct"} <= names
