"""Nsight Compute results: ``dnnprof analyze ncu.csv`` (an ncu CSV or report on its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.cli.errors import UserError

SCHEMA = "dnnprof.counters/1"


def ncu_summary(path: Path) -> dict[str, Any]:
    """Per-kernel table of an ncu CSV/report: launches grouped by kernel name, time-weighted, longest first."""
    from dnnprof.analysis.bounds import aggregate_bounds, compute_bounds
    from dnnprof.analysis.kernel_names import family, short_name, uses_tensor_cores
    from dnnprof.ingest.ncu_csv import NcuFormatError, read_ncu

    try:
        table = read_ncu(path)
    except NcuFormatError as e:
        raise UserError(str(e)) from None
    if not len(table):
        raise UserError(f"{path}: the Nsight Compute file holds no profiled kernel")
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
            "kernels": kernels, "bound_share_pct": {k: round(v, 2) for k, v in sorted(bounds.items())}}


def _r(x: float, digits: int = 2) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def report_ncu_file(path: Path, json_out: Path | None, top: int, quiet: bool) -> None:
    """Print (and optionally write) the per-kernel counters table of an ncu CSV/report."""
    doc = ncu_summary(path)
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        write_json(doc, json_out)
    if not quiet and str(json_out) != "-":
        from dnnprof.render.counters_table import render_counters

        render_counters(doc, top=top)
