"""One torch.profiler session over a run of steps ("window"), in one of the capture kinds.

=============  ===========================================================  ===========================
kind           what is recorded                                             used for
=============  ===========================================================  ===========================
``timing``     CUDA activity only: kernels, copies, memsets, runtime calls  step times (~1.02x)
``attribution``CPU ops + CUDA + module ranges, no shapes/stacks             layers/ops, joined on timing
``full``       CPU + CUDA + shapes + stacks + memory events + module ranges ``--full``
``cpu``        CPU ops + module ranges (no CUDA in use)                     runs without a GPU
``whole_run``  CPU ops (+ CUDA when initialised), from the first forward    scripts with no iterations
=============  ===========================================================  ===========================

Windows with CPU activity carry ``ProfilerStep#N`` ranges (N = the run's global step index) and a
``dnnprof.clock_sync`` range taken between two ``time.time_ns()`` readings, which ties the trace clock to the
wall clock. A ``timing`` window has no CPU ranges; it ties the clocks with a ``cudaDeviceSynchronize`` taken
between two wall-clock readings just before it stops (outside every measured step).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dnnprof.collect.modranges import ModuleRanges, compiled_code_in_use

KINDS = ("timing", "attribution", "full", "cpu", "whole_run")
CLOCK_SYNC = "dnnprof.clock_sync"


class Window:
    """A profiler session of one kind; ``record()`` describes it for the collector's results."""

    def __init__(self, torch: Any, kind: str, first_step: int, *, cuda: bool) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown window kind {kind!r}; kinds: {', '.join(KINDS)}")
        self.torch = torch
        self.kind = kind
        self.first_step = first_step
        self.last_step = first_step - 1
        self.cuda = cuda
        self.cpu_events = kind != "timing"
        self.prof: Any = None
        self.ranges: ModuleRanges | None = None
        self.ranges_note = ""
        self._marker: Any = None
        self.probe: dict[str, Any] = {}
        self.started_ns = 0
        self.stopped_ns = 0
        self.trace = ""
        self.export_s = 0.0
        self.running = False

    def _activities(self) -> list[Any]:
        pa = self.torch.profiler.ProfilerActivity
        acts = [pa.CPU] if self.cpu_events else []
        if self.cuda:
            acts.append(pa.CUDA)
        return acts

    def start(self) -> None:
        torch = self.torch
        full = self.kind == "full"
        self.prof = torch.profiler.profile(activities=self._activities(), record_shapes=full, with_stack=full,
                                           profile_memory=full)
        if self.kind in ("attribution", "full", "cpu"):
            if compiled_code_in_use(torch):
                self.ranges_note = "module ranges off: torch.compile graphs in use (hooks would force recompiles)"
            else:
                self.ranges = ModuleRanges(torch)
                self.ranges.install()
        self.prof.start()
        self.running = True
        self.started_ns = time.time_ns()
        if self.cpu_events:
            t0 = time.time_ns()
            with torch.autograd.profiler.record_function(CLOCK_SYNC):
                pass
            t1 = time.time_ns()
            self.probe = {"method": "record_function", "name": CLOCK_SYNC, "t0_ns": t0, "t1_ns": t1}

    def open_step(self, number: int) -> None:
        """Open the ``ProfilerStep#number`` range (CPU windows only)."""
        self.last_step = max(self.last_step, number)
        if self.cpu_events and self.running and self._marker is None:
            self._marker = self.torch.autograd.profiler.record_function(f"ProfilerStep#{number}")
            self._marker.__enter__()

    def close_step(self) -> None:
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None

    def stop(self) -> None:
        """Stop recording (results stay in memory until :meth:`export`)."""
        if not self.running:
            return
        self.close_step()
        torch = self.torch
        if self.kind == "timing" and self.cuda:
            torch.cuda.synchronize()  # drain the queue first, so the timed call below returns at once
            t0 = time.time_ns()
            torch.cuda.synchronize()
            t1 = time.time_ns()
            self.probe = {"method": "cuda_sync", "name": "cudaDeviceSynchronize", "t0_ns": t0, "t1_ns": t1}
        if self.ranges is not None:
            self.ranges.remove()
        self.prof.stop()
        self.running = False
        self.stopped_ns = time.time_ns()

    def export(self, directory: Path) -> str:
        """Write the trace as ``<directory>/<kind>.json.gz``; returns its path relative to the run directory."""
        if self.prof is None or self.trace:
            return self.trace
        self.stop()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.kind}.json.gz"
        t = time.perf_counter()
        self.prof.export_chrome_trace(str(path))
        self.export_s = time.perf_counter() - t
        self.prof = None  # free the events
        self.trace = f"{directory.name}/{path.name}"
        return self.trace

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "cuda": self.cuda,
            "cpu_events": self.cpu_events,
            "shapes_stacks_memory": self.kind == "full",
            "module_ranges": self.ranges is not None,
            "module_ranges_fast": bool(self.ranges and self.ranges.fast),
            "module_ranges_note": self.ranges_note,
            "module_calls": self.ranges.calls if self.ranges else 0,
            "clock_probe": self.probe,
            "started_ns": self.started_ns,
            "stopped_ns": self.stopped_ns,
            "trace": self.trace,
            "export_s": round(self.export_s, 3),
        }
