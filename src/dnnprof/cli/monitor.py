"""``dnnprof monitor``: a live, truthful view of the GPUs — GPU-Util next to SM active, occupancy, tensor and DRAM
use — optionally recorded, optionally around a command whose exit code it passes on.

The loop is :func:`monitor`; the GPU comes in through a :class:`dnnprof.model.gpu_samples.GpuBackend` (NVML in
production, a fake in tests), the clocks, sleep and process start as arguments, so it runs on a CPU under test.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dnnprof.cli.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from dnnprof.analysis.live_verdicts import Verdict
    from dnnprof.model.gpu_samples import GpuBackend, GpuFrame, GpuInfo, SampleTable

#: NVML wants GPM samples > 0.1 s apart; each tick's GPM values span one interval.
MIN_INTERVAL_S = 0.2
MAX_INTERVAL_S = 60.0
#: The verdict reads the mean of the last few seconds, so one odd sample does not flip the words.
VERDICT_WINDOW_S = 5.0
#: After Ctrl-C, how long the command may take to end on its own before it is sent SIGINT, then SIGTERM.
CHILD_SETTLE_S = 0.5
CHILD_GRACE_S = 10.0
_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


@dataclass
class MonitorOptions:
    interval_s: float = 0.5
    gpus: str = "all"
    record: Path | None = None
    duration_s: float | None = None
    command: list[str] = field(default_factory=list)


def parse_gpus(spec: str, count: int) -> list[int]:
    """``all`` or a comma list of NVML indices (``0,1``) → indices; UserError for anything else."""
    text = spec.strip().lower()
    if text == "all":
        return list(range(count))
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UserError(f"--gpus {spec!r}: give 'all' or GPU indices like 0,1")
        i = int(part)
        if i >= count:
            raise UserError(f"--gpus {spec!r}: GPU {i} does not exist (NVML sees {count}: 0–{count - 1})")
        if i not in out:
            out.append(i)
    return out


def check_options(opts: MonitorOptions) -> None:
    """Every option problem before anything starts (exit 2, one line)."""
    from dnnprof.model.gpu_samples import FORMATS
    from dnnprof.model.outputs import check_output_file

    if not MIN_INTERVAL_S <= opts.interval_s <= MAX_INTERVAL_S:
        raise UserError(f"--interval {opts.interval_s}: give {MIN_INTERVAL_S}–{MAX_INTERVAL_S:.0f} s "
                        "(NVML GPM needs samples more than 0.1 s apart)")
    if opts.duration_s is not None:
        if opts.duration_s <= 0:
            raise UserError(f"--duration {opts.duration_s}: give a positive number of seconds")
        if opts.command:
            raise UserError("--duration is for monitoring without a command; with one, recording ends with it")
    if opts.record is not None:
        if opts.record.suffix.lower() not in FORMATS:
            raise UserError(f"--record {opts.record}: the file must end in {' or '.join(FORMATS)}")
        check_output_file(opts.record, option="--record")


def _exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it (killed by signal N → 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _stop_child(proc: Any, sleep: Callable[[float], None], clock: Callable[[], float]) -> int:
    """End the command after Ctrl-C: it usually got the same SIGINT from the terminal; if not, forward one, then
    SIGTERM, then SIGKILL. Returns its exit code."""
    for sig, wait_s in ((None, CHILD_SETTLE_S), (signal.SIGINT, CHILD_GRACE_S), (signal.SIGTERM, CHILD_GRACE_S)):
        if sig is not None and proc.poll() is None:
            proc.send_signal(sig)
        deadline = clock() + wait_s
        while proc.poll() is None and clock() < deadline:
            sleep(0.05)
        if proc.poll() is not None:
            return _exit_code(proc.returncode)
    proc.kill()
    return _exit_code(proc.wait())


def _recent_means(history: Sequence[GpuFrame], end_s: float) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for f in history:
        if f.t_s > end_s - VERDICT_WINDOW_S:
            for k, v in f.values.items():
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


@dataclass
class _State:
    infos: list[GpuInfo]
    histories: dict[int, collections.deque[GpuFrame]]
    verdicts: dict[int, Verdict | None]
    table: SampleTable


def _tick(backend: GpuBackend, st: _State, t_s: float, unix_s: float) -> None:
    from dnnprof.analysis.live_verdicts import verdict
    from dnnprof.render.monitor_view import SPARK_WINDOW_S

    for info in st.infos:
        frame = backend.read(info.index, t_s, unix_s)
        st.table.add(frame)
        hist = st.histories[info.index]
        hist.append(frame)
        while hist and hist[0].t_s <= t_s - SPARK_WINDOW_S:
            hist.popleft()
        st.verdicts[info.index] = verdict(_recent_means(hist, t_s), frame.throttle_reasons)


def monitor(opts: MonitorOptions, backend: GpuBackend, console: Console, *,
            clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep,
            popen: Callable[..., Any] = subprocess.Popen, live: bool | None = None) -> int:
    """Run the monitor until ``--duration`` ends, the command ends, or Ctrl-C; return the exit code.

    Args:
        live: redraw a live view (default: when the console is a terminal and no command shares it).
    """
    from dnnprof.analysis.live_summary import summarize
    from dnnprof.model.gpu_samples import METRIC_NAMES, SampleTable
    from dnnprof.render.monitor_view import live_view, summary_view

    check_options(opts)
    if not backend.open():
        raise UserError(f"no NVIDIA GPU to monitor: {backend.reason or 'NVML is not available'}")
    try:
        gpus = parse_gpus(opts.gpus, backend.device_count())
        st = _State([backend.info(g) for g in gpus], {g: collections.deque() for g in gpus}, {}, SampleTable())
        proc = None
        if opts.command:
            try:
                proc = popen(opts.command)
            except FileNotFoundError:
                raise UserError(f"command not found: {opts.command[0]}", exit_code=127) from None
            except PermissionError:
                raise UserError(f"command not executable: {opts.command[0]}", exit_code=126) from None
        show = (console.is_terminal and proc is None) if live is None else live
        stop_hint = "Ctrl-C stops" + (f"; recording to {opts.record}" if opts.record else "")
        t0 = clock()
        rc = 0
        interrupted = False
        live_ctx = None
        try:
            if show:
                from rich.live import Live

                live_ctx = Live(console=console, auto_refresh=False, transient=False)
                live_ctx.start()
            n = 0
            while True:
                now = clock() - t0
                _tick(backend, st, now, wall())
                if live_ctx is not None:
                    live_ctx.update(live_view(st.infos, st.histories, st.verdicts, stop_hint), refresh=True)
                if proc is not None and proc.poll() is not None:
                    rc = _exit_code(proc.returncode)
                    break
                if opts.duration_s is not None and now >= opts.duration_s:
                    break
                n += 1
                delay = t0 + n * opts.interval_s - clock()
                if delay < 0:  # a slow read: skip ahead rather than sample in a burst
                    n = int((clock() - t0) / opts.interval_s) + 1
                    delay = t0 + n * opts.interval_s - clock()
                sleep(max(0.0, delay))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if live_ctx is not None:
                live_ctx.stop()
        if proc is not None and interrupted:
            try:
                rc = _stop_child(proc, sleep, clock)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
                proc.kill()
                rc = _exit_code(proc.wait())
        if not show and proc is None and st.histories:
            console.print(live_view(st.infos, st.histories, st.verdicts))
        if opts.record is not None:
            st.table.write(opts.record)
        if opts.record is not None or proc is not None:
            what = f"the command exited {rc}" if proc is not None else "monitoring stopped"
            header = f"{what}; samples " + (f"written to {opts.record}" if opts.record else "not written (no --record)")
            console.print(summary_view(summarize(st.table.columns, METRIC_NAMES), {i.index: i for i in st.infos},
                                       header=header, width=console.width))
        return rc
    finally:
        backend.close()


def _run(
    ctx: typer.Context,
    interval: float = typer.Option(0.5, "--interval", help="Seconds between samples (0.2–60)."),
    gpus: str = typer.Option("all", "--gpus", help="Which GPUs: all, or NVML indices like 0,1."),
    record: Path | None = typer.Option(None, "--record", help="Write the samples to FILE.parquet or FILE.csv."),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds."),
) -> None:
    """Live GPU view: GPU-Util next to SM active, occupancy, tensor and DRAM use (NVML GPM on Hopper+).

    dnnprof monitor [OPTIONS] [-- COMMAND ARGS…]: with a command, records while it runs, prints a summary and
    exits with the command's exit code.
    """
    from rich.console import Console

    from dnnprof.collect.gpu_monitor import NvmlBackend

    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    opts = MonitorOptions(interval_s=interval, gpus=gpus, record=record, duration_s=duration, command=command)
    console = Console()
    if not console.is_terminal:  # pipes and logs: no 80-column squeeze (as the other reports)
        console.width = max(console.width, 180)
    rc = monitor(opts, NvmlBackend(), console)
    if rc:
        raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    app.command("monitor", context_settings=_CONTEXT, options_metavar="[OPTIONS] [-- COMMAND [ARGS]...]")(_run)
