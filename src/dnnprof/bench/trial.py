"""One benchmark trial: a backend at a batch size, checked against a reference, warmed up, timed.

Each timed iteration does what trtexec does for one query, and no more than a hand-written loop would: copy the
inputs host → device, run, copy the outputs device → host, wait. On a GPU two CUDA events around the query give its
latency; the split into H2D, compute and D2H (two more events) and the host time spent inside the backend's call
(the enqueue time) are measured in separate iterations after the timed ones, so that timing the phases adds
nothing to the latency reported. On a CPU there is nothing to copy: the call's wall time is the compute.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dnnprof.bench.backends import BackendError, Runner, flatten, prepare
from dnnprof.bench.compare import compare, tolerance
from dnnprof.bench.sources import Source

#: A ``--duration`` run still times at least this many iterations.
MIN_DURATION_ITERATIONS = 5
#: Why a per-phase time is absent on a CPU run.
CPU_NULL_REASON = "the model runs on the CPU: no host-device copies or separate enqueue to time"

SYNC_NULL_REASON = "the backend's call returns only when the GPU is done: its host time is no enqueue time"
#: At most this many extra iterations (after the timed ones, never more than them) split a GPU query into H2D,
#: compute and D2H and time the host's enqueue.
MAX_PHASE_ITERATIONS = 50


@dataclass(frozen=True)
class Settings:
    """How long to measure: ``warmup`` untimed iterations, then ``iterations`` or ``duration_s`` of timed ones."""

    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None


@dataclass
class Trial:
    """What one trial measured (raw samples in milliseconds, one per timed iteration)."""

    backend: str
    batch_size: int
    status: str = "ok"
    reason: str = ""
    latency_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    h2d_ms: list[float] | None = None
    d2h_ms: list[float] | None = None
    enqueue_ms: list[float] | None = None
    #: First to last event of each phase iteration (what its H2D + compute + D2H add up to).
    phase_latency_ms: list[float] | None = None
    wall_s: float = 0.0
    max_rel_error: float | None = None
    tolerance: float | None = None
    note: str = ""
    null_reasons: dict[str, str] = field(default_factory=dict)


def host_outputs(outputs: list[Any]) -> list[Any]:
    """The outputs as float64 numpy arrays (for comparison)."""
    import numpy as np

    arrays = []
    for o in outputs:
        if hasattr(o, "detach"):
            o = o.detach().float().cpu().numpy() if o.is_floating_point() else o.detach().cpu().numpy()
        arrays.append(np.asarray(o, dtype=np.float64))
    return arrays


def reference_outputs(source: Source, batch_size: int) -> list[Any]:
    """The eager PyTorch outputs at ``batch_size`` (what every backend is checked against)."""
    import torch

    inputs = tuple(t.to(source.device) for t in source.inputs(batch_size))
    with torch.inference_mode(), source.autocast():
        return host_outputs(flatten(source.model(*inputs)))


def run_trial(source: Source, backend: str, batch_size: int, settings: Settings, onnx: Any,
              reference: list[Any] | None, progress: Callable[[float], None] = lambda f: None) -> tuple[Trial, Any]:
    """Prepare, check, warm up and time ``backend`` at ``batch_size``; returns the trial and its outputs."""
    trial = Trial(backend=backend, batch_size=batch_size)
    host = tuple(source.inputs(batch_size))
    cuda = source.device == "cuda"
    if cuda:
        host = tuple(t.pin_memory() for t in host)
        buffers = tuple(t.to(source.device) for t in host)
    else:
        buffers = host
    runner: Runner | None = None
    try:
        runner = prepare(backend, source, buffers, batch_size, onnx)
        trial.note = runner.note
        # The check comes before the warm-up, so that the warm-up runs right before the timed loop, as in a
        # hand-written loop (the check copies every output to the host and compares it for seconds).
        outputs = host_outputs(runner.run())
        if reference is not None:
            trial.tolerance = tolerance(source.precision)
            ok, err, why = compare(outputs, reference, trial.tolerance)
            trial.max_rel_error = err
            if not ok:
                trial.status, trial.reason = "wrong", why
        with torch_contexts(source):
            _time(trial, runner, host, buffers, settings, cuda, progress)
        return trial, outputs
    except BackendError as e:
        trial.status, trial.reason = "error", str(e)
        return trial, None
    except Exception as e:  # noqa: BLE001 - a backend failing mid-run is reported, the other trials go on
        trial.status, trial.reason = "error", f"{backend}: {type(e).__name__}: {str(e).strip()[:300]}"
        return trial, None
    finally:
        if runner is not None:
            runner.close()
        del buffers
        if cuda:
            import torch

            torch.cuda.empty_cache()


@contextlib.contextmanager
def torch_contexts(source: Source) -> Iterator[None]:
    """Around the whole timed loop, once: inference mode, the precision's autocast, and no garbage collection (as
    ``timeit`` does: a collection of the host's many objects would land in one iteration's latency)."""
    import torch

    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        with torch.inference_mode(), source.autocast():
            yield
    finally:
        if was:
            gc.enable()


def _call(runner: Runner) -> tuple[Callable[[], Any], Callable[[Any], list[Any]]]:
    """The runner's call for the timed loop and how to flatten what it returns: the bare call (the loop holds its
    contexts) when it has one, flattened only where the outputs are needed (the D2H copies)."""
    bare = runner.bare
    if bare is None:
        return runner.run, lambda out: out
    return bare, flatten


def _time(trial: Trial, runner: Runner, host: tuple[Any, ...], buffers: tuple[Any, ...], settings: Settings,
          cuda: bool, progress: Callable[[float], None]) -> None:
    """Warm up, then time; the warm-up runs inside the same contexts, right before the timed iterations."""
    target = settings.iterations if settings.duration_s is None else None
    call, flat = _call(runner)
    if not cuda:
        trial.null_reasons = {k: CPU_NULL_REASON for k in ("h2d_ms", "gpu_compute_ms", "d2h_ms", "enqueue_ms",
                                                            "phase_latency_ms")}
        for _ in range(settings.warmup):
            call()
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            call()
            dt = (time.perf_counter() - t0) * 1e3
            trial.latency_ms.append(dt)
            trial.compute_ms.append(dt)
            if _done(trial, target, settings, start, progress):
                break
        trial.wall_s = time.perf_counter() - start
        return
    import torch

    copies = list(zip(buffers, host, strict=False))
    first = flat(_query(call, copies, []))  # the first warm-up query says which outputs are on the device
    on_device = [i for i, o in enumerate(first) if hasattr(o, "is_cuda") and o.is_cuda]
    pinned = [_pinned_like(first[i]) for i in on_device]
    del first
    pick = _picker(flat, on_device)
    for _ in range(settings.warmup - 1):
        _query(call, copies, pinned, pick)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    while True:
        # One query, exactly as a plain loop does it: nothing between the call and the D2H enqueue but finding
        # the outputs, and the only sync is the wait for the query's end.
        begin.record()
        for dst, src in copies:
            dst.copy_(src, non_blocking=True)
        out = call()
        for dst, o in zip(pinned, pick(out), strict=True):
            dst.copy_(o, non_blocking=True)
        end.record()
        end.synchronize()
        trial.latency_ms.append(begin.elapsed_time(end))
        if _done(trial, target, settings, start, progress):
            break
    trial.wall_s = time.perf_counter() - start
    del out
    _phases(trial, runner, call, copies, pinned, pick, min(len(trial.latency_ms), MAX_PHASE_ITERATIONS))


def _pinned_like(t: Any) -> Any:
    """A pinned host buffer for device tensor ``t`` (made once per trial; the D2H copies land in it)."""
    import torch

    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)


def _query(call: Callable[[], Any], copies: list[tuple[Any, Any]], pinned: list[Any],
           pick: Callable[[Any], list[Any]] = lambda out: []) -> Any:
    """An untimed query (warm-up): H2D, call, D2H of the outputs ``pick`` finds into ``pinned``, wait."""
    import torch

    for dst, src in copies:
        dst.copy_(src, non_blocking=True)
    out = call()
    for dst, o in zip(pinned, pick(out), strict=True):
        dst.copy_(o, non_blocking=True)
    torch.cuda.synchronize()
    return out


def _picker(flat: Callable[[Any], list[Any]], on_device: list[int]) -> Callable[[Any], list[Any]]:
    """The outputs to copy to the host, from what the call returned; a lone tensor is taken as it is."""
    if on_device == [0]:
        return lambda out: [out] if hasattr(out, "is_cuda") else [flat(out)[0]]
    return lambda out: [flat(out)[i] for i in on_device]


def _phases(trial: Trial, runner: Runner, call: Callable[[], Any], copies: list[tuple[Any, Any]],
            pinned: list[Any], pick: Callable[[Any], list[Any]], n: int) -> None:
    """``n`` more queries split by four CUDA events into H2D, compute and D2H, with the host time inside the call
    (the enqueue time). Separate from the timed iterations: the events in the middle and the host clock around
    the call would otherwise sit inside every query the latency counts."""
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    trial.h2d_ms, trial.d2h_ms, trial.enqueue_ms, trial.phase_latency_ms = [], [], [], []
    if runner.synchronous:
        trial.null_reasons = {"enqueue_ms": SYNC_NULL_REASON}
    for _ in range(n):
        events[0].record()
        for dst, src in copies:
            dst.copy_(src, non_blocking=True)
        events[1].record()
        t0 = time.perf_counter()
        out = call()
        trial.enqueue_ms.append((time.perf_counter() - t0) * 1e3)
        events[2].record()
        for dst, o in zip(pinned, pick(out), strict=True):
            dst.copy_(o, non_blocking=True)
        events[3].record()
        events[3].synchronize()
        trial.h2d_ms.append(events[0].elapsed_time(events[1]))
        trial.compute_ms.append(events[1].elapsed_time(events[2]))
        trial.d2h_ms.append(events[2].elapsed_time(events[3]))
        trial.phase_latency_ms.append(events[0].elapsed_time(events[3]))
    if runner.synchronous:
        trial.enqueue_ms = None


def _done(trial: Trial, target: int | None, settings: Settings, start: float,
          progress: Callable[[float], None]) -> bool:
    n = len(trial.latency_ms)
    if target is not None:
        progress(n / target)
        return n >= target
    elapsed = time.perf_counter() - start
    progress(min(elapsed / settings.duration_s, 1.0))  # type: ignore[operator]
    return elapsed >= settings.duration_s and n >= MIN_DURATION_ITERATIONS  # type: ignore[operator]
