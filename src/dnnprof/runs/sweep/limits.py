"""``--memory-limit`` from the sweep's side: the machine's memory and the address-space limit of a trial.

The limit is set between fork and exec (``preexec_fn``), so it binds the trial and its children, never the sweep.
What runs inside the trial (the GPU cap, the peaks it reports) is ``collect/limits.py``.
"""

from __future__ import annotations

import os
import resource
from typing import Any


def host_total_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def address_space_limiter(limit_bytes: int) -> Any:
    """A ``preexec_fn`` that sets ``RLIMIT_AS`` (soft and hard) to ``limit_bytes`` in the child."""

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return preexec
