"""The collector inside the profiled process: step boundaries in, profiler windows and samplers out.

The controller owns the state of one run: it counts boundaries (see ``stepdetect``), runs the actions the
``schedule.Plan`` gives for each boundary (start/stop windows and samplers, export), times every step with
``time.time_ns()`` and reads the allocator's peaks at each boundary. Work done at a boundary is kept out of the
measured steps: a step runs from the end of the previous boundary's work to the start of its own boundary.

Results go to ``collector.json`` (and ``samples.json``) in the run directory; the parent process turns them and
the raw traces into the canonical profile. ``finalize()`` runs at interpreter exit, however the script ends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dnnprof.collect.config import RESULT_FILE, SAMPLES_FILE, CollectorConfig, write_json_atomic
from dnnprof.collect.environment import environment, run_settings
from dnnprof.collect.memory import StepMemory, static_breakdown
from dnnprof.collect.schedule import Plan, warm
from dnnprof.collect.stepdetect import PRIORITY, DataLoaderItems, DataLoaderSteps, MarkerSteps, OptimizerSteps
from dnnprof.collect.windows import Window

RESULT_FORMAT = "dnnprof.collector/1"


class Controller:
    """Drives profiling of the current process from step boundaries."""

    def __init__(self, torch: Any, run_dir: Path, config: CollectorConfig) -> None:
        self.torch = torch
        self.dir = run_dir
        self.cfg = config
        self.pid = os.getpid()
        # The timed steps always run under the cheap timing window on a GPU; what they launch is joined from a
        # short window after them: ops and module ranges (default), or shapes, stacks and memory events (--full).
        attribution = config.attribution_steps if config.mode in ("default", "full") else 0
        warmup = config.warmup_steps
        if config.mode == "counters" and config.counters_step is not None:
            # The ncu pass runs until the step it counts, which a steady warm-up may have put past the plan.
            warmup = max(warmup, config.counters_step)
        self.plan = Plan(warmup, config.steps, attribution, config.baseline_after_steps)
        #: How the warm-up ended (``warmup_until_steady``): steps asked for and used, and why it stopped.
        self.warmup: dict[str, Any] = {"requested_steps": config.warmup_steps, "steps": config.warmup_steps,
                                       "until_steady": config.warmup_until_steady, "reason": "requested"}
        self.source: str | None = None
        self.completed = 0
        self.start_ns: list[int] = [time.time_ns()]
        self.end_ns: list[int] = []
        self.items: list[float | None] = []
        self.main: Window | None = None
        self.attrib: Window | None = None
        self.pending: Window | None = None
        self.cpu_window: Window | None = None  # the window whose ProfilerStep ranges are open
        self.sampler: Any = None
        self._sampling_tried = False
        self.stacks: Any = None
        self.mem: StepMemory | None = None
        self.mem_steps: dict[str, list[int]] = {"step": [], "peak_allocated_bytes": [], "peak_reserved_bytes": []}
        self.static: dict[str, int] | None = None
        self.settings: dict[str, Any] | None = None
        self.device: int | None = None
        self.notes: list[str] = []
        self.status = "running"
        self.exported = False
        self.done = False
        self.finalized = False
        self.exception: dict[str, str] | None = None
        #: A window was stopped by the exit handler (the script ended inside it): see ``exit_guard``.
        self.stopped_at_exit = False
        #: The status the script is ending with, as far as seen: ``sys.exit``'s argument, 1 after an uncaught
        #: exception, else 0.
        self.exit_code: int | None = None
        self.workload: dict[str, Any] | None = None
        self._wl_modules: list[Any] = []
        self._wl_optimizers: list[Any] = []
        self._busy = False
        self._lock = threading.Lock()
        self.optimizers = OptimizerSteps(lambda src: self.on_boundary(src))
        self.markers = MarkerSteps(config.step_marker, lambda src: self.on_boundary(src)) if config.step_marker \
            else None
        self._first_fwd: Any = None
        self.data_steps = DataLoaderSteps(lambda src: self.on_boundary(src))
        self.data_items = DataLoaderItems(before=self.data_steps.before_batch)
        self.compiled: Any = None  # collect.compiled.CompiledKernels, once torch.compile is wrapped

    # --- installation --------------------------------------------------------------------------------------
    def install(self) -> None:
        import dnnprof

        torch = self.torch
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        if disable is not None:  # a compiled optimizer step or module call must run our hooks eagerly
            self.optimizers.hook = disable(self.optimizers.hook)  # type: ignore[method-assign]
        self.optimizers.install(torch)
        self.data_steps.install(torch)
        self.data_items.install(torch)
        if self.markers is not None:
            self.markers.install(torch)
        if self.cfg.mode != "counters":
            from dnnprof.collect.compiled import CompiledKernels

            self.compiled = CompiledKernels(torch)
            self.compiled.install()
        dnnprof._step_hook = self.explicit_step
        if self.cfg.mode != "counters":  # under ncu no profiler may run
            hook = disable(self._first_forward) if disable is not None else self._first_forward
            self._first_fwd = torch.nn.modules.module.register_module_forward_pre_hook(hook)

    def uninstall(self) -> None:
        import dnnprof

        self.optimizers.remove()
        self.data_steps.remove()
        self.data_items.remove()
        if self.markers is not None:
            self.markers.remove()
        if dnnprof._step_hook == self.explicit_step:
            dnnprof._step_hook = None
        if self._first_fwd is not None:
            self._first_fwd.remove()
            self._first_fwd = None

    def set_workload(self, info: dict[str, Any], modules: list[Any], optimizers: list[Any]) -> None:
        """Record what a built-in workload is, and the modules/optimizers for the memory breakdown."""
        self.workload = info
        self._wl_modules = list(modules)
        self._wl_optimizers = list(optimizers)

    # --- helpers -------------------------------------------------------------------------------------------
    def _cuda_in_use(self) -> bool:
        cuda = self.torch.cuda
        return bool(cuda.is_available() and cuda.is_initialized())

    def _first_forward(self, module: Any, args: Any) -> None:
        if os.getpid() != self.pid:
            return
        if self._first_fwd is not None:
            self._first_fwd.remove()
            self._first_fwd = None
        if self.source is None and self.pending is None and not self.finalized:
            # Nothing marks iterations yet: record from here, in case nothing ever does (inference scripts).
            # Module ranges start here only for an eager model: the first call of a compiled one is the one Dynamo
            # traces, and hooks installed now would be traced into its graphs (each range a graph break) and,
            # removed when iterations show up, would make it recompile.
            ranges = not (_compiled_module(module) or _compiling(self.torch))
            self.pending = Window(self.torch, "whole_run", 0, cuda=self._cuda_in_use(), module_ranges=ranges)
            self.pending.start()
            if self.pending.ranges is not None:
                self.pending.ranges.map_root(module)

    def explicit_step(self, items: float | None = None) -> None:
        """``dnnprof.step()`` lands here."""
        self.on_boundary("explicit", items)

    def _accept(self, source: str) -> bool:
        if source == self.source:
            return True
        if self.cfg.explicit_steps and source != "explicit":
            return False
        if self.cfg.step_marker and source in ("optimizer", "dataloader"):
            return False
        if self.source is not None and PRIORITY[source] <= PRIORITY[self.source]:
            return False
        if self.main is not None:
            self.notes.append(f"ignored {source} step boundaries: the window had started on {self.source} steps")
            return False
        if self.source is not None:
            self.notes.append(f"step source switched from {self.source} to {source} before the window")
        self.source = source
        self.data_items.take()
        self.completed = 0
        self.start_ns = [self.start_ns[0]]
        self.end_ns, self.items = [], []
        return True

    # --- the boundary --------------------------------------------------------------------------------------
    def on_boundary(self, source: str, items: float | None = None) -> None:
        """Step ``completed`` ended; run the plan's actions; step ``completed + 1`` starts when this returns."""
        t_enter = time.time_ns()
        if os.getpid() != self.pid or self.done or self.finalized or self._busy:
            return
        accepted = False
        with self._lock:
            self._busy = True
            try:
                if not self._accept(source):
                    return
                accepted = True
                if self.pending is not None:  # steps exist after all: the whole-run fallback is not needed
                    self.pending.stop()
                    self.pending = None
                if self.cpu_window is not None:
                    self.cpu_window.close_step()
                step = self.completed
                self.end_ns.append(t_enter)
                loaded = self.data_items.take()
                self.items.append(items if items is not None else loaded)
                self.completed = k = step + 1
                if self.cfg.mode == "counters":
                    self._counters_boundary(k)
                    return
                self._memory(step, k)
                if k == self.plan.warmup and self.cfg.warmup_until_steady:
                    self._extend_warmup(k, t_enter)
                for action in self.plan.actions(k):
                    getattr(self, f"_{action}")(k)
                if self.cpu_window is not None and self.cpu_window.running and not self.done:
                    self.cpu_window.open_step(k)
                elif self.main is not None and self.main.running:
                    self.main.last_step = k
            finally:
                self._busy = False
                if accepted:
                    self.start_ns.append(time.time_ns())

    def _extend_warmup(self, k: int, now_ns: int) -> None:
        """At the boundary where the window would start: one more warm-up step while step times still change
        (on a GPU: its clocks, library heuristics and lazily loaded kernels are what settles)."""
        if not self._cuda_in_use():
            self.warmup["reason"] = "no GPU in use"
            return
        durations = [self.end_ns[i] - self.start_ns[i] for i in range(1, k)]
        asked = self.cfg.warmup_steps  # its last step ended at end_ns[asked - 1], the boundary the window was due at
        done, why = warm(durations, now_ns - self.start_ns[1] if k > 1 else 0, k - asked,
                         now_ns - self.end_ns[asked - 1])
        if done:
            self.warmup.update(steps=k, reason=why)
            if k > self.cfg.warmup_steps:
                self.notes.append(f"warmed up {k} steps (asked for {self.cfg.warmup_steps}): step times were still "
                                  f"changing{'; stopped at the limit' if why == 'cap' else ''}")
            return
        self.plan = replace(self.plan, warmup=k + 1)

    def _memory(self, step: int, k: int) -> None:
        if self.mem is None and k == self.plan.sampling_start and self._cuda_in_use():
            self.device = int(self.torch.cuda.current_device())
            self.mem = StepMemory(self.torch, self.device)
            self.mem.read_and_reset()
            return
        if self.mem is not None and step < self.plan.last:
            alloc, reserved = self.mem.read_and_reset()
            self.mem_steps["step"].append(step)
            self.mem_steps["peak_allocated_bytes"].append(alloc)
            self.mem_steps["peak_reserved_bytes"].append(reserved)

    # --- actions (named after schedule.ACTIONS) ------------------------------------------------------------
    def _start_sampling(self, k: int) -> None:
        if self._sampling_tried:  # a longer warm-up moved the plan's sampling start: it was started already
            return
        self._sampling_tried = True
        if not self.cfg.nvml:
            self.notes.append("NVML sampling turned off")
            return
        if not self._cuda_in_use():
            self.notes.append("NVML sampling skipped: no CUDA device in use")
            return
        from dnnprof.collect.nvml import Nvml
        from dnnprof.collect.sampler import NvmlSampler

        nvml = Nvml()
        dev = int(self.torch.cuda.current_device())
        handle = None
        if nvml.open():
            uuid = getattr(self.torch.cuda.get_device_properties(dev), "uuid", None)
            # CUDA and NVML number devices differently under CUDA_VISIBLE_DEVICES: trust an index only without it.
            index = None if os.environ.get("CUDA_VISIBLE_DEVICES") else dev
            handle = nvml.handle(index=index, uuid=str(uuid) if uuid else None)
            if handle is None:
                self.notes.append(f"NVML has no handle for CUDA device {dev}")
        self.sampler = NvmlSampler(nvml, [(dev, handle)] if handle is not None else [],
                                   period_s=self.cfg.nvml_period_s)
        self.sampler.start()

    def _start_main(self, k: int) -> None:
        cuda = self._cuda_in_use()
        if cuda:
            kind = "timing"
        elif self.cfg.mode == "full":
            kind = "full"
            self.plan = replace(self.plan, attribution=0)
        else:
            kind = "cpu"
            self.plan = replace(self.plan, attribution=0)
            self.notes.append("no CUDA device in use: CPU-only profile (CPU op recording dilates the steps)")
        self.main = Window(self.torch, kind, k, cuda=cuda)
        self.main.start()
        if self.main.cpu_events:
            self.cpu_window = self.main
        if self.cfg.host_sampling:
            from dnnprof.collect.stacks import StackSampler

            self.stacks = StackSampler(period_s=self.cfg.host_period_s)
            self.stacks.start()

    def _stop_main(self, k: int) -> None:
        self.settings = run_settings(self.torch)  # as they were during the timed steps
        if self.stacks is not None:
            self.stacks.stop()
        if self.main is not None:
            self.main.stop()
        self.cpu_window = None
        self._static_memory()
        if self.main is not None:  # now, before another session starts: see Window.export
            self.main.export(self.dir / "trace")

    def _start_attribution(self, k: int) -> None:
        kind = "full" if self.cfg.mode == "full" else "attribution"
        self.attrib = Window(self.torch, kind, k, cuda=self._cuda_in_use())
        self.attrib.start()
        self.cpu_window = self.attrib

    def _stop_attribution(self, k: int) -> None:
        if self.attrib is not None:
            self.attrib.stop()
        self.cpu_window = None
        self._static_memory()
        if self.attrib is not None:
            self.attrib.export(self.dir / "trace")

    def _stop_sampling(self, k: int) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def _export(self, k: int) -> None:
        for w in (self.main, self.attrib):
            if w is not None:
                w.export(self.dir / "trace")  # each window was written when it stopped; this is a no-op
        self.exported = True
        self.status = "complete"
        self.write_results()

    def _finish(self, k: int) -> None:
        self.done = True  # hooks stay registered but return at once (removing an optimizer hook from inside the
        self.write_results()  # optimizer's own hook loop would break that loop)
        if self.cfg.stop_after_profile:
            sys.stdout.flush()
            sys.stderr.flush()
            print("dnnprof: profile collected; stopping the script (--stop-after-profile)", file=sys.stderr,
                  flush=True)
            os._exit(0)

    def _counters_boundary(self, k: int) -> None:
        """The ncu pass: NVTX range around step ``counters_step``, then end the process."""
        from dnnprof.model.run_format import COUNTERS_RANGE

        target = self.cfg.counters_step
        nvtx = self.torch.cuda.nvtx
        if k == target:
            nvtx.range_push(COUNTERS_RANGE)
        elif target is not None and k == target + 1:
            nvtx.range_pop()
            self.torch.cuda.synchronize()
            self.status = "complete"
            self._finish(k)

    def _static_memory(self) -> None:
        if not self._cuda_in_use():
            return
        roots = []
        for w in (self.main, self.attrib):
            if w is not None and w.ranges is not None:
                roots += w.ranges.live_roots()
        self.static = static_breakdown(self.torch, [*self._wl_modules, *roots],
                                       [*self._wl_optimizers, *self.optimizers.live()])

    # --- exit ----------------------------------------------------------------------------------------------
    def note_exception(self, exc_type: type[BaseException], exc: BaseException) -> None:
        self.exception = {"type": exc_type.__name__, "message": str(exc)[:2000]}

    def finalize(self) -> None:
        """Flush whatever was collected; called once at interpreter exit (also after an exception or Ctrl-C)."""
        if self.finalized or os.getpid() != self.pid:
            return
        self.finalized = True
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the flush short
        (self.dir / "finalizing").touch()
        if self.pending is not None:
            self.status = "no_steps"
            self._stop_at_exit(self.pending)
            self.pending.export(self.dir / "trace")
        elif not self.exported:
            if self.main is None:
                self.status = "too_few_steps" if self.source else "no_steps"
            else:
                self.status = "partial"
                if self.stacks is not None:
                    self.stacks.stop()
                for w in (self.main, self.attrib):  # stop and write each window before the next one's turn
                    if w is not None:
                        self._stop_at_exit(w)
                        self._static_memory()
                        w.export(self.dir / "trace")
        if self.sampler is not None:
            self.sampler.stop()
        self.write_results()

    def _stop_at_exit(self, w: Window) -> None:
        """Stop a window from the exit handler under a time limit (see ``exit_guard``): a stop that never returns
        ends the process with what was collected before it, said in ``collector.json``."""
        from dnnprof.collect.exit_guard import ExitGuard

        def timed_out() -> None:
            self.status = "exit_flush_timeout"
            self.notes.append(f"stopping the {w.kind} window at exit did not finish in time: dnnprof ended the "
                              "process (the script's own exit status is lost); run more steps than the window "
                              "needs so that it closes before the script ends")
            w.running = False
            self.write_results()

        guard = ExitGuard(timed_out)
        self.stopped_at_exit = True
        with guard:
            w.stop()
        if guard.pokes:
            self.notes.append(f"stopping the {w.kind} window at exit was slow: nudged {guard.pokes} time(s)")

    # --- results -------------------------------------------------------------------------------------------
    def write_results(self) -> None:
        if self.sampler is not None:
            write_json_atomic(self.dir / SAMPLES_FILE, self.sampler.columns())
        if self.compiled is not None and self.compiled.status != "not_compiled":
            from dnnprof.model.run_format import COMPILED_KERNELS_FILE

            write_json_atomic(self.dir / COMPILED_KERNELS_FILE, self.compiled.results())
        write_json_atomic(self.dir / RESULT_FILE, self.results())

    def results(self) -> dict[str, Any]:
        windows = [w.record() for w in (self.main, self.attrib, self.pending) if w is not None]
        return {
            "format": RESULT_FORMAT,
            "status": self.status,
            "finished": self.done,
            "config": self.cfg.__dict__,
            "plan": {"warmup": self.plan.warmup, "steps": self.plan.steps, "attribution": self.plan.attribution,
                     "baseline_after": self.plan.baseline_after,
                     "pre_baseline": [self.plan.pre_baseline.start, self.plan.pre_baseline.stop],
                     "post_baseline": [self.plan.post_baseline.start, self.plan.post_baseline.stop]},
            "step_source": self.source,
            "warmup": self.warmup,
            "steps_completed": self.completed,
            "step_start_ns": self.start_ns[: len(self.end_ns)],
            "step_end_ns": self.end_ns,
            "step_items": self.items,
            "windows": windows,
            "memory": {"device": self.device, "per_step": self.mem_steps, "static": self.static,
                       "device_total_bytes": self._device_total()},
            "nvml": self.sampler.status() if self.sampler is not None else None,
            "samples_file": SAMPLES_FILE if self.sampler is not None else None,
            "host_hotspots": self.stacks.report() if self.stacks is not None else None,
            "workload": self.workload,
            "environment": self._environment(),
            "settings": self.settings or run_settings(self.torch),
            "script": {"argv": list(sys.argv), "exception": self.exception},
            "notes": self.notes,
        }

    def _device_total(self) -> int | None:
        if self.device is None:
            return None
        return int(self.torch.cuda.get_device_properties(self.device).total_memory)

    def _environment(self) -> dict[str, Any]:
        driver = self.sampler.nvml.driver_version() if self.sampler is not None and self.sampler.nvml.available \
            else None
        return environment(self.torch, self.pid, self.device, driver)


def _compiled_module(module: Any) -> bool:
    """``torch.compile(model)`` (an ``OptimizedModule``) or ``model.compile()`` (a compiled call in place)."""
    return type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None


_DYNAMO_DIR = os.sep + os.path.join("torch", "_dynamo") + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _compiling(torch: Any) -> bool:
    """Inside a frame Dynamo is tracing or running (a compiled function that calls the model): Dynamo says so, or
    one of the callers is Dynamo's own code (a compiled function's wrapper; this hook runs outside the traced frame,
    where ``is_compiling()`` is False)."""
    compiler = getattr(torch, "compiler", None)
    try:
        if compiler is not None and compiler.is_compiling():
            return True
        frame = sys._getframe(1)
        own = True  # the hook's own frames and the ``torch.compiler.disable`` wrapper around it come first
        for _ in range(400):
            if frame is None:
                break
            name = frame.f_code.co_filename
            if own and not (_DYNAMO_DIR in name or name.startswith(_PACKAGE_DIR)):
                own = False
            elif not own and _DYNAMO_DIR in name:
                return True
            frame = frame.f_back
    except Exception:  # noqa: BLE001 - an older torch or Python without these: assume eager
        return False
    return False
