"""The per-kernel table of an Nsight Compute file on its own: launches grouped by kernel name, time-weighted,
longest first, with each group's bound class, and the roofline of the file's device (``dnnprof.counters/1``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.analysis.bounds import aggregate_bounds, compute_bounds
from dnnprof.analysis.kernel_names import family, short_name, uses_tensor_cores
from dnnprof.analysis.roofline import metrics_roofline
from dnnprof.model.gpu_specs import lookup_gpu

SCHEMA = "dnnprof.counters/1"


def ncu_document(table: Any, path: Path) -> dict[str, Any]:
    """The ``dnnprof.counters/1`` document of an ncu table (``ingest.ncu_csv.read_ncu``) read from ``path``."""
    b = compute_bounds(table.metrics)
    names = np.asarray([str(n) for n in table.kernel_name], dtype=object)
    total = float(np.nansum(b.duration_ns)) or 1.0
    kernels = []
    for g in aggregate_bounds(b, names):
        kernels.append({
            "name": g.key, "short_name": short_name(g.key), "family": family(g.key),
            "tensor_core": uses_tensor_cores(g.key), "launches": g.launches,
            "total_us": round(g.duration_ns / 1000.0, 3), "pct": round(100.0 * g.duration_ns / total, 3),
            "sm_throughput_pct": _r(g.sm_throughput_pct), "memory_throughput_pct": _r(g.memory_throughput_pct),
            "achieved_occupancy_pct": _r(g.achieved_occupancy_pct), "waves_per_sm": _r(g.waves_per_sm),
            "dram_bytes": _r(g.dram_bytes / g.launches, 0) if g.launches else None,
            "flops": _r(g.flops / g.launches, 0) if g.launches else None,
            "arithmetic_intensity": _r(g.arithmetic_intensity, 3),
            "achieved_flops_per_s": _r(g.flops_per_s, 0), "bound": g.bound or None,
        })
    bounds: dict[str, float] = {}
    for k in kernels:
        key = k["bound"] or "unclassified"
        bounds[key] = bounds.get(key, 0.0) + k["pct"]
    return {"schema": SCHEMA, "source": {"path": str(path), "format": "ncu"}, "launches": len(table),
            "kernels": kernels, "bound_share_pct": {k: round(v, 2) for k, v in sorted(bounds.items())},
            "throughput_source": b.throughput_source,
            "roofline": _roofline(table.metrics, names, _device_name(table.text))}


def _device_name(text: dict[str, np.ndarray]) -> str:
    """The GPU ncu profiled on (``device__attribute_display_name``), "" when the file does not say."""
    col = text.get("device__attribute_display_name")
    names = sorted({str(x) for x in col if str(x).strip()}) if col is not None else []
    return names[0] if len(names) == 1 else ""


def _roofline(metrics: dict[str, np.ndarray], names: np.ndarray, device: str) -> dict[str, Any]:
    return metrics_roofline(metrics, names, lookup_gpu(device) if device else None, device).to_dict()


def _r(x: float, digits: int = 2) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)
