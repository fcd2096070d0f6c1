"""Device properties as a profile records them (Kineto ``deviceProperties``, NVML, or the CUDA runtime)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

#: ``DeviceInfo.vendor`` values and how a report names their devices.
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "meta": "Meta MTIA"}


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU. Fields mirror ``cudaDeviceProp``; -1 (or "") when the source did not say."""

    id: int
    name: str = ""
    compute_major: int = -1
    compute_minor: int = -1
    sm_count: int = -1
    memory_bytes: int = -1
    max_threads_per_block: int = -1
    max_threads_per_sm: int = -1
    regs_per_block: int = -1
    regs_per_sm: int = -1
    warp_size: int = 32
    shared_memory_per_block_bytes: int = -1
    shared_memory_per_block_optin_bytes: int = -1
    shared_memory_per_sm_bytes: int = -1
    rank: int = 0
    #: Who made it: "nvidia", "amd", "meta" (MTIA) or "" when the source did not say (see :data:`VENDOR_NAMES`).
    vendor: str = ""

    @property
    def compute_capability(self) -> str:
        """"9.0"-style string, or "" when unknown."""
        if self.compute_major < 0:
            return ""
        return f"{self.compute_major}.{self.compute_minor}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceInfo:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
