"""The public Python API: :func:`profile` (capture, as ``dnnprof run``), :func:`load` (read anything ``dnnprof
analyze`` reads, as pandas tables and the summary document). Also reachable as ``dnnprof.profile`` and
``dnnprof.load``. See docs/api.md."""

from __future__ import annotations

from dnnprof.api.loaded import Profile, load
from dnnprof.api.session import ProfileSession, profile

__all__ = ["Profile", "ProfileSession", "load", "profile"]
