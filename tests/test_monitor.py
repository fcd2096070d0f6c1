"""``dnnprof monitor`` on a scripted GPU (tests/fake_gpu.py, injected as the monitor's backend): golden frames and
summary from a fixed-width console, recording columns, exit codes, the no-GPU and no-GPM paths, Ctrl-C."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from dnnprof.analysis.live_verdicts import verdict
from dnnprof.cli.errors import UserError
from dnnprof.cli.main import main
from dnnprof.cli.monitor import MonitorOptions, monitor
from dnnprof.model.gpu_samples import COLUMNS, METRIC_NAMES, GpuInfo, ProcessUse, read_samples
from fake_gpu import IDLE, FakeClock, FakeGpu, FakeGpuBackend, h200, spin_then_gemm

GOLDEN = Path(__file__).parent / "golden"
SRC = Path(__file__).resolve().parents[1] / "src"


def _console() -> Console:
    return Console(record=True, width=120, file=io.StringIO(), color_system=None, force_terminal=False,
                   legacy_windows=False)


def _golden(name: str, got: str) -> None:
    path = GOLDEN / name
    if os.environ.get("DNNPROF_REGOLD"):
        path.write_text(got)
    assert got == path.read_text(), f"{name} changed: rerun with DNNPROF_REGOLD=1 and review the diff"


def _run(opts: MonitorOptions, backend: FakeGpuBackend, clock: FakeClock | None = None) -> tuple[int, str]:
    con = _console()
    clock = clock or FakeClock()
    rc = monitor(opts, backend, con, clock=clock.clock, wall=clock.wall, sleep=clock.sleep, live=False)
    return rc, con.export_text()


PROCS = (ProcessUse(4242, 18.5 * (1 << 30), "python", "alice"),
         ProcessUse(777, None, "?", "?"))  # another user's process in another container: shown, memory unknown


def test_frame_golden_spin_shows_busy_but_idle_sms() -> None:
    """Ten seconds into a one-block spin: GPU-Util 100 %, SM active 0.8 %, and the words say what that means."""
    backend = FakeGpuBackend([h200(processes=PROCS, throttle_reasons=("power cap",))])
    rc, out = _run(MonitorOptions(duration_s=10.0), backend)
    assert rc == 0 and backend.closed == 1
    assert "busy but mostly idle SMs" in out and "clocks held down: power cap" in out
    assert "not shown" in out  # the other user's process memory
    _golden("monitor_frame.txt", out)


def test_no_gpm_gpu_shows_nvml_fields_and_a_note() -> None:
    rc, out = _run(MonitorOptions(duration_s=20.0), FakeGpuBackend([h200(gpm=False)]))
    assert rc == 0
    assert "note: no GPM (NVML GPM is not supported on this GPU (needs Hopper or later))" in out
    assert "GPU-Util" in out and "SM active" not in out and "Tensor" not in out
    assert "without GPM NVML cannot say how much of the GPU it uses" in out


def test_summary_golden_gpu_util_against_sm_active(tmp_path: Path) -> None:
    """Record 2 s idle, 10 s spin, 8 s GEMM: the summary names the gap between GPU-Util and SM active."""
    rec = tmp_path / "samples.csv"
    rc, out = _run(MonitorOptions(duration_s=20.0, record=rec), FakeGpuBackend([h200(), h200(1, gpm=False)]))
    assert rc == 0
    frame_end = out.index("monitoring stopped")
    summary = out[frame_end:].replace(str(rec), "<RECORD>")
    # 41 samples (0–20 s every 0.5 s): 4 idle, 20 spin (100 % / 0.757 %), 17 GEMM (99 % / 95.6 %)
    util, sm = (20 * 100 + 17 * 99) / 41, (20 * 0.757 + 17 * 95.6) / 41
    assert f"GPU 0: GPU-Util said {util:.0f} %, SMs were actually {sm:.1f} % active" in summary
    assert "GPU-Util said 90 %, SMs were actually 40.0 % active" in summary
    assert "GPU 1: GPU-Util said 90 %; no GPM on this GPU" in summary
    _golden("monitor_summary.txt", summary)


def _idle_h100(t_s: float) -> dict[str, float]:
    """An idle H100 beside the busy one: ~1 MB/s of PCIe traffic, which reads as KiB/s with four digits."""
    return {**IDLE, "pcie_tx_mib_per_s": 0.9827, "pcie_rx_mib_per_s": 0.5985, "power_w": 71.0}


@pytest.mark.parametrize(("width", "tables"), [(80, 2), (120, 2), (180, 1)])
def test_summary_of_four_gpus_is_never_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int,
                                           tables: int) -> None:
    """Four GPUs on a narrow console: a line per GPU, numbers and metric names whole (no ellipsis, no wrapped
    label), the GPUs in as many tables as the width needs (180: what a pipe gets)."""
    monkeypatch.chdir(tmp_path)
    rec = Path("samples.csv")
    name = "NVIDIA H100 80GB HBM3"
    gpus = [FakeGpu(GpuInfo(i, name, f"GPU-{i:04d}", 85_520_809_984.0, True),
                    script=spin_then_gemm if i == 0 else _idle_h100) for i in range(4)]
    con = Console(record=True, width=width, file=io.StringIO(), color_system=None, force_terminal=False,
                  legacy_windows=False)
    clock = FakeClock()
    rc = monitor(MonitorOptions(duration_s=20.0, record=rec), FakeGpuBackend(gpus), con, clock=clock.clock,
                 wall=clock.wall, sleep=clock.sleep, live=False)
    out = con.export_text()
    summary = out[out.index("monitoring stopped"):]
    assert rc == 0
    assert "…" not in summary
    assert all(len(line) <= width for line in summary.splitlines())
    for i in range(4):
        assert f"GPU {i}: {name}, 41 samples over 20.0 s" in summary
        assert f"GPU {i} mean" in summary
    assert "1,006.3 KiB/s" in summary and " SM occupancy " in summary and " Temperature " in summary
    assert summary.count(" metric ") == tables
    if width < 180:
        _golden(f"monitor_summary_4gpu_{width}.txt", summary)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_record_columns_have_units_and_missing_is_empty(tmp_path: Path, suffix: str) -> None:
    rec = tmp_path / f"s{suffix}"
    rc, _ = _run(MonitorOptions(duration_s=3.0, interval_s=0.5, record=rec),
                 FakeGpuBackend([h200(), h200(1, gpm=False)]))
    assert rc == 0
    cols = read_samples(rec)
    assert tuple(cols) == COLUMNS
    assert all(c.endswith(("_pct", "_bytes", "_w", "_mhz", "_c", "_mib_per_s", "_s")) for c in METRIC_NAMES)
    assert len(cols["t_s"]) == 2 * 7  # 0, 0.5, … 3.0 s for two GPUs
    assert cols["gpu"][:2] == [0, 1]
    assert cols["t_s"][:4] == [0.0, 0.0, 0.5, 0.5]
    assert cols["gpu_util_pct"][:2] == [0.0, 0.0]
    assert cols["sm_active_pct"][0] == 0.0 and cols["sm_active_pct"][1] is None  # no GPM: empty, not zero
    assert cols["memory_total_bytes"][0] == pytest.approx(143_771_336_704.0)
    if suffix == ".csv":
        head = next(csv.reader(rec.open()))
        assert head[:4] == ["t_s", "unix_time_s", "gpu", "gpu_util_pct"]


def test_ctrl_c_exits_zero_with_summary_when_recording(tmp_path: Path) -> None:
    rec = tmp_path / "s.parquet"
    backend = FakeGpuBackend()
    rc, out = _run(MonitorOptions(record=rec), backend, FakeClock(interrupt_after=4))
    assert rc == 0 and backend.closed == 1
    assert "monitoring stopped; samples written to" in out and "GPU-Util said" in out
    assert len(read_samples(rec)["t_s"]) == 5


def test_ctrl_c_without_record_exits_zero_without_summary() -> None:
    rc, out = _run(MonitorOptions(), FakeGpuBackend(), FakeClock(interrupt_after=2))
    assert rc == 0
    assert "GPU 0 · NVIDIA H200" in out and "GPU-Util said" not in out


def test_no_gpu_is_one_clear_line_exit_2() -> None:
    backend = FakeGpuBackend(reason="NVML init failed: Driver Not Loaded (NVML error 9)")
    with pytest.raises(UserError, match="no NVIDIA GPU to monitor: NVML init failed: Driver Not Loaded") as e:
        _run(MonitorOptions(duration_s=1.0), backend)
    assert e.value.exit_code == 2


def test_no_gpu_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from dnnprof.collect.gpu_monitor import NvmlBackend

    b = NvmlBackend()
    if b.open():
        b.close()
        pytest.skip("this machine has a GPU with NVML")
    assert main(["monitor", "--duration", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dnnprof: error: no NVIDIA GPU to monitor: ") and "\n" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--interval", "0.1"], "--interval 0.1: give 0.2–60 s"),
    (["--gpus", "x"], "--gpus 'x': give 'all' or GPU indices"),
    (["--gpus", "0,5"], "--gpus '0,5': GPU 5 does not exist (NVML sees 1: 0–0)"),
    (["--record", "out.txt"], "the file must end in .parquet or .csv"),
    (["--duration", "0"], "--duration 0.0: give a positive number"),
    (["--duration", "5", "--", "true"], "--duration is for monitoring without a command"),
])
def test_bad_options_are_clear_errors(tmp_path: Path, args: list[str], message: str) -> None:
    opts = MonitorOptions()
    it = iter(args)
    for a in it:
        if a == "--":
            opts.command = list(it)
            break
        v = next(it)
        if a == "--interval":
            opts.interval_s = float(v)
        elif a == "--gpus":
            opts.gpus = v
        elif a == "--record":
            opts.record = tmp_path / v
        elif a == "--duration":
            opts.duration_s = float(v)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _run(opts, FakeGpuBackend())


def test_command_exit_code_passes_through(tmp_path: Path) -> None:
    rec = tmp_path / "run.csv"
    con = _console()
    opts = MonitorOptions(interval_s=0.2, record=rec,
                          command=[sys.executable, "-c", "import time, sys; time.sleep(0.7); sys.exit(3)"])
    assert monitor(opts, FakeGpuBackend(), con, live=False) == 3
    out = con.export_text()
    assert "the command exited 3; samples written to" in out and "GPU-Util said" in out
    assert len(read_samples(rec)["t_s"]) >= 3


def test_command_killed_by_a_signal_is_128_plus_n() -> None:
    con = _console()
    opts = MonitorOptions(interval_s=0.2, command=[sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"])
    assert monitor(opts, FakeGpuBackend(), con, live=False) == 128 + 15
    assert "samples not written (no --record)" in con.export_text()


def test_command_not_found_is_127() -> None:
    with pytest.raises(UserError, match="command not found: no-such-command-xyz") as e:
        _run(MonitorOptions(command=["no-such-command-xyz"]), FakeGpuBackend())
    assert e.value.exit_code == 127


_SIGINT_SCRIPT = """
import sys
from pathlib import Path
sys.path[:0] = [{tests!r}, {src!r}]
from fake_gpu import FakeGpuBackend
from rich.console import Console
from dnnprof.cli.monitor import MonitorOptions, monitor

class Backend(FakeGpuBackend):
    def read(self, gpu, t_s, unix_time_s):
        if self.reads == 1:
            print("reading", file=sys.stderr, flush=True)
        return super().read(gpu, t_s, unix_time_s)

cmd = sys.argv[2:]
opts = MonitorOptions(interval_s=0.2, record=Path(sys.argv[1]), command=cmd)
sys.exit(monitor(opts, Backend(), Console(width=120), live=False))
"""


@pytest.mark.parametrize("with_command", [False, True])
def test_real_sigint_ends_cleanly(tmp_path: Path, with_command: bool) -> None:
    """A real SIGINT (what Ctrl-C sends): recording is written, the summary printed; alone the monitor exits 0,
    around a command it forwards the interrupt and passes on the command's exit (130 for SIGINT)."""
    from dnnprof.model.gpu_samples import SampleTable

    rec = tmp_path / "s.csv"
    script = _SIGINT_SCRIPT.format(tests=str(Path(__file__).parent), src=str(SRC))
    cmd = [sys.executable, "-c", script, str(rec)]
    if with_command:
        cmd += ["sleep", "30"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stderr is not None
        assert p.stderr.readline().strip() == "reading"
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:  # a monitor that did not stop must not outlive the test (its command neither)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == (128 + signal.SIGINT if with_command else 0), err
    assert "Traceback" not in err
    assert "GPU-Util said" in out
    assert len(read_samples(rec)["t_s"]) >= 2
    assert SampleTable  # the recording format is the one the module writes


def test_verdicts_on_measured_h200_numbers() -> None:
    """The rule words for the measured cases (reference: H200, 1-s GPM windows)."""
    spin = {"gpu_util_pct": 100, "sm_active_pct": 0.757, "sm_occupancy_pct": 0.012, "tensor_active_pct": 0,
            "dram_bw_util_pct": 0, "fp32_active_pct": 0, "fp16_active_pct": 0}
    gemm = {"gpu_util_pct": 99, "sm_active_pct": 95.6, "sm_occupancy_pct": 14.1, "tensor_active_pct": 92.8,
            "dram_bw_util_pct": 17.2, "fp32_active_pct": 1.0, "fp16_active_pct": 0}
    copy = {"gpu_util_pct": 99, "sm_active_pct": 98.2, "sm_occupancy_pct": 79.3, "tensor_active_pct": 0,
            "dram_bw_util_pct": 88.0, "fp32_active_pct": 0, "fp16_active_pct": 0}
    wide_spin = {"gpu_util_pct": 100, "sm_active_pct": 99.86, "sm_occupancy_pct": 99.86, "tensor_active_pct": 0,
                 "dram_bw_util_pct": 0, "fp32_active_pct": 0, "fp16_active_pct": 0}
    got = {k: verdict(v).rule_id for k, v in  # type: ignore[union-attr]
           {"spin": spin, "gemm": gemm, "copy": copy, "wide_spin": wide_spin}.items()}
    assert got == {"spin": "few_sms_busy", "gemm": "tensor_busy", "copy": "dram_bound", "wide_spin": "latency_bound"}
    assert verdict({"gpu_util_pct": 0.0}).rule_id == "idle"  # type: ignore[union-attr]
    assert verdict({"gpu_util_pct": 97.0}).rule_id == "busy_no_gpm"  # type: ignore[union-attr]
    assert verdict({"gpu_util_pct": 40.0, "sm_active_pct": float("nan")}).rule_id == "gaps"  # type: ignore[union-attr]


def test_nvml_backend_reads_gpm_from_the_second_read_and_other_users_processes(tmp_path: Path) -> None:
    """The production backend over the NVML wrapper (fake ``pynvml`` through the wrapper's seam): GPM values
    appear once two samples exist and cover the time between reads; an invisible process with unknown memory
    is listed, not an error; clock reasons are words."""
    from types import SimpleNamespace

    from dnnprof.collect.gpu_monitor import NvmlBackend
    from dnnprof.collect.nvml import Nvml
    from test_collect_nvml import FakeNvml

    class Lib(FakeNvml):
        NVML_CLOCK_MEM = 2

        def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
            return 3201 if kind == self.NVML_CLOCK_MEM else super().nvmlDeviceGetClockInfo(h, kind)

        def nvmlDeviceGetCount(self) -> int:
            return 1

        def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[SimpleNamespace]:
            return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=1 << 30),
                    SimpleNamespace(pid=999_999_999, usedGpuMemory=None)]

        def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
            return 0x4 | 0x40

    clock = [5_000_000_000]
    b = NvmlBackend(Nvml(lib=Lib(clock)))
    assert b.open() and b.info(0).gpm_supported and b.info(0).name == "NVIDIA H200"
    first = b.read(0, 0.0, 0.0)
    assert first.values["gpu_util_pct"] == 97.0 and "sm_active_pct" not in first.values
    clock[0] += 500_000_000
    second = b.read(0, 0.5, 0.5)
    # the fake's GPM value is metric id + seconds between the two samples
    assert second.values["sm_active_pct"] == pytest.approx(2.5)
    assert second.values["nvlink_tx_mib_per_s"] == pytest.approx(61.5)
    assert "fp16_active_pct" not in second.values  # the fake GPU cannot compute it: left out, not zero
    assert second.values["memory_total_bytes"] == float(141 << 30)
    assert (second.values["sm_clock_mhz"], second.values["mem_clock_mhz"]) == (1980.0, 3201.0)
    assert second.throttle_reasons == ("power cap", "hw thermal")
    mine, other = second.processes
    assert (mine.used_memory_bytes, mine.name) == (float(1 << 30), Path("/proc/self/comm").read_text().strip())
    assert (other.pid, other.used_memory_bytes, other.name, other.user) == (999_999_999, None, "?", "?")
    b.close()
    assert b.nvml.lib.freed == 2


def test_process_and_gpu_names_show_literally() -> None:
    """Names come from other people's processes: rich markup and terminal escapes show as text."""
    from dnnprof.model.gpu_samples import GpuInfo
    from fake_gpu import FakeGpu

    gpu = FakeGpu(GpuInfo(0, "[bold]H200[/]", gpm_supported=True),
                  processes=(ProcessUse(1, 1.0, "[/]evil\x1b[2J", "[red]bob"),))
    rc, out = _run(MonitorOptions(duration_s=1.0), FakeGpuBackend([gpu]))
    assert rc == 0
    assert "GPU 0 · [bold]H200[/]" in out and "[/]evil" in out and "[red]bob" in out and "\x1b" not in out
