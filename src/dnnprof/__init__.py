"""dnnprof: why is my deep-learning job slow on an NVIDIA GPU, and what should I change."""

from __future__ import annotations

from collections.abc import Callable

__version__ = "0.1.0"

#: Set by the collector of ``dnnprof run``/``dnnprof profile`` in the profiled process; None everywhere else.
_step_hook: Callable[[float | None], None] | None = None


def step(items: float | None = None) -> None:
    """Mark the end of one training or inference iteration (a no-op unless running under ``dnnprof run``).

    Call it once per iteration when dnnprof cannot find iterations by itself (no ``optimizer.step()``, e.g. an
    inference loop). ``items``: samples (or tokens…) processed in the iteration, for the throughput figure.
    """
    hook = _step_hook
    if hook is not None:
        hook(items)
