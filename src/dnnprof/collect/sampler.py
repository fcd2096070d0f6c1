"""Background NVML / NVML-GPM sampling of a GPU while it trains.

One daemon thread reads, every ``period_s`` (10–100 ms), the plain NVML metrics (GPU-Util, memory used, power,
SM clock, temperature) and, on Hopper and later, NVML GPM metrics (SM active, SM occupancy, tensor-pipe activity,
DRAM bandwidth, FP16/32/64 pipes, PCIe). GPM metrics are computed between two counter samples that NVML wants
more than 100 ms apart, so the sampler keeps a small ring of GPM samples and, at every tick, pairs the newest
with the newest one at least ``gpm_window_s`` older: a rolling window, one value per tick, time-stamped at the
window's midpoint. Timestamps are ``clock_ns()`` (Unix-epoch ns by default), converted to the trace clock later.

With the real ``pynvml`` the sampling loop runs in a helper process (``python -m dnnprof.collect.sampler``) that
sends its samples back when told to stop: a sampling thread inside the training process would take the GIL from
the training thread at every NVML call (each ``pynvml`` call releases and re-takes it), and a training loop that
launches kernels from Python pays for every such hand-off. With a fake NVML (tests), or where the helper cannot
start, the loop runs in a daemon thread of this process.

All NVML calls go through :class:`dnnprof.collect.nvml.Nvml`; nothing here raises because NVML is missing.
"""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

from dnnprof.collect.nvml import GPM_METRICS, Nvml

#: Default sampling period. GPM values span >= 110 ms and NVML's utilisation its own 1/6 s window, so sampling
#: faster adds correlated copies, not resolution; each tick costs the training thread some GIL hand-offs.
DEFAULT_PERIOD_S = 0.05
#: NVML needs > 100 ms between the two GPM samples of one metric computation.
GPM_MIN_WINDOW_S = 0.11
#: How long ``start()`` waits for the helper process's first sample: a window that opens before the helper has
#: imported and opened NVML would get no samples (a short window none at all).
HELPER_READY_TIMEOUT_S = 10.0


class _GpmRing:
    """A ring of GPM sample buffers for one device, recycled oldest first."""

    def __init__(self, nvml: Nvml, handle: Any, size: int) -> None:
        self.nvml = nvml
        self.handle = handle
        self.size = size
        self.ring: collections.deque[tuple[int, Any]] = collections.deque()
        self.buffers: list[Any] = []

    def take(self, ts_ns: int) -> tuple[int, Any] | None:
        """Sample now; return the newest pair partner (ts, buffer) that is old enough, else None."""
        if len(self.ring) >= self.size:
            _, buf = self.ring.popleft()
        else:
            buf = self.nvml.gpm_alloc()
            self.buffers.append(buf)
        if not self.nvml.gpm_sample(self.handle, buf):
            self.ring.appendleft((-(1 << 62), buf))  # keep the buffer, never pair with it
            return None
        self.ring.append((ts_ns, buf))
        return ts_ns, buf

    def partner(self, now_ns: int, window_ns: int) -> tuple[int, Any] | None:
        for ts, buf in reversed(self.ring):
            if 0 <= ts <= now_ns - window_ns:
                return ts, buf
        return None

    def free(self) -> None:
        for buf in self.buffers:
            self.nvml.gpm_free(buf)
        self.buffers.clear()
        self.ring.clear()


class NvmlSampler:
    """Samples NVML (and GPM where supported) for a list of devices in a background thread.

    Args:
        nvml: an opened :class:`Nvml` (the sampler records "not available" when it is not).
        devices: ``(cuda_device_index, nvml_handle)`` pairs.
        period_s: time between samples.
        gpm: try NVML GPM on devices that support it.
        gpm_window_s: minimum time between the two GPM samples of one value (NVML needs > 0.1 s).
        clock_ns: the time source; a fake clock makes ticks deterministic in tests.
        process: run the sampling loop in a helper process (None: when NVML is the ``pynvml`` module and every
            device has a UUID; the helper opens the same devices by UUID).
    """

    def __init__(
        self,
        nvml: Nvml,
        devices: Sequence[tuple[int, Any]],
        *,
        period_s: float = DEFAULT_PERIOD_S,
        gpm: bool = True,
        gpm_window_s: float = GPM_MIN_WINDOW_S,
        clock_ns: Callable[[], int] = time.time_ns,
        process: bool | None = None,
    ) -> None:
        if not 0.001 <= period_s <= 10:
            raise ValueError(f"sampling period {period_s} s is outside 0.001–10 s")
        self.nvml = nvml
        self.devices = list(devices)
        self.period_s = period_s
        self.window_ns = int(gpm_window_s * 1e9)
        self.clock_ns = clock_ns
        self.metric_names: list[str] = []
        self._metric_index: dict[str, int] = {}
        self.device: list[int] = []
        self.ts_ns: list[int] = []
        self.metric: list[int] = []
        self.value: list[float] = []
        self.ticks = 0
        self.late_ticks = 0
        self.error = ""
        self._gpm: dict[int, _GpmRing] = {}
        self._gpm_status: dict[int, str] = {}
        self._gpm_ids = list(GPM_METRICS)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._gpm_on = gpm
        self._proc: subprocess.Popen[str] | None = None
        self._uuids: list[tuple[int, str]] = []
        self.mode = "thread"
        self.ready_s: float | None = None  # how long the helper process took to take its first sample
        if process is not False and nvml.available and isinstance(nvml.lib, types.ModuleType) and clock_ns is time.time_ns:
            uuids = [(dev, nvml.device_info(h).get("uuid", "")) for dev, h in self.devices]
            if all(u for _, u in uuids):
                self._uuids = uuids
        elif process:
            raise ValueError("a helper process needs NVML as a module and the wall clock")
        if gpm and nvml.available:
            ring = int(gpm_window_s / period_s) + 2
            for dev, h in self.devices:
                support = nvml.gpm_support(h)
                self._gpm_status[dev] = "ok" if support.supported else support.reason
                if support.supported:
                    self._gpm[dev] = _GpmRing(nvml, h, ring)
        elif not gpm:
            self._gpm_status = {dev: "GPM sampling turned off" for dev, _ in self.devices}

    # --- sampling ------------------------------------------------------------------------------------------
    def _add(self, dev: int, ts: int, name: str, value: float) -> None:
        i = self._metric_index.get(name)
        if i is None:
            i = self._metric_index[name] = len(self.metric_names)
            self.metric_names.append(name)
        self.device.append(dev)
        self.ts_ns.append(ts)
        self.metric.append(i)
        self.value.append(value)

    def tick(self) -> None:
        """Take one sample of every device (the thread calls this every period; tests call it directly)."""
        if not self.nvml.available:
            return
        self.ticks += 1
        for dev, h in self.devices:
            ts = self.clock_ns()
            for name, v in self.nvml.read_basic(dev, h).items():
                self._add(dev, ts, name, v)
            ring = self._gpm.get(dev)
            if ring is None:
                continue
            now = self.clock_ns()
            newest = ring.take(now)
            if newest is None:
                continue
            old = ring.partner(now, self.window_ns)
            if old is None:
                continue
            mid = (old[0] + now) // 2
            for mid_id, v in self.nvml.gpm_metrics(old[1], newest[1], self._gpm_ids).items():
                self._add(dev, mid, GPM_METRICS[mid_id], v)

    def _run(self) -> None:
        period = self.period_s
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                self.tick()
                next_t += period
                delay = next_t - time.monotonic()
                if delay < 0:
                    self.late_ticks += 1
                    next_t = time.monotonic()
                    delay = 0.0
                if self._stop.wait(delay):
                    break
        except Exception as e:  # noqa: BLE001 - a sampler bug must not kill the training; it is reported
            self.error = f"sampler stopped: {type(e).__name__}: {e}"

    def start(self) -> None:
        """Start sampling (no-op when NVML is not available or already running): in a helper process when
        possible (see the module docstring), else in a daemon thread."""
        if self.running or not self.nvml.available or not self.devices:
            return
        if self._uuids and self._start_process():
            return
        self._stop.clear()
        self.mode = "thread"
        self._thread = threading.Thread(target=self._run, name="dnnprof-nvml-sampler", daemon=True)
        self._thread.start()

    def _start_process(self) -> bool:
        args = {"lib": self.nvml.lib.__name__, "devices": self._uuids, "period_s": self.period_s,
                "gpm": self._gpm_on, "gpm_window_s": self.window_ns / 1e9}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DNNPROF_")}
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "dnnprof.collect.sampler", json.dumps(args)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, close_fds=True)
        except OSError as e:
            self.error = f"sampler process could not start ({e}); sampled in a thread instead"
            return False
        self.mode = "process"
        self._wait_ready()
        return True

    def _wait_ready(self) -> None:
        """Block until the helper has taken its first sample (its "ready" line), at most
        :data:`HELPER_READY_TIMEOUT_S`; a late helper is reported, not fatal."""
        assert self._proc is not None and self._proc.stdout is not None
        t0 = time.monotonic()
        ready, _, _ = select.select([self._proc.stdout], [], [], HELPER_READY_TIMEOUT_S)
        line = self._proc.stdout.readline() if ready else ""
        self.ready_s = round(time.monotonic() - t0, 3)
        if line.strip() != "ready":
            self.error = (f"sampler process not sampling after {self.ready_s:.1f} s "
                          f"({'it exited' if self._proc.poll() is not None else 'still starting'}): "
                          "the first steps may have no samples")

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, err = proc.communicate("stop\n", timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        try:
            doc = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        except json.JSONDecodeError:
            doc = None
        if doc is None:
            self.error = f"sampler process returned no samples (exit {proc.returncode}): {err.strip()[-300:]}"
            return
        cols, st = doc["columns"], doc["status"]
        self.metric_names = list(cols["metrics"])
        self._metric_index = {n: i for i, n in enumerate(self.metric_names)}
        self.device, self.ts_ns = list(cols["device"]), list(cols["ts_ns"])
        self.metric, self.value = list(cols["metric"]), list(cols["value"])
        self.ticks, self.late_ticks = int(st["ticks"]), int(st["late_ticks"])
        if st.get("error"):
            self.error = st["error"]

    def stop(self) -> None:
        """Stop sampling and release GPM buffers (idempotent)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        self._stop_process()
        for ring in self._gpm.values():
            ring.free()

    @property
    def running(self) -> bool:
        return self._thread is not None or self._proc is not None

    # --- results -------------------------------------------------------------------------------------------
    def columns(self) -> dict[str, Any]:
        """Samples as JSON-ready columns: ``metrics`` (names), ``device``, ``ts_ns``, ``metric`` (index), ``value``."""
        return {"metrics": list(self.metric_names), "device": list(self.device), "ts_ns": list(self.ts_ns),
                "metric": list(self.metric), "value": list(self.value)}

    def status(self) -> dict[str, Any]:
        """What was sampled and what was not, with reasons."""
        return {
            "nvml": "ok" if self.nvml.available else (self.nvml.reason or "not available"),
            "sampled_in": self.mode,
            "period_s": self.period_s,
            "gpm_window_s": self.window_ns / 1e9,
            "devices": [dev for dev, _ in self.devices],
            "gpm": {str(dev): s for dev, s in self._gpm_status.items()},
            "ticks": self.ticks,
            "late_ticks": self.late_ticks,
            "samples": len(self.value),
            "metrics": list(self.metric_names),
            **({"helper_ready_s": self.ready_s} if self.ready_s is not None else {}),
            **({"error": self.error} if self.error else {}),
        }


def _helper(argv: list[str]) -> int:
    """The helper process: sample the devices (by UUID) until a line or EOF arrives on stdin, then print
    ``{"columns": …, "status": …}`` as one JSON line."""
    import importlib

    from dnnprof.collect.nvml import Nvml

    args = json.loads(argv[0])
    nvml = Nvml(lib=importlib.import_module(args["lib"]))
    devices = []
    if nvml.open():
        devices = [(int(dev), h) for dev, uuid in args["devices"] if (h := nvml.handle(uuid=uuid)) is not None]
    sampler = NvmlSampler(nvml, devices, period_s=float(args["period_s"]), gpm=bool(args["gpm"]),
                          gpm_window_s=float(args["gpm_window_s"]), process=False)
    sampler.start()
    deadline = time.monotonic() + HELPER_READY_TIMEOUT_S
    while sampler.running and sampler.ticks == 0 and not sampler.error and time.monotonic() < deadline:
        time.sleep(0.002)
    sys.stdout.write("ready\n")  # the first sample is taken: the parent's window may open
    sys.stdout.flush()
    sys.stdin.readline()
    sampler.stop()
    if len(devices) < len(args["devices"]):
        sampler.error = sampler.error or f"NVML found {len(devices)} of {len(args['devices'])} devices by UUID"
    sys.stdout.write(json.dumps({"columns": sampler.columns(), "status": sampler.status()}) + "\n")
    sys.stdout.flush()
    nvml.close()
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1:]))
