"""Which vendor's accelerator a trace was recorded on: NVIDIA (CUDA), AMD (ROCm/HIP) or Meta (MTIA).

Decided once, here, from what the trace says, strongest evidence first:

1. the device's name in ``deviceProperties`` ("NVIDIA A100…", "Tesla V100…", "AMD Instinct MI300X", "AMD Radeon
   Graphics" — what ROCm calls an MI250's GCD);
2. the host-side runtime: MTIA runtime events, HIP calls (``hipLaunchKernel``: ROCm's Kineto files them as
   ``cuda_runtime``) or CUDA calls (``cudaLaunchKernel``, ``cuLaunchKernel``);
3. kernel names of AMD's libraries (Tensile ``Cijk_…``, MIOpen) when no runtime call was recorded.

Rules and columns built on NVIDIA knowledge (tensor-core instruction names, occupancy tables per compute capability)
ask for this instead of guessing from kernel names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NVIDIA_NAME = re.compile(r"nvidia|tesla|geforce|quadro|titan|\brtx\b|\bgtx\b|jetson|\b[ahlbt]\d{1,3}\b|\bgh200\b|"
                          r"\bgb200\b", re.IGNORECASE)
_AMD_NAME = re.compile(r"\bamd\b|radeon|instinct|\bmi\d{2,3}|gfx\d", re.IGNORECASE)
_MTIA_NAME = re.compile(r"mtia|artemis|freya", re.IGNORECASE)
_AMD_KERNEL = re.compile(r"^Cijk_|^miopen|MIOpen|^naive_conv_|^igemm_|_gfx9\d", re.IGNORECASE)
#: Kineto categories only Meta's MTIA runtime writes.
MTIA_CATEGORIES = frozenset({"mtia_runtime", "mtia_ccp_events", "mtia_insight", "mtia_counters"})


def vendor_of_name(name: str) -> str:
    """``"nvidia"``, ``"amd"``, ``"meta"`` or ``""`` from a device name."""
    if _AMD_NAME.search(name):
        return "amd"
    if _MTIA_NAME.search(name):
        return "meta"
    if _NVIDIA_NAME.search(name):
        return "nvidia"
    return ""


def vendor_of_events(categories: Iterable[str], runtime_names: Iterable[str], kernel_names: Iterable[str]) -> str:
    """The vendor the trace's events show (see the module's order), ``""`` when they show none."""
    if not MTIA_CATEGORIES.isdisjoint(categories):
        return "meta"
    hip = cuda = 0
    for n in runtime_names:
        if n.startswith("hip"):
            hip += 1
        elif n.startswith(("cuda", "cu")):
            cuda += 1
    if hip or cuda:
        return "amd" if hip >= cuda else "nvidia"
    return "amd" if any(_AMD_KERNEL.search(n) for n in kernel_names) else ""
