"""The largest batch that fits: double until a trial fails, then close in on the edge (pure, no processes).

Plain doubling-then-bisection needs about 2·log2(max) trials; the promise is ceil(log2 max) + 3. Doubling costs
floor(log2 max) + 2 trials (the last one fails), so the edge must be found in about two more: predicted, then
checked (``b*`` fits, ``b* + 1`` does not).

The prediction comes from what an out-of-memory says. A failed trial reports the memory in use when it failed and
the size of the allocation that failed ("Tried to allocate 11.95 GiB"); their sum is what the failing batch
needed at that moment, ``D(hi)``. That demand grows linearly with the batch from the batch-independent memory
(weights, optimizer state: the intercept of the line through the trials that fitted), so
``D(b) = D0 + (D(hi) - D0) · b / hi`` (or the line through two failures, once two are far enough apart). The edge
is where ``D(b)`` meets the capacity less what the caching allocator held but could not give back when it failed
(reserved minus allocated). On real DeepSpeech2 training on an H100 this places the edge within 1 % (fp32:
predicted 910, true edge in 898–913; amp-fp16: 1720, true edge in 1715–1778), where the line through the fitting
trials alone, extended to the full capacity, lands 10–15 % too high: the failure is a large single allocation
(an RNN workspace, a logits buffer) made while most of the memory is in use.

Where PyTorch's message gives the allocator's state at the failure ("Of the allocated memory X is allocated by
PyTorch, and Y is reserved by PyTorch but unallocated"), the demand is X + the request + Y, compared with the
whole capacity: the held share Y is fragmentation among blocks the batch sized, so it grows with the batch. The
trial's peak allocated is not used then: a batch can fail in a later phase than the one that set its peak, and
peak + request counts two moments as one. Under a 512 MiB limit on an H100 (DeepSpeech2-tiny) that sent the
prediction 100 batches low and the search to 23 trials; with the state at the failure it takes 13.

Every prediction is checked by a trial. A failure at or below the predicted edge adds a demand point and is
refitted once; a second miss switches to a gallop down from the last guess (steps 2, 8, 32 …) until a trial
crosses the edge; a failure that does so is a demand point nearer the edge and is used for one more prediction,
then plain bisection. A failure that says nothing about memory (an error, a timeout, an OOM without sizes) bisects.

A trial that fits is a demand point too, on the other side of the edge: its peak reserved is what the batch
needed, on the same scale as a failure's allocated + request + reserved-but-unallocated (``need_bytes``). When that
peak lies on the failures' demand line (within ``SAME_CURVE_FRACTION`` of the capacity) and the nearest failure
above it is one its sizes explain, the next trial is where the straight line between the two meets the capacity:
regula falsi, with the Illinois rule (an end kept twice in a row counts half as far from the capacity) so that a
bent curve does not make it creep. A fit far off the line did not reach the phase that fails (a large allocation
made late in the step): the search then gallops up from it, as it does when a fit contradicts a guess. Once the
promised trials are spent it bisects, from a gap of 3 or 4 at once (one midpoint then gives the promised ±1, which
no guess beats), so it never does much worse than bisection.

While doubling, the line through the two largest fits' peak reserved memory names the edge when a third fit lies
on it (``STRAIGHT_FRACTION``): DeepSpeech2 fp32 inference grows by 29.55 MB a sample from batch 32 to 2048, and the
line meets the capacity at 2828, the true edge, instead of doubling to 4096 and closing in from there. A guess that
fits is followed by a secant step (the line through it and the fit before, unchecked). A guess that fails without
sizes (cuBLAS failing to allocate its handle) failed at the very edge: the search gallops down from it in steps of
2, 8, 32 … With one promised trial left, a guess right under the failure becomes ``hi - 2`` and one right above the
fit ``lo + 2``: either result then gives the promised ±1. The line is no law: under memory pressure the caching
allocator hands cached blocks back, so in training the reserved line bends near the capacity (fp32: it named 798,
which fitted with its reserved at the capacity; the edge is 911).

Trials per series of the DeepSpeech2 study on the H100: as run (the first study, its second run with fits as
demand points, its third run with this search), and replayed on the records (``recorded_world`` in
tests/test_sweep_search.py: the largest batch the H100 ran is the edge, unrun batches take their neighbours'
numbers) with regula falsi alone and with this search, first / second / third records:

    ==============  =======  ==============  ==============  ==================
    series          promise  H100 ran        regula falsi    this search
    ==============  =======  ==============  ==============  ==================
    train fp32      13       13 / 13 / 15    13 / 13 / –     13 / 13 / 15
    train amp-fp16  14       15 / 15 / 14    14 / 15 / –     14 / 14 / 14
    train bf16      14       20 / 14 / 14    14 / 14 / –     14 / 14 / 14
    infer fp32      15       21 / 23 / 14    17 / 23 / –     14 / 14 / 14
    infer amp-fp16  16       22 / 19* / 27   29 / 26 / –     23 / 28 / 27
    infer bf16      17       22 / – / 24     26 / – / –      19 / – / 17
    ==============  =======  ==============  ==============  ==================

(* unpinned: that run ran out of time). The third run's infer bf16 bisected after the unsized failure (24); the
gallop down came after it and is checked on its records only. The replays of amp-fp16 inference say little: the
H100 tried nothing between its largest fit and a failure far above it, so the replay invents every failure in
between; the fits' peak reserved also jumps (68.6 GB at 4096, 52.1 GB at 4621: another algorithm), and the edge
itself moves between runs (4777, ≥ 4621, 5238). Under a 512 MiB limit (DeepSpeech2-tiny, 15 and 15 trials against
12 and 13) the allocator's rounding makes peaks lumpy (batch 489 needed 31 MB more than 512), so no line names the
edge there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dnnprof.runs.sweep.spec import trial_bound

#: The memory line is used only when the two points differ by at least this share of the capacity: below it,
#: allocator rounding (2 MiB blocks, 20 MiB segments) swamps the slope.
MIN_SPREAD_FRACTION = 0.02
#: Two failures give the demand's slope directly when their demands differ by at least this share of the capacity
#: (the sizes in PyTorch's message are rounded to two decimals).
SLOPE_SPREAD_FRACTION = 0.01
#: Predictions that may miss before the search gallops and bisects instead.
MAX_GUIDED_MISSES = 2
#: A gallop's steps grow by this factor after each trial that did not cross the edge.
GALLOP_GROWTH = 4
#: A gallop starts with a step of ``lo // GALLOP_FIRST_STEP_DIVISOR`` (at least ``GALLOP_MIN_STEP``).
GALLOP_FIRST_STEP_DIVISOR = 512
GALLOP_MIN_STEP = 2
#: Once the promised trials are spent, the search stops when the edge is known to ±1; after this many more trials
#: it only bisects (at most log2 of the bracket more).
EXTRA_TRIALS = 6
#: A fit's peak is a point on the demand line when it lies within this share of the capacity of it.
SAME_CURVE_FRACTION = 0.03
#: While doubling, the line through the two largest fits' peak reserved memory names the edge only when a third
#: fit lies on it, within this share of the capacity: a straight line (DeepSpeech2 inference: 0.01 %) is trusted,
#: a bending one (training, whose step makes late large allocations: 2.5 %) is left to the out-of-memory's sizes.
STRAIGHT_FRACTION = 0.005
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
        requested_bytes: for an out-of-memory, the size of the allocation that failed, when the message says.
        reserved_bytes: GPU memory the caching allocator held (peak reserved); with ``used_bytes`` (peak
            allocated) it says how much was held but unusable when a trial failed.
        allocated_at_failure_bytes, unallocated_at_failure_bytes: for a GPU out-of-memory, what PyTorch's
            allocator had allocated, and reserved but not allocated, when it failed (from its message); better
            than the peaks when a batch fails before reaching the peak of an earlier step.
    """

    batch_size: int
    status: str
    used_bytes: int | None = None
    capacity_bytes: int | None = None
    limited_by: str | None = None
    requested_bytes: int | None = None
    reserved_bytes: int | None = None
    allocated_at_failure_bytes: int | None = None
    unallocated_at_failure_bytes: int | None = None

    @property
    def demand_bytes(self) -> int | None:
        """For an out-of-memory: what the batch needed when it failed, at least.

        With the allocator's own state at the failure (from its message): allocated + the failed request + what
        it held reserved but unallocated. That held share is fragmentation of blocks sized by the batch, so it
        grows with the batch like the rest of the demand, and the whole demand is compared with the capacity.
        Without it: the trial's peak allocated + the request (the held share is then taken off the capacity).
        """
        if self.status != "oom" or not self.requested_bytes:
            return None
        if self.allocated_at_failure_bytes is not None:
            return self.allocated_at_failure_bytes + self.requested_bytes + (self.unallocated_at_failure_bytes or 0)
        return None if self.used_bytes is None else self.used_bytes + self.requested_bytes

    @property
    def held_bytes(self) -> int:
        """What to take off the capacity for a failure: 0 when :attr:`demand_bytes` already counts the held
        share, else peak reserved − peak allocated."""
        if self.allocated_at_failure_bytes is not None:
            return 0
        return max(0, (self.reserved_bytes or 0) - (self.used_bytes or 0))

    @property
    def need_bytes(self) -> int | None:
        """What the trial needed, on one scale with the whole capacity: for a fit its peak reserved (what the
        caching allocator held, its fragmentation included), or its peak use where there is no allocator; for an
        out-of-memory :attr:`demand_bytes` plus :attr:`held_bytes`. None when the trial does not say."""
        if self.fits:
            return self.reserved_bytes if self.reserved_bytes is not None else self.used_bytes
        demand = self.demand_bytes
        return None if demand is None else demand + self.held_bytes

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
    _streak: int = 0
    _pending: tuple[str, int | None] = ("double", None)
    _stopped: str | None = None
    _secant: bool = False  # the last trial was a guess that fitted: the next may be a secant step

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

    # --- the memory models -------------------------------------------------------------------------------
    def _capacity(self) -> int | None:
        caps = [o.capacity_bytes for o in self.observations if o.capacity_bytes]
        return min(caps) if caps else None

    def _line(self) -> tuple[float, float] | None:
        """``(intercept, slope)`` of peak memory against batch through the two largest fitting trials that are
        far enough apart, or None."""
        cap = self._capacity()
        ok = sorted((o for o in self.observations if o.fits and o.used_bytes is not None),
                    key=lambda o: o.batch_size)
        if cap is None or len(ok) < 2:
            return None
        b = ok[-1]
        # The partner is the largest point far enough below `b` for the slope to mean something.
        a = next((o for o in reversed(ok[:-1])
                  if b.used_bytes - o.used_bytes >= MIN_SPREAD_FRACTION * cap), None)  # type: ignore[operator]
        if a is None:
            return None
        slope = (b.used_bytes - a.used_bytes) / (b.batch_size - a.batch_size)  # type: ignore[operator]
        return b.used_bytes - slope * b.batch_size, slope  # type: ignore[operator]

    def straight_edge(self, checked: bool = True) -> int | None:
        """While doubling: where the line through the two largest fits' :attr:`Observation.need_bytes` (peak
        reserved: what the caching allocator held, on one scale with the capacity) meets the capacity, when a
        third, smaller fit lies on that line (:data:`STRAIGHT_FRACTION`); else None. ``checked=False`` skips the
        third fit: after a guess that fitted, the line through it and the fit before is a secant step."""
        cap = self._capacity()
        ok = sorted((o for o in self.observations if o.fits and o.need_bytes is not None), key=lambda o: o.batch_size)
        if cap is None or len(ok) < (3 if checked else 2):
            return None
        (bb, nb), (bc, nc) = ((o.batch_size, float(o.need_bytes)) for o in ok[-2:])  # type: ignore[arg-type]
        if nc - nb < MIN_SPREAD_FRACTION * cap:
            return None
        slope = (nc - nb) / (bc - bb)
        if checked and abs(nb - slope * (bb - ok[-3].batch_size) - float(ok[-3].need_bytes)) > STRAIGHT_FRACTION * cap:  # type: ignore[arg-type]
            return None
        return bc + math.floor((cap - nc) / slope)

    def predicted_max(self) -> int | None:
        """The largest batch whose peak memory, on the line through the fitting trials, stays within the
        capacity; None when it cannot say. Used while doubling, before any failure."""
        line, cap = self._line(), self._capacity()
        if line is None or cap is None or line[1] <= 0:
            return None
        return math.floor((cap - line[0]) / line[1])

    def _demand_line(self) -> tuple[Observation, float] | None:
        """The failure the demand model extrapolates from and the demand's slope (bytes per batch), or None."""
        lo, cap = self.lo, self._capacity()
        fails = sorted((o for o in self.observations if o.demand_bytes is not None and o.batch_size > lo),
                       key=lambda o: o.batch_size)
        # The smallest failure whose sizes explain it (demand above the usable capacity) is extrapolated from.
        f = next((o for o in fails if self._explained(o)), None)
        if f is None or cap is None:
            return None  # no failure's sizes explain it: nothing to extrapolate from
        demand = float(f.demand_bytes)  # type: ignore[arg-type]
        g = next((o for o in fails if o.batch_size > f.batch_size
                  and o.demand_bytes - demand >= SLOPE_SPREAD_FRACTION * cap), None)  # type: ignore[operator]
        if g is not None:
            slope = (g.demand_bytes - demand) / (g.batch_size - f.batch_size)  # type: ignore[operator]
        else:
            line = self._line()
            fixed = line[0] if line is not None else min(
                (o.used_bytes for o in self.observations if o.fits and o.used_bytes is not None), default=0)
            fixed = min(max(fixed, 0.0), demand)
            slope = (demand - fixed) / f.batch_size
        return (f, slope) if slope > 0 else None

    def predicted_edge(self) -> int | None:
        """The largest batch the out-of-memory demand model says fits, or None (see the module docstring)."""
        model, cap = self._demand_line(), self._capacity()
        if model is None or cap is None:
            return None
        f, slope = model
        # A failure whose sizes do not explain it (allocator rounding at the very edge) still bounds the edge.
        below = min(o.batch_size for o in self.observations if o.demand_bytes is not None and o.batch_size > self.lo)
        return min(math.floor(f.batch_size - (f.need_bytes - cap) / slope), below - 1)  # type: ignore[operator]

    def falsi_edge(self) -> int | None:
        """Regula falsi: the batch where the straight line between the largest fit's and the nearest failure's
        :attr:`Observation.need_bytes` meets the capacity (``lo`` when the fit left no room, at most ``hi - 1``).
        None when an end does not say, when the failure at ``hi`` is not one its sizes explain, or when the fit's
        peak is off the demand model's line.
        """
        lo, cap, model = self.lo, self._capacity(), self._demand_line()
        fit = next((o for o in self.observations if o.fits and o.batch_size == lo), None)
        if cap is None or model is None or fit is None or fit.need_bytes is None:
            return None
        fail, slope = model  # the nearest failure whose sizes explain it
        fail_need = float(fail.need_bytes)  # type: ignore[arg-type]
        if fail.batch_size != self.hi:
            return None  # a failure below it says only that the edge is lower, not where
        on_line = fail_need - slope * (fail.batch_size - lo)
        if abs(fit.need_bytes - on_line) > SAME_CURVE_FRACTION * cap:
            return None  # the fit's peak missed the phase that fails: it is no point on the demand line
        if fit.need_bytes >= cap:
            return lo
        # Illinois: an end kept for a second trial in a row counts half as far from the capacity, and so on, so
        # that a bent curve does not make every step land on the same side.
        room = (cap - fit.need_bytes) * 0.5 ** max(0, -self._streak - 1)
        excess = (fail_need - cap) * 0.5 ** max(0, self._streak - 1)
        return min(lo + math.floor((fail.batch_size - lo) * room / (room + excess)), fail.batch_size - 1)

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
        if self.bounded and hi is not None and self.trials >= trial_bound(lo):
            if hi - lo <= 2:
                return None  # the promised trials are spent and the edge is known to ±1: `exact` says if it was
            if hi - lo <= 4 or self.trials >= trial_bound(lo) + EXTRA_TRIALS:
                # Predictions and gallops have had their chance: halve to ±1 (from a gap of 3 or 4 the midpoint
                # ends it whatever it says, which no guess beats).
                self._mode = "bisect"
        if hi is None:
            return self._propose_up(lo)
        if hi - lo <= 1:
            return None
        return self._propose_between(lo, hi)

    def _propose_up(self, lo: int) -> int | None:
        """No failure yet: double (the memory line may say the edge is nearer), or gallop after a miss."""
        if lo >= self.max_batch:
            return None
        nxt = min(lo * 2, self.max_batch)
        if self._mode == "gallop_up":
            self._pending = ("gallop_up", None)
            return min(lo + self._step, nxt)
        preds = [p for p in (self.predicted_max(), self.straight_edge(checked=not self._secant)) if p is not None]
        pred = min(preds) if preds else None
        if pred is not None and pred < nxt:
            self._pending = ("guided", pred)
            return max(pred, lo + 1)  # pred <= lo: the line says lo is the edge; lo + 1 checks it
        self._pending = ("double", None)
        return nxt

    def _propose_between(self, lo: int, hi: int) -> int:
        """A failure bounds the edge from above: predict it, gallop after a miss, else bisect."""
        if self._mode == "gallop_up" and lo + self._step < hi:
            self._pending = ("gallop_up", None)
            return lo + self._step
        if self._mode == "gallop_down" and hi - self._step > lo:
            self._pending = ("gallop_down", None)
            return hi - self._step
        if self._mode == "falsi":
            pred = self.falsi_edge()
            if pred is not None:
                self._pending = ("falsi", pred)
                return self._below_hi(pred, lo, hi) if pred > lo + 1 else self._past_lo(lo, hi)
        if self._mode in ("double", "guided") and self._misses < MAX_GUIDED_MISSES:
            pred = self.predicted_edge() if self._memory_bound() else None
            if pred is None and self._memory_bound():
                line_pred = self.predicted_max()
                pred = line_pred if line_pred is not None and lo < line_pred < hi else None
            if pred is not None and pred < hi:
                self._pending = ("guided", pred)
                return self._below_hi(pred, lo, hi) if pred > lo else self._past_lo(lo, hi)
        self._pending = ("bisect", None)
        return (lo + hi) // 2  # never tried before: a tried batch between lo and hi would have moved lo or hi

    def _past_lo(self, lo: int, hi: int) -> int:
        """The model says lo is the edge: lo + 1 failing pins it; with one promised trial left, lo + 2 failing is
        enough for the promised ±1 and also holds if the model is one short."""
        last = self.bounded and self.trials + 1 >= trial_bound(lo)
        return min(lo + 2, hi - 1) if last else lo + 1

    def _below_hi(self, pred: int, lo: int, hi: int) -> int:
        """A guess right under the failure: with one promised trial left, ``hi - 2`` fitting gives the promised
        ±1 and holds if the guess is one too high, where ``hi - 1`` failing would leave the edge unpinned."""
        last = self.bounded and self.trials + 1 >= trial_bound(lo)
        return hi - 2 if last and pred == hi - 1 and hi - 2 > lo else pred

    def _first_step(self) -> int:
        """A gallop's first step: 2, or a small share of the batch for large batches (a prediction off by 1 %
        at batch 5000 is 50 batches away)."""
        return max(GALLOP_MIN_STEP, self.lo // GALLOP_FIRST_STEP_DIVISOR)

    def _explained(self, obs: Observation) -> bool:
        """A failure whose sizes say it needed more than the capacity."""
        cap = self._capacity()
        return cap is not None and obs.need_bytes is not None and obs.need_bytes > cap

    def _memory_bound(self) -> bool:
        hi = self.hi
        if hi is None:
            return True
        o = next(o for o in self.observations if o.batch_size == hi and not o.fits)
        return o.status == "oom"

    def observe(self, obs: Observation) -> None:
        """Record a trial and pick how the next one is chosen.

        A fit whose peak lies on the demand line, below a failure its sizes explain, brackets the edge with it: the
        next trial is the regula falsi guess (:meth:`falsi_edge`), and a failure its sizes explain moves the other
        end. Otherwise a prediction the trial contradicts (a fit above the predicted edge, a failure at or below it)
        counts as a miss. A failure is refitted (it is a new demand point) until ``MAX_GUIDED_MISSES``; then, or at
        once when a trial fitted above the prediction, the search gallops away from the guess in steps of 2, 8, 32 …
        and, once a gallop step overshoots, bisects. A prediction that is off by e costs about 2·log2(e) extra trials.
        """
        mode, pred = self._pending
        self._pending = ("double", None)
        self._secant = mode == "guided" and obs.fits
        first_failure = self.hi is None and obs.status in FAIL_STATUSES and obs.batch_size > self.lo
        self.observations.append(obs)
        if obs.status == "skipped":
            self.stop("skipped")
            return
        if first_failure and self.lo > 0:
            # The first failure brings the demand model: whatever the line did while doubling, trust it afresh;
            # unless it has no sizes and came at a line's guess (see below): then the edge lies right under it.
            self._mode, self._misses = "double", 0
            if mode == "guided" and obs.status == "oom" and obs.demand_bytes is None:
                self._mode, self._step = "gallop_down", GALLOP_MIN_STEP
            return
        # A fit above a regula falsi guess (lo + 1 where it named lo) contradicts it: gallop up, do not creep.
        falsi_missed = mode == "falsi" and obs.fits and obs.batch_size > (pred or 0)
        if obs.fits and not falsi_missed and self.falsi_edge() is not None:
            # Its own peak and the nearest failure's demand bracket the edge: interpolate instead of galloping.
            self._streak = self._streak + 1 if mode == "falsi" and self._streak > 0 else 1
            self._mode = "falsi"
            return
        if mode == "falsi" and not obs.fits and self._explained(obs):
            self._streak = self._streak - 1 if self._streak < 0 else -1
            return
        if mode in ("guided", "falsi") and pred is not None:
            contradicted = (obs.fits and obs.batch_size > pred) or (not obs.fits and obs.batch_size <= pred)
            if not contradicted:
                return
            self._misses += 1
            if obs.fits:
                self._mode, self._step = "gallop_up", self._first_step()
            elif self._misses >= MAX_GUIDED_MISSES:
                self._mode, self._step = "gallop_down", self._first_step()
            elif obs.demand_bytes is None and obs.status == "oom" and self.hi == obs.batch_size:
                # A guess failing without sizes (cuBLAS could not allocate its handle or workspace) failed at the
                # very edge: no model gets nearer, so gallop down from it in steps of 2, 8, 32 …
                self._mode, self._step = "gallop_down", GALLOP_MIN_STEP
            else:
                self._mode = "double"  # refit the demand model with the new failure
        elif mode in ("gallop_up", "gallop_down"):
            if obs.fits == (mode == "gallop_up"):
                self._step *= GALLOP_GROWTH
            elif obs.demand_bytes is not None and self._misses < MAX_GUIDED_MISSES:
                self._mode = "guided"  # a new failure nearer the edge: its demand predicts it better than halving
            else:
                self._mode = "bisect"
