"""Finding iteration boundaries in an unmodified script.

Three sources, strongest first:

* ``explicit`` — the script calls ``dnnprof.step()`` at the end of each iteration;
* ``marker`` — ``--step-marker NAME``: the end of every ``record_function(NAME)`` or NVTX range ``NAME``;
* ``optimizer`` — a global optimizer step post-hook. With several optimizers (a GAN steps D then G), the boundary
  is the optimizer that steps last in the cycle: the one seen just before the first optimizer steps again;
* ``dataloader`` — in a process that has built no optimizer (an inference or evaluation script), every batch the
  main process takes from a DataLoader of its first dataset starts an iteration. A training script builds an
  optimizer, and its iterations are optimizer steps (with gradient accumulation, several batches make one).

Every hook checks the process id: forked DataLoader workers inherit the hooks but never report boundaries.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: Source ranks: a stronger source seen before the profiled window starts replaces a weaker one.
PRIORITY = {"dataloader": 0, "optimizer": 1, "marker": 2, "explicit": 3}


class OptimizerSteps:
    """Global optimizer post-hook that reports one boundary per optimizer cycle."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.pid = os.getpid()
        self.optimizers: dict[int, weakref.ref[Any]] = {}
        self.boundary_id: int | None = None
        self._last: int | None = None
        self._handle: Any = None

    def hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() != self.pid:
            return
        oid = id(optimizer)
        if oid not in self.optimizers:
            self.optimizers[oid] = weakref.ref(optimizer)
            self._last = oid
            return
        if self.boundary_id is None:
            self.boundary_id = self._last  # the first repeat closes the cycle; its last member ends an iteration
            if self.boundary_id == oid:
                self.emit("optimizer")
            self._last = oid
            return
        self._last = oid
        if oid == self.boundary_id:
            self.emit("optimizer")

    def install(self, torch: Any) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook  # torch.optim hides the submodule

        self._handle = register_optimizer_step_post_hook(self.hook)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def live(self) -> list[Any]:
        return [o for o in (r() for r in self.optimizers.values()) if o is not None]


class MarkerSteps:
    """Reports a boundary at the end of every ``record_function``/NVTX range with a given name."""

    def __init__(self, name: str, emit: Callable[[str], None]) -> None:
        self.name = name
        self.emit = emit
        self.pid = os.getpid()
        self._local = threading.local()
        self._undo: list[tuple[Any, str, Any]] = []
        self._ids: dict[int, str] = {}

    def _hit(self, name: Any) -> None:
        if name == self.name and os.getpid() == self.pid:
            self.emit("marker")

    def _patch(self, owner: Any, attr: str, new: Any) -> None:
        self._undo.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, new)

    def install(self, torch: Any) -> None:
        rf_cls = torch.autograd.profiler.record_function
        orig_exit = rf_cls.__exit__
        hit = self._hit

        def rf_exit(rf: Any, *exc: Any) -> Any:
            out = orig_exit(rf, *exc)
            hit(getattr(rf, "name", None))
            return out

        self._patch(rf_cls, "__exit__", rf_exit)
        nvtx = getattr(getattr(torch, "cuda", None), "nvtx", None)
        if nvtx is None:
            return
        local, ids = self._local, self._ids
        push, pop, start, end = nvtx.range_push, nvtx.range_pop, nvtx.range_start, nvtx.range_end

        def range_push(msg: Any) -> Any:
            stack = getattr(local, "stack", None)
            if stack is None:
                stack = local.stack = []
            stack.append(msg)
            return push(msg)

        def range_pop() -> Any:
            stack = getattr(local, "stack", None)
            out = pop()
            if stack:
                hit(stack.pop())
            return out

        def range_start(msg: Any) -> Any:
            rid = start(msg)
            ids[int(rid)] = msg
            return rid

        def range_end(rid: Any) -> Any:
            out = end(rid)
            hit(ids.pop(int(rid), None))
            return out

        for attr, fn in (("range_push", range_push), ("range_pop", range_pop), ("range_start", range_start),
                         ("range_end", range_end)):
            self._patch(nvtx, attr, fn)

    def remove(self) -> None:
        while self._undo:
            owner, attr, old = self._undo.pop()
            setattr(owner, attr, old)


def batch_items(batch: Any, depth: int = 0) -> int | None:
    """Samples in a DataLoader batch: the leading dimension of its first tensor (None when there is none)."""
    if hasattr(batch, "shape") and hasattr(batch, "dim"):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth > 3:
        return None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = batch_items(item, depth + 1)
            if n is not None:
                return n
    return None


class DataLoaderSteps:
    """Reports a boundary before every batch but the first that the main process takes from a DataLoader over its
    first dataset, as long as no optimizer has been built in the process (see the module docstring)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.pid = os.getpid()
        self.optimizer_built = False
        self.dataset_id: int | None = None
        self._undo: tuple[Any, Any] | None = None

    def before_batch(self, iterator: Any) -> None:
        """Called by :class:`DataLoaderItems` before each batch is fetched."""
        if self.optimizer_built or os.getpid() != self.pid:
            return
        key = id(getattr(iterator, "_dataset", iterator))
        if self.dataset_id is None:
            self.dataset_id = key  # the first batch of the run starts iteration 0: nothing ends here
            return
        if key != self.dataset_id:
            return
        try:
            if iterator._num_yielded >= len(iterator):
                return  # this call ends the epoch (StopIteration); the next epoch's first batch ends the iteration
        except (AttributeError, TypeError):  # no length (an IterableDataset): every call counts
            pass
        self.emit("dataloader")

    def install(self, torch: Any) -> None:
        cls = torch.optim.Optimizer
        original = cls.__init__
        steps = self

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            steps.optimizer_built = True
            original(opt, *args, **kwargs)

        cls.__init__ = __init__
        self._undo = (cls, original)

    def remove(self) -> None:
        if self._undo is not None:
            cls, original = self._undo
            cls.__init__ = original
            self._undo = None


class DataLoaderItems:
    """Counts the samples the main process takes from DataLoaders, for items/s when the script gives none.
    ``before`` is called with the iterator before each batch is fetched (:class:`DataLoaderSteps`)."""

    def __init__(self, before: Callable[[Any], None] | None = None) -> None:
        self.pid = os.getpid()
        self.count = 0
        self.batches = 0
        self.before = before
        self._undo: tuple[Any, Any] | None = None

    def install(self, torch: Any) -> None:
        cls = torch.utils.data.dataloader._BaseDataLoaderIter
        original = cls.__next__
        counter = self

        def __next__(it: Any) -> Any:
            if counter.before is not None:
                counter.before(it)
            batch = original(it)
            if os.getpid() == counter.pid:
                n = batch_items(batch)
                if n is not None:
                    counter.count += n
                    counter.batches += 1
            return batch

        cls.__next__ = __next__
        self._undo = (cls, original)

    def take(self) -> int | None:
        """Samples since the last call (None when no batch was seen)."""
        if not self.batches:
            return None
        n, self.count, self.batches = self.count, 0, 0
        return n

    def remove(self) -> None:
        if self._undo is not None:
            cls, original = self._undo
            cls.__next__ = original
            self._undo = None
