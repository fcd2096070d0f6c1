"""NVML wrapper and background sampler, against a fake NVML injected through the ``lib`` seam."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from dnnprof.collect.nvml import GPM_METRICS, Nvml
from dnnprof.collect.sampler import NvmlSampler

NOT_SUPPORTED, NOT_FOUND, LIB_NOT_FOUND = 3, 6, 12
MS = 1_000_000


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", NOT_FOUND: "Not Found",
                LIB_NOT_FOUND: "NVML Shared Library Not Found"}.get(self.value, "Unknown Error")


class FakeGpmMetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=-1, value=0.0) for _ in range(98)]


class FakeNvml:
    """The pynvml functions dnnprof uses; GPM values encode the two samples' times so tests can check pairing."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    def __init__(self, clock: list[int], *, gpm: bool = True, power: bool = True, init_error: int | None = None):
        self.clock = clock
        self.gpm = gpm
        self.power = power
        self.init_error = init_error
        self.calls: dict[str, int] = {}
        self.pairs: list[tuple[int, int]] = []
        self.freed = 0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.159.04"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-1234":
            raise FakeNVMLError(NOT_FOUND)
        return "h0"

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return "GPU-1234"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=97, memory=31)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(total=141 << 30, used=20 << 30, free=121 << 30)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        self._count("power")
        if not self.power:
            raise FakeNVMLError(NOT_SUPPORTED)
        return 412_500

    def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTemperature(self, h: str, kind: int) -> int:
        return 45

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        return SimpleNamespace(isSupportedDevice=1 if self.gpm else 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        self._count("alloc")
        return SimpleNamespace(t=None)

    def nvmlGpmSampleFree(self, s: Any) -> None:
        self.freed += 1

    def nvmlGpmSampleGet(self, h: str, s: Any) -> None:
        s.t = self.clock[0]

    def nvmlGpmMetricsGet(self, mg: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        assert mg.version == 1
        self.pairs.append((mg.sample1.t, mg.sample2.t))
        for m in mg.metrics[: mg.numMetrics]:
            if m.metricId == 13:  # FP16 pipe: pretend this GPU cannot compute it
                m.nvmlReturn = NOT_SUPPORTED
                continue
            m.nvmlReturn = 0
            m.value = float(m.metricId) + (mg.sample2.t - mg.sample1.t) / 1e9
        return mg


def _sampler(fake: FakeNvml, clock: list[int], **kw: Any) -> NvmlSampler:
    nvml = Nvml(lib=fake)
    assert nvml.open()
    return NvmlSampler(nvml, [(0, nvml.handle(uuid="1234"))], clock_ns=lambda: clock[0], **kw)


def _by_metric(s: NvmlSampler) -> dict[str, list[tuple[int, float]]]:
    cols = s.columns()
    out: dict[str, list[tuple[int, float]]] = {}
    for ts, m, v in zip(cols["ts_ns"], cols["metric"], cols["value"], strict=True):
        out.setdefault(cols["metrics"][m], []).append((ts, v))
    return out


def test_basic_metrics_every_tick_with_units_in_names() -> None:
    clock = [1_000 * MS]
    s = _sampler(FakeNvml(clock, gpm=False), clock, period_s=0.02)
    for _ in range(3):
        s.tick()
        clock[0] += 20 * MS
    m = _by_metric(s)
    assert {k: v[0][1] for k, v in m.items()} == {
        "gpu_util_pct": 97.0, "mem_util_pct": 31.0, "memory_used_bytes": float(20 << 30), "power_w": 412.5,
        "sm_clock_mhz": 1980.0, "temperature_c": 45.0}
    assert [ts for ts, _ in m["power_w"]] == [1_000 * MS, 1_020 * MS, 1_040 * MS]
    assert s.status()["gpm"] == {"0": "NVML GPM is not supported on this GPU (needs Hopper or later)"}


def test_gpm_pairs_samples_more_than_100ms_apart_and_stamps_the_midpoint() -> None:
    clock = [5_000 * MS]
    fake = FakeNvml(clock)
    s = _sampler(fake, clock, period_s=0.02)
    for _ in range(12):  # 12 ticks, 20 ms apart: 220 ms
        s.tick()
        clock[0] += 20 * MS
    assert fake.pairs, "no GPM metrics were computed"
    assert all(new - old >= 110 * MS for old, new in fake.pairs)
    assert all(new - old <= 130 * MS for old, new in fake.pairs)  # the newest partner that is old enough
    m = _by_metric(s)
    assert "fp16_active_pct" not in m  # unsupported metric left out, not reported as 0
    ts, value = m["sm_active_pct"][0]
    old, new = fake.pairs[0]
    assert ts == (old + new) // 2
    assert value == pytest.approx(2 + (new - old) / 1e9)
    assert set(GPM_METRICS.values()) - set(m) == {"fp16_active_pct"}
    # Ring buffers are reused, not allocated per tick, and freed on stop.
    assert fake.calls["alloc"] <= int(0.11 / 0.02) + 2
    s.stop()
    assert fake.freed == fake.calls["alloc"]


def test_unsupported_query_is_not_retried_every_tick() -> None:
    clock = [0]
    fake = FakeNvml(clock, gpm=False, power=False)
    s = _sampler(fake, clock)
    for _ in range(5):
        s.tick()
    assert fake.calls["power"] == 1
    assert "power_w" not in _by_metric(s)
    assert "gpu_util_pct" in _by_metric(s)


def test_nvml_that_cannot_start_says_why_and_sampler_carries_on() -> None:
    nvml = Nvml(lib=FakeNvml([0], init_error=LIB_NOT_FOUND))
    assert not nvml.open()
    assert nvml.reason == "NVML init failed: NVML Shared Library Not Found (NVML error 12)"
    s = NvmlSampler(nvml, [(0, None)])
    s.start()  # no thread without NVML
    s.tick()
    assert not s.running
    assert s.status()["nvml"] == nvml.reason
    assert s.columns()["value"] == []


def test_missing_pynvml_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    nvml = Nvml()
    assert not nvml.open()
    assert "nvidia-ml-py is not installed" in nvml.reason


def test_handle_by_uuid_then_index_and_device_info() -> None:
    nvml = Nvml(lib=FakeNvml([0]))
    nvml.open()
    assert nvml.handle(uuid="1234") == "h0"
    assert nvml.handle(uuid="GPU-other", index=1) == "h1"
    assert nvml.handle(uuid="GPU-other") is None
    assert nvml.device_info("h0") == {"name": "NVIDIA H200", "uuid": "GPU-1234", "memory_total_bytes": 141 << 30}
    assert nvml.driver_version() == "580.159.04"


def test_background_thread_samples_and_stops() -> None:
    fake = FakeNvml([0], gpm=False)
    nvml = Nvml(lib=fake)
    nvml.open()
    s = NvmlSampler(nvml, [(0, "h0")], period_s=0.005)
    s.start()
    deadline = time.monotonic() + 5
    while s.ticks < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    assert not s.running
    assert s.ticks >= 3
    ts = s.columns()["ts_ns"]
    assert ts == sorted(ts) and ts[0] > 1_600_000_000 * 10**9  # wall-clock epoch ns by default


def test_bad_period_is_refused() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.001–10 s"):
        NvmlSampler(Nvml(lib=FakeNvml([0])), [], period_s=0.0)


FAKE_MODULE = '''
from types import SimpleNamespace


class NVMLError(Exception):
    pass


NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetHandleByUUID(uuid):
    if uuid != "GPU-1234":
        raise NVMLError("Not Found")
    return "h0"


def nvmlDeviceGetName(h):
    return "NVIDIA H200"


def nvmlDeviceGetUUID(h):
    return "GPU-1234"


def nvmlDeviceGetUtilizationRates(h):
    return SimpleNamespace(gpu=97, memory=31)


def nvmlDeviceGetMemoryInfo(h):
    return SimpleNamespace(total=141 << 30, used=20 << 30, free=121 << 30)


def nvmlDeviceGetPowerUsage(h):
    return 412_500


def nvmlDeviceGetClockInfo(h, kind):
    return 1980


def nvmlDeviceGetTemperature(h, kind):
    return 45


def nvmlGpmQueryDeviceSupport(h):
    return SimpleNamespace(isSupportedDevice=0)
'''


@pytest.fixture
def module_nvml(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Nvml:
    """An opened Nvml on a fake ``pynvml``-like module the helper process can import too."""
    import importlib

    (tmp_path / "fake_pynvml_mod.py").write_text(FAKE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    nvml = Nvml(lib=importlib.import_module("fake_pynvml_mod"))
    assert nvml.open()
    return nvml


def test_helper_process_samples_and_sends_them_back(module_nvml: Nvml) -> None:
    nvml = module_nvml
    s = NvmlSampler(nvml, [(0, nvml.handle(uuid="1234"))], period_s=0.01)
    s.start()
    assert s.running and s.mode == "process"
    time.sleep(1.0)
    s.stop()
    assert not s.running
    st = s.status()
    assert st["sampled_in"] == "process" and "error" not in st, st
    assert s.ticks >= 3 and st["gpm"] == {"0": "NVML GPM is not supported on this GPU (needs Hopper or later)"}
    cols = s.columns()
    assert "power_w" in cols["metrics"] and cols["ts_ns"] == sorted(cols["ts_ns"])
    assert cols["ts_ns"][0] > 1_600_000_000 * 10**9


def test_helper_process_is_sampling_when_start_returns(module_nvml: Nvml) -> None:
    """A window that opens right after start() (a script whose steps take milliseconds) has samples from its
    first moment: start() waits for the helper's first sample instead of racing its import of NVML."""
    nvml = module_nvml
    s = NvmlSampler(nvml, [(0, nvml.handle(uuid="1234"))], period_s=0.5)
    s.start()
    started = time.time_ns()
    s.stop()
    st, cols = s.status(), s.columns()
    assert st["sampled_in"] == "process" and "error" not in st, st
    assert 0 < st["helper_ready_s"] < 10
    assert cols["ts_ns"] and cols["ts_ns"][0] <= started


def test_fake_library_objects_sample_in_a_thread() -> None:
    fake = FakeNvml([0], gpm=False)
    nvml = Nvml(lib=fake)
    nvml.open()
    s = NvmlSampler(nvml, [(0, "h0")], period_s=0.005)
    s.start()
    assert s.mode == "thread"
    s.stop()
