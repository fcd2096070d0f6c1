"""The largest batch that fits: double until a trial fails, then close in on the edge (pure, no processes).

Plain doubling-then-bisection needs about 2·log2(max) trials. Peak memory grows almost linearly with the batch
size, so once two trials that fit have measured it, a straight line through them predicts the edge:
``b* = b2 + (capacity - used(b2)) / slope``. The search tries b* and b* + 1, which usually ends it: doubling
costs floor(log2 max) + 1 trials and the edge two more, within the promised ceil(log2 max) + 3.

The line is a guess, so every guess is checked by a trial, and a guess the trial contradicts is followed by a
plain bisection step (the search never does worse than about twice bisection). A failure that is not
out-of-memory (an error or a timeout at some batch) also bounds the search, but the memory line says nothing
about it, so the search bisects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dnnprof.collect.sweep.spec import trial_bound

#: The memory line is used only when the two points differ by at least this share of the capacity: below it,
#: allocator rounding (2 MiB blocks, 20 MiB segments) swamps the slope.
MIN_SPREAD_FRACTION = 0.02
#: Guesses from the memory line that may miss in a row (each miss that fits adds a measurement next to the edge)
#: before the search gallops and bisects instead.
MAX_GUIDED_MISSES = 2
#: Once the promised trials are spent, the search stops when the edge is known to ±1, or after this many more
#: trials whatever the bracket.
EXTRA_TRIALS = 6
FAIL_STATUSES = ("oom", "error", "timeout")


@dataclass(frozen=True)
class Observation:
    """What one trial said about one batch size.

    Attributes:
        batch_size: the batch tried.
        status: ``ok``, ``oom``, ``error``, ``timeout`` or ``skipped``.
        used_bytes: peak memory of the resource the limit applies to (GPU reserved, CPU address space).
        capacity_bytes: what the trial was allowed to use of that resource, when known.
        limited_by: for a failure, the resource that ran out (``gpu_memory``, ``host_memory``, ``timeout``, ...).
    """

    batch_size: int
    status: str
    used_bytes: int | None = None
    capacity_bytes: int | None = None
    limited_by: str | None = None

    @property
    def fits(self) -> bool:
        return self.status == "ok"


@dataclass
class BatchSearch:
    """Find the largest batch in ``[start, max_batch]`` that runs.

    Use: ``b = s.propose()``; run a trial; ``s.observe(Observation(b, ...))``; repeat until ``propose()`` is None.

    Attributes:
        start: first batch tried.
        max_batch: the largest batch tried (the answer is ``max_batch`` with ``limited_by="max_batch_size"``
            when it fits).
        bounded: stop refining once ``trial_bound(lo)`` trials are spent (``exact`` then tells whether the edge
            was pinned); False refines until it is.
    """

    start: int = 1
    max_batch: int = 65536
    observations: list[Observation] = field(default_factory=list)
    bounded: bool = True
    _mode: str = "double"
    _step: int = 2
    _misses: int = 0
    _pending: tuple[str, int | None] = ("double", None)
    _stopped: str | None = None

    # --- state ---------------------------------------------------------------------------------------------
    @property
    def lo(self) -> int:
        """Largest batch that fitted (0 when none did)."""
        ok = [o.batch_size for o in self.observations if o.fits]
        return max(ok) if ok else 0

    @property
    def hi(self) -> int | None:
        """Smallest batch above ``lo`` that failed, or None."""
        lo = self.lo
        bad = [o.batch_size for o in self.observations if o.status in FAIL_STATUSES and o.batch_size > lo]
        return min(bad) if bad else None

    @property
    def trials(self) -> int:
        return len(self.observations)

    @property
    def exact(self) -> bool:
        """True when the edge is pinned: ``lo`` fits and ``lo + 1`` does not (or ``lo`` is the cap)."""
        hi = self.hi
        return (hi is not None and hi == self.lo + 1) or (self.lo >= self.max_batch) or \
               (self.lo == 0 and hi == self.start)

    @property
    def limited_by(self) -> str | None:
        """What stopped the search: the failure at ``hi``, ``max_batch_size``, or the reason it stopped."""
        if self._stopped:
            return self._stopped
        hi = self.hi
        if hi is not None:
            o = next(o for o in self.observations if o.batch_size == hi and not o.fits)
            return o.limited_by or o.status
        if self.lo >= self.max_batch:
            return "max_batch_size"
        return None

    def stop(self, reason: str) -> None:
        """End the search early (``skipped`` first trial, budget spent); ``limited_by`` reports ``reason``."""
        self._stopped = reason

    # --- the memory line -----------------------------------------------------------------------------------
    def predicted_max(self) -> int | None:
        """The largest batch the memory line says fits, or None when it cannot say."""
        ok = sorted((o for o in self.observations if o.fits and o.used_bytes is not None
                     and o.capacity_bytes), key=lambda o: o.batch_size)
        if len(ok) < 2:
            return None
        b = ok[-1]
        cap = min(o.capacity_bytes for o in ok)  # type: ignore[type-var]
        # The partner is the largest point far enough below `b` for the slope to mean something.
        a = next((o for o in reversed(ok[:-1])
                  if b.used_bytes - o.used_bytes >= MIN_SPREAD_FRACTION * cap), None)  # type: ignore[operator]
        if a is None:
            return None
        slope = (b.used_bytes - a.used_bytes) / (b.batch_size - a.batch_size)  # type: ignore[operator]
        room = cap - b.used_bytes  # type: ignore[operator]
        return b.batch_size + math.floor(room / slope)

    # --- the search ---------------------------------------------------------------------------------------
    def propose(self) -> int | None:
        """The next batch to try, or None when the search is over."""
        if self._stopped:
            return None
        if not self.observations:
            return min(self.start, self.max_batch)
        lo, hi = self.lo, self.hi
        if lo == 0:
            # The first trial failed: an out-of-memory at `start` > 1 is worth halving; anything else ends it.
            smallest = min(o.batch_size for o in self.observations)
            failed = next(o for o in self.observations if o.batch_size == smallest)
            return smallest // 2 if failed.status == "oom" and smallest > 1 else None
        if self.bounded and self.trials >= trial_bound(lo) and (
                hi is not None and (hi - lo <= 2
                                    or self.trials >= trial_bound(lo) + EXTRA_TRIALS)):
            return None  # the promised trials are spent and the edge is known to ±1: `exact` says if it was pinned
        if hi is None:
            if lo >= self.max_batch:
                return None
            nxt = min(lo * 2, self.max_batch)
            pred = self.predicted_max() if self._mode == "guided" else None
            if self._mode == "gallop_up":
                nxt = min(lo + self._step, nxt)
            elif pred is not None and pred < nxt:
                nxt = max(pred, lo + 1)
            self._pending = (self._mode, pred)
            return nxt
        if hi - lo <= 1:
            return None
        mid = (lo + hi) // 2
        pred = self.predicted_max() if self._mode == "guided" and self._memory_bound() else None
        if pred is not None:
            guess = min(max(pred, lo + 1), hi - 1)
        elif self._mode == "gallop_up" and lo + self._step < hi:
            guess = lo + self._step
        elif self._mode == "gallop_down" and hi - self._step > lo:
            guess = hi - self._step
        else:
            guess = mid
        self._pending = (self._mode if pred is not None or guess != mid else "bisect", pred)
        return guess  # never tried before: a tried batch between lo and hi would have moved lo or hi

    def _memory_bound(self) -> bool:
        hi = self.hi
        if hi is None:
            return True
        o = next(o for o in self.observations if o.batch_size == hi and not o.fits)
        return o.status == "oom"

    def observe(self, obs: Observation) -> None:
        """Record a trial and pick how the next one is chosen.

        A guess from the memory line that the trial contradicts (a fit above the predicted edge, a failure at
        or below it) is retried once with the new measurement when it fitted; otherwise the search gallops away
        from the guess in steps of 2, 4, 8 … and, once a gallop step overshoots, bisects. A line that is off by
        e costs about 2·log2(e) extra trials.
        """
        mode, pred = self._pending
        self._pending = ("double", None)
        self.observations.append(obs)
        if obs.status == "skipped":
            self.stop("skipped")
            return
        if mode == "guided" and pred is not None:
            contradicted = (obs.fits and obs.batch_size > pred) or (not obs.fits and obs.batch_size <= pred)
            self._misses = self._misses + 1 if contradicted else 0
            # A miss that fitted measured memory right next to the edge: the next line is better, try it again.
            if contradicted and (not obs.fits or self._misses >= MAX_GUIDED_MISSES):
                self._mode, self._step = ("gallop_up" if obs.fits else "gallop_down"), 2
        elif mode in ("gallop_up", "gallop_down"):
            if obs.fits == (mode == "gallop_up"):
                self._step *= 2
            else:
                self._mode = "bisect"
        elif mode == "double" and self._mode == "double" and self.predicted_max() is not None:
            self._mode = "guided"
