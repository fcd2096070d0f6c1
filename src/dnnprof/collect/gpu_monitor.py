"""The NVML side of ``dnnprof monitor``: :class:`NvmlBackend` reads one :class:`GpuFrame` per GPU per tick through
the one NVML wrapper (``collect.nvml.Nvml``).

Each GPU keeps two GPM sample buffers that swap roles every read: the GPM metrics of a frame cover the time since
the previous read of that GPU (NVML wants the two samples > 100 ms apart, so the monitor's interval is at least
0.2 s). A GPU without GPM (before Hopper, or GPM refused) gives the plain NVML fields only.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
from typing import Any

from dnnprof.collect.nvml import GPM_LINK_METRICS, GPM_METRICS, Nvml, NvmlUnavailable
from dnnprof.model.gpu_samples import GpuFrame, GpuInfo, ProcessUse

#: GPM metric id → frame value name: the sampler's metrics and the NVLink totals.
MONITOR_GPM: dict[int, str] = {**GPM_METRICS, **GPM_LINK_METRICS}


def process_identity(pid: int, proc: str = "/proc") -> tuple[str, str]:
    """``(command name, user)`` of a process from ``/proc``; ``"?"`` for what this host cannot see (a process in
    another PID namespace, e.g. another container). Reading another user's ``comm`` needs no privilege."""
    base = os.path.join(proc, str(pid))
    try:
        with open(os.path.join(base, "comm")) as f:
            name = f.read().strip() or "?"
    except OSError:
        return "?", "?"
    try:
        uid = os.stat(base).st_uid
    except OSError:
        return name, "?"
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return name, user


class _Gpu:
    def __init__(self, index: int, handle: Any, info: GpuInfo) -> None:
        self.index = index
        self.handle = handle
        self.info = info
        self.gpm: list[Any] = []  # [older, newer] once two reads have happened
        self.gpm_filled = 0


class NvmlBackend:
    """:class:`dnnprof.model.gpu_samples.GpuBackend` over NVML.

    Args:
        nvml: the wrapper to use (a wrapper over a fake ``pynvml`` in tests); None opens the real library.
        proc: where process names are looked up.
    """

    def __init__(self, nvml: Nvml | None = None, proc: str = "/proc") -> None:
        self.nvml = nvml or Nvml()
        self.proc = proc
        self.reason = ""
        self._gpus: dict[int, _Gpu] = {}

    def open(self) -> bool:
        if not self.nvml.open():
            self.reason = self.nvml.reason
            return False
        if self.device_count() == 0:
            self.reason = "NVML found no GPU"
            return False
        return True

    def close(self) -> None:
        for g in self._gpus.values():
            for buf in g.gpm:
                self.nvml.gpm_free(buf)
        self._gpus.clear()
        self.nvml.close()

    def device_count(self) -> int:
        return self.nvml.device_count()

    def _gpu(self, index: int) -> _Gpu:
        g = self._gpus.get(index)
        if g is not None:
            return g
        h = self.nvml.handle(index=index)
        if h is None:
            raise IndexError(f"NVML has no GPU {index}")
        d = self.nvml.device_info(h)
        support = self.nvml.gpm_support(h)
        info = GpuInfo(index=index, name=d.get("name", "?"), uuid=d.get("uuid", ""),
                       memory_total_bytes=d.get("memory_total_bytes"), gpm_supported=support.supported,
                       gpm_reason=support.reason)
        g = self._gpus[index] = _Gpu(index, h, info)
        if support.supported:
            try:
                g.gpm = [self.nvml.gpm_alloc(), self.nvml.gpm_alloc()]
            except NvmlUnavailable as e:
                g.info = dataclasses.replace(info, gpm_supported=False, gpm_reason=f"GPM sample buffers: {e}")
        return g

    def info(self, gpu: int) -> GpuInfo:
        return self._gpu(gpu).info

    def read(self, gpu: int, t_s: float, unix_time_s: float) -> GpuFrame:
        g = self._gpu(gpu)
        nv, h = self.nvml, g.handle
        values: dict[str, float] = dict(nv.read_basic(gpu, h))
        mem = nv.query("nvmlDeviceGetMemoryInfo", h, key=(gpu, "mem"))
        if mem is not None:
            values["memory_total_bytes"] = float(mem.total)
        mclk = nv.query("nvmlDeviceGetClockInfo", h, nv.const("NVML_CLOCK_MEM", 2), key=(gpu, "mem_clock"))
        if mclk is not None:
            values["mem_clock_mhz"] = float(mclk)
        if g.gpm:
            older, newer = g.gpm
            if nv.gpm_sample(h, older):  # the older buffer takes the new sample: swap
                g.gpm = [newer, older]
                g.gpm_filled = min(2, g.gpm_filled + 1)
                if g.gpm_filled == 2:
                    for mid, v in nv.gpm_metrics(newer, older, MONITOR_GPM).items():
                        values[MONITOR_GPM[mid]] = v
        procs = tuple(ProcessUse(pid, used, *process_identity(pid, self.proc)) for pid, used in nv.processes(gpu, h))
        return GpuFrame(gpu=gpu, t_s=t_s, unix_time_s=unix_time_s, values=values,
                        throttle_reasons=nv.clock_event_reasons(gpu, h) or (), processes=procs)
