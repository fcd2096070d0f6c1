"""``build()``: a workload from its name and knobs. Imports torch and the workload's module only when called."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dnnprof.workloads.config import WorkloadConfig
from dnnprof.workloads.deps import require
from dnnprof.workloads.registry import get_spec

if TYPE_CHECKING:
    from dnnprof.workloads.base import Workload


def build(name: str, config: WorkloadConfig | Mapping[str, Any] | None = None, **knobs: Any) -> Workload:
    """Build workload ``name``: model on its device, DataLoader, optimizer; ready for ``step()``.

    Args:
        name: a registered name (``workload_names()``).
        config: a ``WorkloadConfig`` or a mapping of knobs; ``None`` for defaults.
        **knobs: knobs that override ``config`` (``batch_size=16, precision="amp-bf16"``).

    Raises:
        UnknownWorkload: ``name`` is not registered (the message lists valid names).
        InvalidConfig: an unknown knob or a value outside its choices (the message lists valid ones).
        UnsupportedConfig: the device cannot run this precision, or CUDA is missing.
        MissingDependency: torch or an optional package the workload needs is missing or broken.
        DataError: ``data_dir`` holds no usable files.
    """
    spec = get_spec(name)
    if config is None:
        config = WorkloadConfig()
    elif not isinstance(config, WorkloadConfig):
        config = WorkloadConfig.from_dict(config)
    resolved = config.with_knobs(knobs).resolve(spec)
    require("torch", purpose="dnnprof workloads")
    for module in spec.requires:
        require(module, purpose=f"workload {spec.name!r}")
    module_name, class_name = spec.builder.split(":")
    cls = getattr(importlib.import_module(f"dnnprof.workloads.{module_name}"), class_name)
    return cls(spec, resolved)
