"""One torch.profiler session over a run of steps ("window"), in one of the capture kinds.

=============  ===========================================================  ===========================
kind           what is recorded                                             used for
=============  ===========================================================  ===========================
``timing``     CUDA activity + user ranges only (no ops): kernels, copies,  step times, GPU timeline
               memsets, runtime calls, ``ProfilerStep#N``
``attribution``CPU ops + CUDA + module ranges, no shapes/stacks             layers/ops, joined on timing
``full``       CPU + CUDA + shapes + stacks + memory events + modules       ``--full``
               (torch's ``with_modules`` and dnnprof's module ranges)
``cpu``        CPU ops + module ranges (no CUDA in use)                     runs without a GPU
``whole_run``  CPU ops (+ CUDA when initialised) + module ranges, from the    scripts with no iterations
               first forward (the module already running is mapped as a root;
               no ranges when that module is compiled)
=============  ===========================================================  ===========================

Every window carries ``ProfilerStep#N`` ranges (N = the run's global step index) and a ``dnnprof.clock_sync`` range
taken between two ``time.time_ns()`` readings, which ties the trace clock to the wall clock.

The ``timing`` window is cheap because the profiler's op callbacks are limited to user scopes: CPU activity is on
(``record_function`` ranges are recorded) but no ``aten`` op is.

``DNNPROF_TIMING_EXTERNAL_CORRELATION=0`` starts the ``timing`` window with Kineto's external correlation off (no
External id links from runtime calls to the user ranges; kernels still reach their runtime calls and steps through
CUPTI's correlation ids, and their ops come from the attribution window). On one noisy H100 host it cost 1.16x
against 1.31x for the default; not yet the default: the end-to-end GPU tests have not run with it.

A window must be exported as soon as it stops, before the next session starts. Kineto converts CUPTI's GPU and
runtime timestamps (TSC ticks) lazily, when the trace is saved, with one process-wide converter that every new
session replaces; the converter maps ticks from before its own start to 0. A trace saved after a later session
has started comes out with ``ts = dur = 0`` on every GPU and runtime event (seen with PyTorch 2.11 on an H100).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dnnprof.collect.allocator_warning import spend_first_warning
from dnnprof.collect.modranges import ModuleRanges, compiled_code_in_use

KINDS = ("timing", "attribution", "full", "cpu", "whole_run")
#: Environment switch of the timing window's external correlation (see the module docstring).
ENV_TIMING_EXTCORR = "DNNPROF_TIMING_EXTERNAL_CORRELATION"
CLOCK_SYNC = "dnnprof.clock_sync"
#: The profiler's own once-per-process notice; it would land in the profiled script's stderr.
_QUIET = ("Profiler clears events at the end of each cycle",)


@contextlib.contextmanager
def _user_scope_only(torch: Any) -> Iterator[bool]:
    """While a profiler starts, enable its op callbacks for user scopes only (``record_function`` ranges).

    Yields False when this PyTorch has no way to do that (the session then records every op, at a higher cost).
    """
    ap = torch.autograd.profiler
    enable = getattr(ap, "_enable_profiler", None)
    scope = getattr(getattr(torch._C, "_profiler", None), "RecordScope", None)
    if enable is None or scope is None or not hasattr(scope, "USER_SCOPE"):
        yield False
        return

    def enable_user_scope(config: Any, activities: Any, *rest: Any) -> Any:
        return enable(config, activities, {scope.USER_SCOPE})

    ap._enable_profiler = enable_user_scope
    try:
        yield True
    finally:
        ap._enable_profiler = enable


class Window:
    """A profiler session of one kind; ``record()`` describes it for the collector's results."""

    def __init__(self, torch: Any, kind: str, first_step: int, *, cuda: bool, module_ranges: bool = True) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown window kind {kind!r}; kinds: {', '.join(KINDS)}")
        self.torch = torch
        self.kind = kind
        self.first_step = first_step
        self.last_step = first_step - 1
        self.cuda = cuda
        self.cpu_events = True  # every kind records user ranges (ProfilerStep#N, the clock probe)
        self.ops = kind != "timing"  # whether aten ops are recorded
        self.scopes = "all"
        self.prof: Any = None
        self.ranges: ModuleRanges | None = None
        self.module_ranges = module_ranges  # False: the caller knows the hooks would reach compiled code
        self.ranges_note = ""
        self._marker: Any = None
        self.probe: dict[str, Any] = {}
        self.started_ns = 0
        self.stopped_ns = 0
        self.trace = ""
        self.export_s = 0.0
        self.exported_ns = 0
        self.running = False
        self.external_correlation = True

    def _activities(self) -> list[Any]:
        pa = self.torch.profiler.ProfilerActivity
        return [pa.CPU, pa.CUDA] if self.cuda else [pa.CPU]

    def start(self) -> None:
        torch = self.torch
        full = self.kind == "full"
        with warnings.catch_warnings():
            for text in _QUIET:
                warnings.filterwarnings("ignore", message=f".*{text}")
            # with_modules: the "modules" of --full; on the H100 it also made the session cheaper, not dearer
            # (GPT-2: 1.32x against 1.75x for CPU ops alone; see docs/collection.md).
            extra: dict[str, Any] = {}
            cfg_cls = getattr(getattr(torch._C, "_profiler", None), "_ExperimentalConfig", None)
            if self.kind == "timing" and os.environ.get(ENV_TIMING_EXTCORR, "1") == "0" and cfg_cls is not None:
                try:
                    extra["experimental_config"] = cfg_cls(disable_external_correlation=True)
                    self.external_correlation = False
                except TypeError:  # a PyTorch without the option
                    pass
            self.prof = torch.profiler.profile(activities=self._activities(), record_shapes=full, with_stack=full,
                                               profile_memory=full, with_modules=full, **extra)
        if self.kind in ("attribution", "full", "cpu", "whole_run"):
            if not self.module_ranges:
                self.ranges_note = "module ranges off: the model is compiled (hooks would break its graphs)"
            elif compiled_code_in_use(torch):
                self.ranges_note = "module ranges off: torch.compile graphs in use (hooks would force recompiles)"
            else:
                self.ranges = ModuleRanges(torch)
                self.ranges.install()
        with warnings.catch_warnings():
            for text in _QUIET:
                warnings.filterwarnings("ignore", message=f".*{text}")
            if self.ops:
                free_block = spend_first_warning(torch) if full else None
                self.prof.start()
                if free_block is not None:
                    free_block()
            else:
                with _user_scope_only(torch) as limited:
                    self.prof.start()
                self.scopes = "user" if limited else "all"
                self.ops = not limited
        self.running = True
        self.started_ns = time.time_ns()
        if self.cpu_events:
            t0 = time.time_ns()
            with torch.autograd.profiler.record_function(CLOCK_SYNC):
                pass
            t1 = time.time_ns()
            self.probe = {"method": "record_function", "name": CLOCK_SYNC, "t0_ns": t0, "t1_ns": t1}

    def open_step(self, number: int) -> None:
        """Open the ``ProfilerStep#number`` range."""
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
        if self.ranges is not None:
            self.ranges.remove()
        self.prof.stop()
        self.running = False
        self.stopped_ns = time.time_ns()

    def export(self, directory: Path) -> str:
        """Stop, then write the trace as ``<directory>/<kind>.json.gz``; returns its path relative to the run
        directory. Call it before any other profiler session starts (GPU times are converted when it runs)."""
        if self.prof is None or self.trace:
            return self.trace
        self.stop()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.kind}.json.gz"
        t = time.perf_counter()
        self.prof.export_chrome_trace(str(path))
        self.export_s = time.perf_counter() - t
        self.exported_ns = time.time_ns()
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
            "ops": self.ops,
            "op_scopes": self.scopes,
            "external_correlation": self.external_correlation,
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
            "exported_ns": self.exported_ns,
        }
