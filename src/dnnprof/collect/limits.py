"""``--memory-limit`` inside a trial process, and the memory peaks a trial reports.

* GPU: ``torch.cuda.set_per_process_memory_fraction`` — the caching allocator refuses to hold more than the limit
  and raises ``torch.OutOfMemoryError``, just as a smaller GPU would.
* CPU: ``RLIMIT_AS`` (set by the sweep between fork and exec, see ``runs/sweep/limits.py``, or by the trial hooks
  where torch is imported). Allocations past the limit fail: PyTorch raises ``DefaultCPUAllocator: can't allocate
  memory``, Python ``MemoryError``, C++ ``std::bad_alloc``. The limit is on address space (``VmPeak``), not
  resident memory, so the sweep compares it with ``VmPeak``; importing torch alone maps ~0.6–1 GiB.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemoryLimit:
    """``--memory-limit``: an absolute size or a share of the device's memory.

    Attributes:
        text: what the user wrote (``16GiB``, ``50%``).
        bytes: the size, or None for a share.
        fraction: the share of the device's (GPU) or machine's (CPU) memory, or None for a size.
    """

    text: str
    bytes: int | None = None
    fraction: float | None = None

    def resolve(self, total_bytes: int) -> int:
        """The limit in bytes on a device with ``total_bytes`` of memory."""
        if self.bytes is not None:
            return self.bytes
        return int((self.fraction or 1.0) * total_bytes)

    def to_env(self) -> str:
        """Compact form passed to trial processes (``bytes:N`` or ``fraction:F``)."""
        return f"bytes:{self.bytes}" if self.bytes is not None else f"fraction:{self.fraction}"

    @classmethod
    def from_env(cls, value: str) -> MemoryLimit:
        kind, _, num = value.partition(":")
        if kind == "bytes":
            return cls(value, bytes=int(num))
        return cls(value, fraction=float(num))


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
