"""The one chokepoint for NVML: every ``pynvml`` call in dnnprof goes through :class:`Nvml`.

NVML may be missing (no ``nvidia-ml-py``, no driver, a container without ``libnvidia-ml.so``), a query may be
unsupported on a given GPU (power on some boards, GPM before Hopper), or the GPU may fall off the bus. None of that
may crash a profiling run: every failure becomes "not available" with a reason (nvitop's ``nvmlQuery`` habit), and
queries that failed as unsupported are not retried on every sample.

The library object is a seam: pass a fake module with the same function names to test without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: NVML GPM metric ids (nvml.h ``NVML_GPM_METRIC_*``) → dnnprof sample names (unit in the name).
GPM_METRICS: dict[int, str] = {
    1: "gr_engine_active_pct",
    2: "sm_active_pct",
    3: "sm_occupancy_pct",
    5: "tensor_active_pct",
    7: "hmma_tensor_active_pct",
    10: "dram_bw_util_pct",
    11: "fp64_active_pct",
    12: "fp32_active_pct",
    13: "fp16_active_pct",
    20: "pcie_tx_mib_per_s",
    21: "pcie_rx_mib_per_s",
}

#: GPM link metrics the live monitor reads beside :data:`GPM_METRICS` (MiB/s over all NVLinks).
GPM_LINK_METRICS: dict[int, str] = {
    60: "nvlink_rx_mib_per_s",
    61: "nvlink_tx_mib_per_s",
}

#: nvml.h ``nvmlClocksEventReason*`` (formerly ``nvmlClocksThrottleReason*``) bits → short words.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "power cap",
    0x8: "hw slowdown",
    0x10: "sync boost",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "power brake",
    0x100: "display clocks",
    0x200: "board limit",
    0x400: "reliability",
}

#: Plain NVML readings taken on every sample, with the nvidia-smi field each matches.
BASIC_METRICS: dict[str, str] = {
    "gpu_util_pct": "utilization.gpu (time a kernel was running, not how much of the GPU it used)",
    "mem_util_pct": "utilization.memory (time device memory was read or written)",
    "memory_used_bytes": "memory.used",
    "power_w": "power.draw",
    "sm_clock_mhz": "clocks.sm",
    "temperature_c": "temperature.gpu",
}

_NOT_SUPPORTED_CODES = frozenset({3})  # NVML_ERROR_NOT_SUPPORTED: stop asking for this metric on this device


class NvmlUnavailable(RuntimeError):
    """NVML cannot answer; ``str(e)`` says why."""


@dataclass
class GpmSupport:
    """Whether NVML GPM works on a device, and why not when it does not."""

    supported: bool
    reason: str = ""


class Nvml:
    """A handle on the NVML library that never raises from a query.

    Args:
        lib: the ``pynvml`` module, or a fake with the same function names (tests); ``None`` imports ``pynvml``.
    """

    def __init__(self, lib: Any | None = None) -> None:
        self._lib = lib
        self._open = False
        self.reason = ""
        self._unsupported: set[tuple[int, str]] = set()

    # --- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> bool:
        """Initialise NVML; False (with :attr:`reason`) when it cannot be used here."""
        if self._open:
            return True
        if self._lib is None:
            try:
                import pynvml
            except ImportError:
                self.reason = "nvidia-ml-py is not installed (pip install 'dnnprof[nvml]')"
                return False
            self._lib = pynvml
        try:
            self._lib.nvmlInit()
        except self._error_types() as e:
            self.reason = f"NVML init failed: {self._describe(e)}"
            return False
        except OSError as e:
            self.reason = f"NVML library could not be loaded: {e}"
            return False
        self._open = True
        self.reason = ""
        return True

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self._open:
            self._open = False
            try:
                self._lib.nvmlShutdown()
            except self._error_types():
                pass  # shutting down a library that already failed: nothing left to release

    @property
    def available(self) -> bool:
        return self._open

    @property
    def lib(self) -> Any:
        """The library object in use (``pynvml`` or a fake); None before :meth:`open` imported it."""
        return self._lib

    # --- the chokepoint ------------------------------------------------------------------------------------
    def _error_types(self) -> tuple[type[BaseException], ...]:
        err = getattr(self._lib, "NVMLError", None)
        return (err,) if isinstance(err, type) else ()

    @staticmethod
    def _describe(e: BaseException) -> str:
        try:
            text = str(e)
        except Exception:  # noqa: BLE001 - pynvml's __str__ itself calls into NVML and can fail
            text = ""
        code = getattr(e, "value", None)
        return f"{text or type(e).__name__}" + (f" (NVML error {code})" if code is not None else "")

    def call(self, fn: str, *args: Any) -> Any:
        """Call ``pynvml.<fn>(*args)``; raise :class:`NvmlUnavailable` with a reason on any NVML failure."""
        if not self._open:
            raise NvmlUnavailable(self.reason or "NVML is not initialised")
        f = getattr(self._lib, fn, None)
        if f is None:
            raise NvmlUnavailable(f"{fn} is not in this nvidia-ml-py (too old?)")
        try:
            return f(*args)
        except self._error_types() as e:
            raise NvmlUnavailable(f"{fn}: {self._describe(e)}") from None

    def query(self, fn: str, *args: Any, key: tuple[int, str] | None = None) -> Any:
        """Like :meth:`call` but returns None on failure; a query that is "not supported" on a device (``key``)
        is remembered and not tried again."""
        if key is not None and key in self._unsupported:
            return None
        try:
            return self.call(fn, *args)
        except NvmlUnavailable as e:
            if key is not None and any(f"NVML error {c})" in str(e) for c in _NOT_SUPPORTED_CODES):
                self._unsupported.add(key)
            return None

    def const(self, name: str, default: Any) -> Any:
        """A constant of the library (``NVML_CLOCK_SM``), or ``default`` when this version lacks it."""
        return getattr(self._lib, name, default)

    # --- typed helpers -------------------------------------------------------------------------------------
    def driver_version(self) -> str | None:
        v = self.query("nvmlSystemGetDriverVersion")
        return v.decode() if isinstance(v, bytes) else v

    def device_count(self) -> int:
        n = self.query("nvmlDeviceGetCount")
        return int(n) if n is not None else 0

    def handle(self, index: int | None = None, uuid: str | None = None) -> Any:
        """A device handle by UUID (preferred: CUDA and NVML numbering can differ) or by NVML index."""
        if uuid:
            u = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            h = self.query("nvmlDeviceGetHandleByUUID", u)
            if h is not None:
                return h
        if index is not None:
            return self.query("nvmlDeviceGetHandleByIndex", index)
        return None

    def device_info(self, h: Any) -> dict[str, Any]:
        """Name, UUID and total memory of a device (missing keys when NVML cannot say)."""
        out: dict[str, Any] = {}
        for key, fn in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
            v = self.query(fn, h)
            if v is not None:
                out[key] = v.decode() if isinstance(v, bytes) else str(v)
        mem = self.query("nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            out["memory_total_bytes"] = int(mem.total)
        return out

    def read_basic(self, device: int, h: Any) -> dict[str, float]:
        """One reading of the plain NVML metrics (``BASIC_METRICS`` names); unsupported ones are left out."""
        out: dict[str, float] = {}
        util = self.query("nvmlDeviceGetUtilizationRates", h, key=(device, "util"))
        if util is not None:
            out["gpu_util_pct"] = float(util.gpu)
            out["mem_util_pct"] = float(util.memory)
        mem = self.query("nvmlDeviceGetMemoryInfo", h, key=(device, "mem"))
        if mem is not None:
            out["memory_used_bytes"] = float(mem.used)
        mw = self.query("nvmlDeviceGetPowerUsage", h, key=(device, "power"))
        if mw is not None:
            out["power_w"] = float(mw) / 1000.0
        clk = self.query("nvmlDeviceGetClockInfo", h, self.const("NVML_CLOCK_SM", 1), key=(device, "clock"))
        if clk is not None:
            out["sm_clock_mhz"] = float(clk)
        temp = self.query("nvmlDeviceGetTemperature", h, self.const("NVML_TEMPERATURE_GPU", 0),
                          key=(device, "temp"))
        if temp is not None:
            out["temperature_c"] = float(temp)
        return out

    def clock_event_reasons(self, device: int, h: Any) -> tuple[str, ...] | None:
        """Why the clocks are below their maximum now (:data:`CLOCK_EVENT_REASONS` words); None when NVML cannot
        say. Newer drivers name the call ``ClocksEvent``, older ``ClocksThrottle``."""
        mask = self.query("nvmlDeviceGetCurrentClocksEventReasons", h, key=(device, "clock_events"))
        if mask is None:
            mask = self.query("nvmlDeviceGetCurrentClocksThrottleReasons", h, key=(device, "clock_throttle"))
        if mask is None:
            return None
        return tuple(word for bit, word in CLOCK_EVENT_REASONS.items() if int(mask) & bit)

    def processes(self, device: int, h: Any) -> list[tuple[int, float | None]]:
        """``(pid, used GPU memory bytes or None)`` of the compute and graphics processes on a device. NVML lists
        other users' processes too; without root their memory may be unknown (None), which is not an error."""
        seen: dict[int, float | None] = {}
        for fn, key in (("nvmlDeviceGetComputeRunningProcesses", "procs_compute"),
                        ("nvmlDeviceGetGraphicsRunningProcesses", "procs_graphics")):
            for p in self.query(fn, h, key=(device, key)) or ():
                pid = int(getattr(p, "pid", -1))
                used = getattr(p, "usedGpuMemory", None)
                # NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1; pynvml turns it into None, older ones may not
                mem = float(used) if used is not None and 0 <= int(used) < (1 << 63) else None
                if pid >= 0 and (pid not in seen or seen[pid] is None):
                    seen[pid] = mem
        return sorted(seen.items())

    # --- GPM (Hopper and later) ----------------------------------------------------------------------------
    def gpm_support(self, h: Any) -> GpmSupport:
        try:
            s = self.call("nvmlGpmQueryDeviceSupport", h)
        except NvmlUnavailable as e:
            return GpmSupport(False, f"GPM query failed: {e}")
        if not getattr(s, "isSupportedDevice", 0):
            return GpmSupport(False, "NVML GPM is not supported on this GPU (needs Hopper or later)")
        return GpmSupport(True)

    def gpm_alloc(self) -> Any:
        """A GPM sample buffer (raises :class:`NvmlUnavailable`)."""
        return self.call("nvmlGpmSampleAlloc")

    def gpm_free(self, sample: Any) -> None:
        self.query("nvmlGpmSampleFree", sample)

    def gpm_sample(self, h: Any, sample: Any) -> bool:
        """Fill ``sample`` with the device's counters now; False when NVML refused."""
        try:
            self.call("nvmlGpmSampleGet", h, sample)
        except NvmlUnavailable:
            return False
        return True

    def gpm_metrics(self, older: Any, newer: Any, metric_ids: Iterable[int]) -> dict[int, float]:
        """GPM metrics over the interval between two samples (which must be > 100 ms apart).

        Metrics the device cannot compute are left out.
        """
        ids = list(metric_ids)
        mg = self._lib.c_nvmlGpmMetricsGet_t()
        mg.version = self.const("NVML_GPM_METRICS_GET_VERSION", 1)
        mg.numMetrics = len(ids)
        mg.sample1 = older
        mg.sample2 = newer
        for i, m in enumerate(ids):
            mg.metrics[i].metricId = m
        try:
            res = self.call("nvmlGpmMetricsGet", mg)
        except NvmlUnavailable:
            return {}
        out: dict[int, float] = {}
        for i, m in enumerate(ids):
            metric = res.metrics[i]
            if int(metric.nvmlReturn) == 0:
                out[m] = float(metric.value)
        return out
