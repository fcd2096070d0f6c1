"""The sweep: for every (precision, mode), probe batch sizes (``auto`` search or a list), then profile a few points.

Order of work, so that an interrupted or budget-limited sweep has the most useful answers first:

1. every series' batch probes (fit, throughput, memory, NVML/GPM): the batch-size answers;
2. a profile at each series' default batch size: kernels, layers, phases for the precision and mode answers;
3. a profile at each series' largest batch that fits (and any other ``--profile-points``).

Each trial runs in its own process (``trial.run_trial``); its record is logged before the next starts
(``store.SweepStore``); a trial already in the log is not run again.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dnnprof.runs.sweep.backend as backend
from dnnprof.collect.lifeline import end_stale_groups
from dnnprof.collect.trial_failure import allocator_state, requested_bytes
from dnnprof.runs.sweep.backend import Plan
from dnnprof.runs.sweep.search import BatchSearch, Observation
from dnnprof.runs.sweep.spec import CPU_UNSUPPORTED, SweepSpec, trial_bound
from dnnprof.runs.sweep.store import TRIALS_DIR, SweepStore
from dnnprof.runs.sweep.trial import Finished, run_trial
from dnnprof.runs.sweep.zygote import ENV_SWITCH, ForkServer

Echo = Callable[[str], None]
TrialRunner = Callable[..., Finished]


class BudgetSpent(Exception):
    """``--time-budget`` ran out: no new trial starts."""


@dataclass
class Series:
    """One (precision, mode) line of the sweep."""

    precision: str
    mode: str
    search: BatchSearch | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    skipped: str = ""

    @property
    def ok_batches(self) -> list[int]:
        return sorted({p["batch_size"] for p in self.probes if p["status"] == "ok"})


class Sweep:
    """Runs one ``SweepSpec``. ``run()`` returns the ``sweep.json`` document.

    Args:
        spec: what to run.
        echo: one line of progress per trial (None: silent).
        runner: the trial runner (a seam for tests); ``run_trial`` by default.
    """

    def __init__(self, spec: SweepSpec, echo: Echo | None = None, runner: TrialRunner | None = None) -> None:
        self.spec = spec.validate()
        self.echo = echo or (lambda _m: None)
        self.runner = runner or run_trial
        # Probes of a built-in workload fork from a server that imported torch once (see ``zygote``).
        self.fork_server = ForkServer(spec.target.name, spec.device, os.environ, spec.out / "fork_server.log") \
            if runner is None and use_fork_server(spec) else None
        self.store = SweepStore(spec.out, spec)
        # A trial of an earlier run of this sweep killed with -9 may still hold the device: end it first.
        for pgid in end_stale_groups(spec.out / TRIALS_DIR):
            self.echo(f"ended a trial left running by an earlier run of this sweep (process group {pgid})")
        self.series = [Series(p, m) for m in spec.modes for p in spec.precisions]
        self.t0 = time.monotonic()
        self.trials_run = 0
        self.messages: list[str] = []

    # --- trials --------------------------------------------------------------------------------------------
    def _trial(self, plan: Plan) -> dict[str, Any]:
        rec = self.store.cached(plan.id)
        if rec is not None:
            self._say(plan, rec, cached=True)
            return rec
        budget = self.spec.time_budget_s
        if budget is not None and time.monotonic() - self.t0 > budget:
            raise BudgetSpent()
        folder = self.store.trial_dir(plan.id)
        argv, env, preexec = backend.command(self.spec, plan, folder)
        run = self.fork_server.run if self.fork_server is not None else self.runner
        fin = run(argv, folder=folder, env=env, timeout_s=self.spec.timeout_s, preexec=preexec)
        rec = backend.read_point(self.spec, plan, folder, fin, self.spec.out)
        rec["trial"] = len(self.store.records) + 1
        self.store.append(rec)
        self.trials_run += 1
        self._say(plan, rec)
        self._write("running")
        return rec

    def _skip(self, plan: Plan, reason: str, limited_by: str | None = "unsupported") -> dict[str, Any]:
        """Record a point that needs no process (a precision the device cannot run, a batch sure to fail)."""
        rec = self.store.cached(plan.id)
        if rec is None:
            rec = backend.base_point(plan)
            rec.update(status="skipped", limited_by=limited_by, message=reason, trial=None)
            self.store.append(rec)
            self._say(plan, rec)
        return rec

    def _say(self, plan: Plan, rec: dict[str, Any], cached: bool = False) -> None:
        what = f"{plan.mode:<5} {plan.precision:<8} batch {plan.batch_size:>6} {plan.kind:<7}"
        if rec["status"] == "ok":
            thr = rec.get("throughput_samples_per_s")
            mem = rec.get("peak_memory_bytes")
            detail = (f"{thr:,.1f} samples/s" if thr is not None else "") + \
                     (f", peak {mem / 2**30:.2f} GiB" if mem else "")
        else:
            detail = f"{rec.get('limited_by') or ''}: {rec.get('message', '')}"[:160]
        took = "(done before)" if cached else f"({rec.get('wall_s') or 0:.1f} s)"
        self.echo(f"{what} {rec['status']:<7} {detail} {took}")

    # --- the phases ----------------------------------------------------------------------------------------
    def _probe_series(self, s: Series) -> None:
        spec = self.spec
        if spec.device == "cpu" and s.precision in CPU_UNSUPPORTED:
            first = spec.batches.sizes[0] if not spec.batches.auto else 1
            s.probes.append(self._skip(Plan("probe", first, s.precision, s.mode, "grid"),
                                       f"precision {s.precision!r} is not run on CPU (no fp16/TF32 math there)"))
            s.skipped = s.probes[-1]["message"]
            return
        if spec.batches.auto:
            s.search = BatchSearch(start=1, max_batch=spec.max_batch_size)
            while (b := s.search.propose()) is not None:
                rec = self._trial(Plan("probe", b, s.precision, s.mode, "search"))
                s.probes.append(rec)
                s.search.observe(observation(rec))
            if s.search.limited_by == "skipped":
                s.skipped = s.probes[-1]["message"]
            return
        failed_at: dict[str, Any] | None = None
        for b in spec.batches.sizes:
            plan = Plan("probe", b, s.precision, s.mode, "grid")
            if failed_at is not None:
                rec = self._skip(plan, f"not run: batch {failed_at['batch_size']} already ran out of memory",
                                 failed_at.get("limited_by"))
            else:
                rec = self._trial(plan)
            s.probes.append(rec)
            if rec["status"] == "skipped" and rec.get("limited_by") == "unsupported":
                s.skipped = rec["message"]
                return
            if rec["status"] == "oom" and failed_at is None:
                failed_at = rec

    def profile_batches(self, s: Series, which: str) -> list[int]:
        """Batch sizes to profile in ``s`` for ``which`` (``default``, ``max``, ``all`` or a number)."""
        ok = s.ok_batches
        if not ok:
            return []
        if which == "max":
            return [ok[-1]]
        if which == "all":
            return ok
        if which == "default":
            d = self.spec.target.default_batch_size or ok[0]
            fits = [b for b in ok if b <= d]
            return [d] if d in ok or (s.search is not None and d <= s.search.lo) else fits[-1:]
        b = int(which)
        largest = s.search.lo if s.search is not None else ok[-1]
        return [b] if b <= largest else []

    def _profile_phase(self, words: tuple[str, ...]) -> None:
        for s in self.series:
            if s.skipped:
                continue
            for w in words:
                for b in self.profile_batches(s, w):
                    self._trial(Plan("profile", b, s.precision, s.mode, "profile"))

    def run(self) -> dict[str, Any]:
        """Run (or resume) the sweep and return the final ``sweep.json`` document.

        Raises:
            KeyboardInterrupt: Ctrl-C or SIGTERM; everything finished is in the directory (status ``interrupted``).
        """
        self.store.open()
        if self.store.resumed:
            self.echo(f"resuming: {len(self.store.records)} trials already done in {self.spec.out}")
        previous = _sigterm_as_interrupt()
        status = "complete"
        try:
            for s in self.series:
                self._probe_series(s)
            pp = self.spec.profile_points
            first = tuple(w for w in pp if w == "default")
            rest = tuple(w for w in pp if w != "default")
            for words in (first, rest):
                self._profile_phase(words)
        except BudgetSpent:
            status = "budget_spent"
            self.messages.append(f"--time-budget of {self.spec.time_budget_s:g} s spent: later trials did not run "
                                 "(re-run the same command to continue)")
        except KeyboardInterrupt:
            self._write("interrupted")
            raise
        finally:
            _restore_sigterm(previous)
            self._close_fork_server()
        return self._write(status)

    def _close_fork_server(self) -> None:
        fs = self.fork_server
        if fs is None:
            return
        if fs.note and fs.note != "fork server closed":
            self.messages.append(fs.note)
        elif fs.preload_s is not None:
            self.messages.append(f"probes were forked from a server that imported torch once ({fs.preload_s:.1f} s); "
                                 f"{ENV_SWITCH}=0 starts each from a fresh interpreter")
        fs.close()

    # --- results -------------------------------------------------------------------------------------------
    def max_batch(self) -> list[dict[str, Any]]:
        """The ``max_batch_size`` entries: the largest batch that fits per (precision, mode), and what ran out."""
        out = []
        for s in self.series:
            entry: dict[str, Any] = {"precision": s.precision, "mode": s.mode}
            if s.skipped:
                entry.update(batch_size=None, limited_by="unsupported", exact=False, message=s.skipped)
            elif s.search is not None:
                se = s.search
                entry.update(batch_size=se.lo, limited_by=se.limited_by, exact=se.exact,
                             bracket=[se.lo, se.hi], trials=se.trials, trial_bound=trial_bound(max(se.lo, 1)),
                             search="auto")
            else:
                ok = s.ok_batches
                largest = ok[-1] if ok else 0
                above = [p for p in s.probes if p["batch_size"] > largest and p["status"] not in ("ok",)]
                first_fail = min(above, key=lambda p: p["batch_size"]) if above else None
                entry.update(batch_size=largest,
                             limited_by=(first_fail.get("limited_by") or first_fail["status"]) if first_fail
                             else "largest_tried",
                             exact=False, bracket=[largest, first_fail["batch_size"] if first_fail else None],
                             trials=len(s.probes), search="list")
            out.append(entry)
        return out

    def _write(self, status: str) -> dict[str, Any]:
        return self.store.write(status=status, max_batch=self.max_batch(), elapsed_s=time.monotonic() - self.t0,
                                trials_run=self.trials_run, messages=self.messages)


def observation(rec: dict[str, Any]) -> Observation:
    """What the batch search reads of a point record (also of one read back from ``sweep.json``)."""
    reserved = rec.get("peak_reserved_bytes") if rec.get("limit_resource_bytes") == rec.get("peak_allocated_bytes") \
        else None  # the held-but-unusable share only means something for the GPU's caching allocator
    oom = rec["status"] == "oom"
    at_failure, held = allocator_state(rec.get("message") or "") if oom and reserved is not None else (None, None)
    return Observation(batch_size=rec["batch_size"], status=rec["status"], used_bytes=rec.get("limit_resource_bytes"),
                       capacity_bytes=rec.get("memory_capacity_bytes"), limited_by=rec.get("limited_by"),
                       requested_bytes=requested_bytes(rec.get("message") or "") if oom else None,
                       reserved_bytes=reserved, allocated_at_failure_bytes=at_failure,
                       unallocated_at_failure_bytes=held)


def _sigterm_as_interrupt() -> Any:
    """SIGTERM ends the sweep like Ctrl-C (the running trial is killed, the finished ones are kept)."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def use_fork_server(spec: SweepSpec) -> bool:
    """Probes fork from a preloaded server for built-in workloads, except CPU sweeps under ``--memory-limit``
    (their allocator settings must be in place when the process starts) and when ``DNNPROF_SWEEP_FORK_SERVER=0``."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or spec.target.kind != "workload" or not hasattr(os, "fork"):
        return False
    return not (spec.device == "cpu" and spec.memory_limit is not None)


def run_sweep(spec: SweepSpec, echo: Echo | None = None, runner: TrialRunner | None = None) -> dict[str, Any]:
    """Run (or resume) a sweep; return its ``sweep.json`` document."""
    return Sweep(spec, echo=echo, runner=runner).run()
