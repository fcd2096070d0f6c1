"""Host-side hotspots: a tiny sampling profiler of the training thread's Python stack.

When steps are host-bound, the question is which Python lines keep the CPU busy (what kernprof answered by hand).
A daemon thread looks at the main thread's frame every ``period_s`` (``sys._current_frames``, no dependency,
no tracing hooks) and counts, per sample:

* the innermost Python frame (``self``): where the interpreter is, often inside torch or the data pipeline;
* the innermost frame of the user's own code (``user``: not the standard library, not site-packages, not dnnprof):
  the line of the training script that led there, e.g. ``loss = model(x)`` or ``batch = next(it)``.

Time spent inside C calls (a CUDA synchronisation in ``loss.item()``, a kernel launch) is charged to the Python line
that made the call, so a line that waits on the GPU shows up too; the report says so.
"""

from __future__ import annotations

import collections
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Iterable
from typing import Any

#: Default period: 100 samples per second of training is plenty for a top-10 and costs < 1% of a step.
DEFAULT_PERIOD_S = 0.01


def _norm(path: str) -> str:
    return os.path.normcase(os.path.abspath(path)) + os.sep


def _library_roots() -> tuple[str, ...]:
    roots = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the dnnprof package
    return tuple(sorted(_norm(r) for r in roots if r))


#: Code that counts as the user's even though it lives in a library root: dnnprof's own benchmark workloads.
USER_ROOTS = (_norm(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads")),)


class StackSampler:
    """Samples one thread's Python stack in the background.

    Args:
        thread_id: the thread to watch (default: the thread that creates the sampler).
        period_s: time between samples.
        library_roots: path prefixes that are not "user code" (default: stdlib, site-packages, dnnprof except
            its workloads).
    """

    def __init__(self, thread_id: int | None = None, period_s: float = DEFAULT_PERIOD_S,
                 library_roots: Iterable[str] | None = None) -> None:
        self.thread_id = threading.get_ident() if thread_id is None else thread_id
        self.period_s = period_s
        self.roots = tuple(library_roots) if library_roots is not None else _library_roots()
        self.self_counts: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self.user_counts: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self.samples = 0
        self.elapsed_s = 0.0
        self._is_lib: dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def _library(self, filename: str) -> bool:
        v = self._is_lib.get(filename)
        if v is None:
            path = os.path.normcase(os.path.abspath(filename)) if not filename.startswith("<") else filename
            v = filename.startswith("<") or (path.startswith(self.roots) and not path.startswith(USER_ROOTS))
            self._is_lib[filename] = v
        return v

    def sample(self, frame: Any) -> None:
        """Count one stack whose innermost frame is ``frame`` (the thread calls this; tests may too)."""
        if frame is None:
            return
        self.samples += 1
        code = frame.f_code
        self.self_counts[(code.co_filename, frame.f_lineno, code.co_name)] += 1
        f = frame
        while f is not None:
            code = f.f_code
            if not self._library(code.co_filename):
                self.user_counts[(code.co_filename, f.f_lineno, code.co_name)] += 1
                break
            f = f.f_back

    def _run(self) -> None:
        tid = self.thread_id
        while not self._stop.wait(self.period_s):
            self.sample(sys._current_frames().get(tid))

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._run, name="dnnprof-stack-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            self.elapsed_s += time.perf_counter() - self._t0

    def report(self, top: int = 15) -> dict[str, Any]:
        """Top lines by share of samples, as JSON-ready data."""

        def rows(counter: collections.Counter[tuple[str, int, str]]) -> list[dict[str, Any]]:
            n = max(self.samples, 1)
            return [{"file": f, "line": line, "function": fn, "samples": c, "pct": round(100.0 * c / n, 2)}
                    for (f, line, fn), c in counter.most_common(top)]

        return {
            "method": "main-thread Python stack sampling",
            "period_s": self.period_s,
            "samples": self.samples,
            "elapsed_s": round(self.elapsed_s, 6),
            "note": "time in C calls (CUDA syncs such as loss.item(), kernel launches) counts for the calling line",
            "top_user_lines": rows(self.user_counts),
            "top_innermost": rows(self.self_counts),
        }
