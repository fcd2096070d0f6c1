"""dnnprof.workloads: the built-in benchmark suite (TBD's models plus GPT-2), each a model, a real DataLoader
and a ``step()``.

Listing needs no torch::

    from dnnprof.workloads import registry_rows, knob_rows
    rows = registry_rows()

Running one::

    from dnnprof.workloads import build
    with build("gpt2", batch_size=8, precision="amp-bf16", mode="train", device="cuda") as wl:
        for _ in range(10):
            wl.step()
        wl.synchronize()
        print(wl.items_processed, wl.spec.unit, wl.memory_breakdown())
"""

from __future__ import annotations

from dnnprof.workloads.api import build
from dnnprof.workloads.config import WorkloadConfig, knob_rows
from dnnprof.workloads.errors import (
    DataError,
    InvalidConfig,
    MissingDependency,
    UnknownWorkload,
    UnsupportedConfig,
    WorkloadError,
)
from dnnprof.workloads.registry import (
    DEVICES,
    INSTALL_HINT,
    MODES,
    PRECISIONS,
    UNITS,
    WORKLOADS,
    WorkloadSpec,
    get_spec,
    list_workloads,
    missing_packages,
    registry_rows,
    workload_names,
)

__all__ = [
    "DEVICES",
    "INSTALL_HINT",
    "MODES",
    "PRECISIONS",
    "UNITS",
    "WORKLOADS",
    "DataError",
    "InvalidConfig",
    "MissingDependency",
    "UnknownWorkload",
    "UnsupportedConfig",
    "WorkloadConfig",
    "WorkloadError",
    "WorkloadSpec",
    "build",
    "get_spec",
    "knob_rows",
    "list_workloads",
    "missing_packages",
    "registry_rows",
    "workload_names",
]
