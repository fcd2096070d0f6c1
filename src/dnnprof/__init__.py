"""dnnprof: why is my deep-learning job slow on an NVIDIA GPU, and what should I change."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dnnprof.api.loaded import Profile, load
    from dnnprof.api.session import ProfileSession, profile

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


#: The public Python API, imported on first use so that ``import dnnprof`` stays cheap (the profiled process of
#: ``dnnprof run`` imports it before the script starts).
_API = {"profile": "dnnprof.api.session", "ProfileSession": "dnnprof.api.session", "load": "dnnprof.api.loaded",
        "Profile": "dnnprof.api.loaded"}

__all__ = ["Profile", "ProfileSession", "__version__", "load", "profile", "step"]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dnnprof' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
