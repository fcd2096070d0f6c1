"""``--memory-limit`` in a trial process, and the memory peaks a trial reports.

* GPU: ``torch.cuda.set_per_process_memory_fraction`` — the caching allocator refuses to hold more than the limit
  and raises ``torch.OutOfMemoryError``, just as a smaller GPU would.
* CPU: ``RLIMIT_AS`` on the trial process (set between fork and exec, so it binds the trial and its children,
  never the sweep). Allocations past the limit fail: PyTorch raises ``DefaultCPUAllocator: can't allocate
  memory``, Python ``MemoryError``, C++ ``std::bad_alloc``. The limit is on address space (``VmPeak``), not
  resident memory, so the sweep compares it with ``VmPeak``; importing torch alone maps ~0.6–1 GiB.
"""

from __future__ import annotations

import os
import resource
from typing import Any

from dnnprof.runs.sweep.spec import MemoryLimit


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


def apply_cuda_limit(torch: Any, limit: MemoryLimit | None) -> int | None:
    """Cap the caching allocator of the current GPU; return the cap in bytes (None when there is no limit)."""
    if limit is None:
        return None
    dev = torch.cuda.current_device()
    total = int(torch.cuda.get_device_properties(dev).total_memory)
    cap = min(limit.resolve(total), total)
    torch.cuda.set_per_process_memory_fraction(cap / total, dev)
    return cap


def host_memory_peaks() -> dict[str, int]:
    """Peak resident set (``VmHWM``) and peak address space (``VmPeak``) of this process, in bytes."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmPeak", "VmHWM"):
                    kib = int(value.split()[0])
                    out["peak_address_space_bytes" if key == "VmPeak" else "peak_rss_bytes"] = kib * 1024
    except (OSError, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_rss_bytes"] = rss * 1024 if os.uname().sysname == "Linux" else rss
    return out
