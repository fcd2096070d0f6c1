"""A scripted GPU for ``dnnprof monitor`` tests: implements ``model.gpu_samples.GpuBackend`` (what the monitor
reads through), with a fake clock whose ``sleep`` advances time, so a run of many ticks takes no real time.

The phases are the measured H200 numbers (NVML util.gpu and GPM, 1-s windows): a one-block spin reads GPU-Util
100 % with SM active 0.757 %; a bf16 8192³ GEMM 99 % / 95.6 % with 14.1 % occupancy and 92.8 % tensor activity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dnnprof.model.gpu_samples import GpuFrame, GpuInfo, ProcessUse

H200_MEMORY = 143_771_336_704.0
IDLE = {"gpu_util_pct": 0.0, "mem_util_pct": 0.0, "sm_active_pct": 0.0, "sm_occupancy_pct": 0.0,
        "tensor_active_pct": 0.0, "dram_bw_util_pct": 0.0, "fp16_active_pct": 0.0, "fp32_active_pct": 0.0,
        "fp64_active_pct": 0.0, "pcie_tx_mib_per_s": 1.0, "pcie_rx_mib_per_s": 2.0, "nvlink_tx_mib_per_s": 0.0,
        "nvlink_rx_mib_per_s": 0.0, "power_w": 118.0, "sm_clock_mhz": 345.0, "temperature_c": 31.0}
SPIN = {**IDLE, "gpu_util_pct": 100.0, "sm_active_pct": 0.757, "sm_occupancy_pct": 0.012, "power_w": 142.0,
        "sm_clock_mhz": 1980.0, "temperature_c": 35.0}
GEMM = {**IDLE, "gpu_util_pct": 99.0, "mem_util_pct": 25.0, "sm_active_pct": 95.6, "sm_occupancy_pct": 14.1,
        "tensor_active_pct": 92.8, "dram_bw_util_pct": 17.2, "fp32_active_pct": 1.5, "power_w": 655.0,
        "sm_clock_mhz": 1755.0, "temperature_c": 52.0}
GPM_NAMES = frozenset({"sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_bw_util_pct",
                       "fp16_active_pct", "fp32_active_pct", "fp64_active_pct", "pcie_tx_mib_per_s",
                       "pcie_rx_mib_per_s", "nvlink_tx_mib_per_s", "nvlink_rx_mib_per_s"})


def spin_then_gemm(t_s: float) -> dict[str, float]:
    """Idle for 2 s, a one-block spin until 12 s, then a bf16 GEMM."""
    return IDLE if t_s < 2 else SPIN if t_s < 12 else GEMM


@dataclass
class FakeGpu:
    info: GpuInfo
    script: Callable[[float], dict[str, float]] = spin_then_gemm
    processes: tuple[ProcessUse, ...] = ()
    throttle_reasons: tuple[str, ...] = ()
    memory_used_bytes: float = 20 << 30


def h200(index: int = 0, *, gpm: bool = True, **kw: object) -> FakeGpu:
    name = "NVIDIA H200" if gpm else "Tesla V100-SXM2-32GB"
    reason = "" if gpm else "NVML GPM is not supported on this GPU (needs Hopper or later)"
    return FakeGpu(GpuInfo(index, name, f"GPU-{index:04d}", H200_MEMORY, gpm, reason), **kw)  # type: ignore[arg-type]


class FakeClock:
    """``clock()``/``wall()``/``sleep()`` for the monitor loop; ``interrupt_after`` sleeps raise Ctrl-C."""

    def __init__(self, start: float = 1000.0, interrupt_after: int | None = None) -> None:
        self.now = start
        self.sleeps = 0
        self.interrupt_after = interrupt_after

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_767_225_600.0 + self.now  # 2026-01-01T00:00:00Z + monotonic

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        if self.interrupt_after is not None and self.sleeps > self.interrupt_after:
            raise KeyboardInterrupt
        self.now += s


@dataclass
class FakeGpuBackend:
    """GPUs that answer from their scripts; ``reason`` set means "no GPU": :meth:`open` fails with it."""

    gpus: list[FakeGpu] = field(default_factory=lambda: [h200()])
    reason: str = ""
    opened: int = 0
    closed: int = 0
    reads: int = 0

    def open(self) -> bool:
        self.opened += 1
        return not self.reason

    def close(self) -> None:
        self.closed += 1

    def device_count(self) -> int:
        return len(self.gpus)

    def info(self, gpu: int) -> GpuInfo:
        return self.gpus[gpu].info

    def read(self, gpu: int, t_s: float, unix_time_s: float) -> GpuFrame:
        g = self.gpus[gpu]
        self.reads += 1
        values = {k: v for k, v in g.script(t_s).items() if g.info.gpm_supported or k not in GPM_NAMES}
        values["memory_used_bytes"] = g.memory_used_bytes
        if g.info.memory_total_bytes is not None:
            values["memory_total_bytes"] = g.info.memory_total_bytes
        values["mem_clock_mhz"] = 3201.0
        return GpuFrame(gpu, t_s, unix_time_s, values, g.throttle_reasons, g.processes)
