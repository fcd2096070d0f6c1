"""When to do what during a run: a pure function of the number of completed steps.

A run is cut into steps by boundaries (an optimizer step, the end of a marker range, ``dnnprof.step()``).
At boundary ``k``, ``k`` steps have completed and step ``k`` is about to start. Default (low-overhead) mode::

    steps  0 .. W-1            warm-up (unprofiled; the later half is the unprofiled baseline)
    steps  W .. W+S-1          timing window: CUDA activity + user ranges, no ops (kernels, copies, runtime calls)
    step   W+S                 gap: no profiler
    steps  W+S+1 .. W+S+A      attribution window: CPU ops + module ranges, joined onto the timing window
    step   W+S+A+1             gap
    steps  .. +B               unprofiled baseline after the windows, then the collector is done

``--full`` (or a run without CUDA) has one window of S steps with everything and no attribution window.

Why the gaps: after a profiler session stops, Kineto tears CUPTI down asynchronously, from the next CUDA call;
a session that starts before that has happened can lose its GPU events (pytorch/kineto#1554), and the step
that pays for the teardown is not a fair baseline. One unprofiled step between sessions lets it finish. For the
same reason the step after the first boundary (where the whole-run fallback session stops) is never a baseline.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Actions, in the order they run when several fall on the same boundary.
ACTIONS = (
    "start_sampling",  # NVML/GPM thread on (before the window, so GPM has history)
    "stop_main",  # stop the timing (or full) profiler, keep its results in memory
    "start_attribution",
    "stop_attribution",
    "stop_sampling",
    "export",  # write the traces (blocks the script for the export time; outside any measured step)
    "start_main",
    "finish",  # write the collector's results; with --stop-after-profile, end the process
)

#: Most unprofiled warm-up steps used as the "before" baseline.
MAX_PRE_BASELINE = 5
#: Unprofiled steps between two profiler sessions (and after the last one, before the baseline).
GAP = 1
#: Warm-up until steady (built-in workloads, whose loop dnnprof controls): at least this long from step 1 …
STEADY_MIN_WARMUP_S = 1.0
#: … and until the median of the last few steps is within this share of the median of the few before them …
STEADY_TOLERANCE = 0.10
#: … for at most this many steps or seconds more than the warm-up asked for.
STEADY_MAX_EXTRA_STEPS = 200
STEADY_MAX_EXTRA_S = 20.0


def warm(durations_ns: Sequence[int], elapsed_ns: int, extra_steps: int, extra_ns: int) -> tuple[bool, str]:
    """Whether a run is warm enough to start the profiled window, and why: ``steady``, ``cap`` (still changing,
    but the extension is spent) — or, when not, ``short`` (under ``STEADY_MIN_WARMUP_S`` since step 1) or
    ``changing``.

    ``durations_ns``: the completed warm-up steps from step 1 (step 0 pays for start-up); ``elapsed_ns``: time since
    step 1 started; ``extra_steps`` / ``extra_ns``: how far past the requested warm-up the run already is.
    Steady: the median of the last ``n`` steps is within ``STEADY_TOLERANCE`` of the median of the ``n`` before
    them, ``n`` = 3 (2 with fewer than 6 steps). GPU clocks, cuDNN/cuBLAS heuristics, the caching allocator and
    lazily loaded kernels settle over the first steps; on an H100 a 5 ms ResNet-50 inference step still ran at
    twice its later time after 3 steps.
    """
    if extra_steps >= STEADY_MAX_EXTRA_STEPS or extra_ns >= STEADY_MAX_EXTRA_S * 1e9:
        return True, "cap"
    if elapsed_ns < STEADY_MIN_WARMUP_S * 1e9:
        return False, "short"
    n = 3 if len(durations_ns) >= 6 else 2
    if len(durations_ns) < 2 * n:
        return False, "changing"
    last = statistics.median(durations_ns[-n:])
    before = statistics.median(durations_ns[-2 * n:-n])
    if before > 0 and abs(last / before - 1.0) <= STEADY_TOLERANCE:
        return True, "steady"
    return False, "changing"


@dataclass(frozen=True)
class Plan:
    """Window positions, in steps.

    Attributes:
        warmup: steps before the main window (at least 1: step 0 has no boundary before it).
        steps: steps in the main (timing or full) window.
        attribution: steps in the attribution window (0: none, as in ``--full`` mode or on CPU).
        baseline_after: unprofiled steps measured after the windows.
    """

    warmup: int
    steps: int
    attribution: int = 0
    baseline_after: int = 0

    def __post_init__(self) -> None:
        if self.warmup < 1:
            raise ValueError("warm-up must be at least 1 step (step 0 starts before any boundary is seen)")
        if self.steps < 1:
            raise ValueError("the profiled window needs at least 1 step")
        if self.attribution < 0 or self.baseline_after < 0:
            raise ValueError("attribution and baseline step counts cannot be negative")

    @property
    def main(self) -> range:
        return range(self.warmup, self.warmup + self.steps)

    @property
    def attribution_window(self) -> range:
        start = self.main.stop + (GAP if self.attribution else 0)
        return range(start, start + self.attribution)

    @property
    def pre_baseline(self) -> range:
        """Unprofiled steps before the window used as the baseline (the later half of the warm-up, never step 1)."""
        return range(max(1 + GAP, self.warmup // 2, self.warmup - MAX_PRE_BASELINE), self.warmup)

    @property
    def post_baseline(self) -> range:
        end = self.attribution_window.stop + (GAP if self.baseline_after else 0)
        return range(end, end + self.baseline_after)

    @property
    def sampling_start(self) -> int:
        return self.pre_baseline.start if len(self.pre_baseline) else self.warmup

    @property
    def export_at(self) -> int:
        """The boundary where the last window stops and the traces are written."""
        return self.attribution_window.stop if self.attribution else self.main.stop

    @property
    def last(self) -> int:
        """The boundary at which the collector is done."""
        return self.post_baseline.stop

    @property
    def total_steps(self) -> int:
        """Steps a loop must run for the collector to finish (a workload runs exactly this many)."""
        return self.last

    def actions(self, k: int) -> tuple[str, ...]:
        """What to do at boundary ``k`` (``k`` steps completed), in execution order."""
        todo: set[str] = set()
        if k == self.sampling_start:
            todo.add("start_sampling")
        if k == self.warmup:
            todo.add("start_main")
        if k == self.main.stop:
            todo.add("stop_main")
        if self.attribution and k == self.attribution_window.start:
            todo.add("start_attribution")
        if self.attribution and k == self.attribution_window.stop:
            todo.add("stop_attribution")
        if k == self.export_at:
            todo |= {"stop_sampling", "export"}
        if k == self.last:
            todo.add("finish")
        return tuple(a for a in ACTIONS if a in todo)

    def is_baseline(self, step: int) -> bool:
        return step in self.pre_baseline or step in self.post_baseline

    def window_of(self, step: int) -> str:
        """``warmup``, ``main``, ``gap``, ``attribution``, ``baseline_after`` or ``after`` for a step index."""
        if step < self.warmup:
            return "warmup"
        if step in self.main:
            return "main"
        if step in self.attribution_window:
            return "attribution"
        if step in self.post_baseline:
            return "baseline_after"
        if step < self.post_baseline.start:
            return "gap"
        return "after"
