"""The roofline of a set of kernels: achieved FLOP/s against arithmetic intensity, under the device's ceilings.

One point per kernel name, aggregated as the per-kernel tables aggregate launches (:func:`bounds.aggregate_bounds`):
FLOPs and DRAM bytes are summed over the counted launches, time is the launches' GPU time (the trace's durations
for a profile, ncu's ``gpu__time_duration.sum`` for an ncu file on its own), so

* arithmetic intensity = Σ FLOPs / Σ DRAM bytes (FLOP/byte, DRAM level — ncu's roofline x-axis),
* achieved FLOP/s = Σ FLOPs / Σ time,
* dominant precision = the FLOP precision (``fp32``, ``tensor_bf16`` …) with most of the kernel's FLOPs,
* roof = min(peak FLOP/s of that precision, intensity × DRAM bytes/s); ``pct_of_roof`` = achieved / roof,
* ``limiting_roof`` = ``dram`` left of the precision's ridge point, ``compute`` right of it.

Kernels without FLOPs (copies, gathers, integer work), without DRAM bytes (everything served from L2) or without
time have no place on log-log axes: they are listed with a null intensity and an ``excluded`` reason, and counted,
never dropped. Ceilings come from :func:`bounds.device_ceilings` (ncu's own peaks, completed from the spec table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnprof.analysis import bounds as B
from dnnprof.analysis.counters_join import counter_metrics
from dnnprof.analysis.kernel_names import short_name
from dnnprof.model.gpu_specs import GpuSpec
from dnnprof.model.profile import Profile

#: Why a kernel is not on the chart, in the order they are checked.
EXCLUSION_REASONS = ("no_flops", "no_dram_bytes", "no_time")
#: Where a point's GPU time comes from.
TIME_SOURCES = ("trace", "ncu")


@dataclass
class RooflineKernel:
    """One kernel name on the roofline (sums over its counted launches; NaN where unknown)."""

    name: str
    launches: int
    duration_ns: float
    time_pct: float  # share of the reference GPU time (see :attr:`Roofline.total_ns`)
    flops: float
    dram_bytes: float
    arithmetic_intensity: float  # NaN when excluded
    flops_per_s: float
    precision: str  # dominant FLOP precision, "" when none
    roof_flops_per_s: float
    pct_of_roof: float
    limiting_roof: str  # "dram", "compute" or "" (no ceiling for its precision, or excluded)
    bound: str  # SOL bound class of the time-weighted throughputs, "" when unknown
    excluded: str = ""  # one of EXCLUSION_REASONS, "" when plotted

    @property
    def plotted(self) -> bool:
        return not self.excluded


@dataclass
class Roofline:
    """Ceilings plus one point per kernel name, longest first."""

    ceilings: B.Ceilings
    kernels: list[RooflineKernel]
    time_source: str  # one of TIME_SOURCES
    total_ns: float  # the GPU time ``time_pct`` is a share of
    device: str = ""
    counted_ns: float = 0.0  # GPU time of the kernels with counters (≤ total_ns)
    excluded: dict[str, int] = field(default_factory=dict)
    throughput_source: dict[str, str] = field(default_factory=dict)  # KernelBounds.throughput_source

    @property
    def plotted(self) -> list[RooflineKernel]:
        return [k for k in self.kernels if k.plotted]

    def precision_kernels(self) -> dict[str, int]:
        """Plotted kernels per dominant precision."""
        out: dict[str, int] = {}
        for k in self.plotted:
            if k.precision:
                out[k.precision] = out.get(k.precision, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``roofline`` object of the summary and counters JSON (see docs/summary-json.md)."""
        c, used = self.ceilings, self.precision_kernels()
        compute = {p: {"peak_flops_per_s": _sig(c.peak_flops_per_s[p]), "source": c.source.get(p, ""),
                       "ridge_flops_per_byte": _sig(c.ridge_point(p)), "kernels": used.get(p, 0)}
                   for p in B.FLOP_PRECISIONS if p in c.peak_flops_per_s}
        return {
            "device": self.device,
            "time_source": self.time_source,
            "counted_gpu_time_pct": _round(100.0 * self.counted_ns / self.total_ns, 2) if self.total_ns else None,
            "throughput_source": dict(self.throughput_source),
            "ceilings": {"dram_bytes_per_s": _sig(c.dram_bytes_per_s), "dram_source": c.source.get("dram"),
                         "compute": compute},
            "plotted": len(self.plotted),
            "excluded": {r: self.excluded.get(r, 0) for r in EXCLUSION_REASONS},
            "kernels": [_kernel_dict(k) for k in self.kernels],
        }


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def _sig(x: float | None, digits: int = 5) -> float | None:
    """``x`` to ``digits`` significant digits (FLOP/s span 1e6..1e15), None for unknown."""
    return None if x is None or not math.isfinite(x) else float(f"{x:.{digits}g}")


def _kernel_dict(k: RooflineKernel) -> dict[str, Any]:
    return {
        "name": k.name, "short_name": short_name(k.name), "launches": k.launches,
        "total_us": _round(k.duration_ns / 1000.0, 3), "time_pct": _round(k.time_pct, 3),
        "flops": _sig(k.flops, 6), "dram_bytes": _sig(k.dram_bytes, 6),
        "arithmetic_intensity": _sig(k.arithmetic_intensity, 4),
        "achieved_flops_per_s": _sig(k.flops_per_s), "dominant_precision": k.precision or None,
        "roof_flops_per_s": _sig(k.roof_flops_per_s), "pct_of_roof": _round(k.pct_of_roof, 2),
        "limiting_roof": k.limiting_roof or None, "bound": k.bound or None, "plotted": k.plotted,
        "excluded": k.excluded or None,
    }


def kernel_roofline(bounds: B.KernelBounds, names: Sequence[str] | np.ndarray, ceilings: B.Ceilings, *,
                    weights_ns: np.ndarray | None = None, total_ns: float | None = None, time_source: str = "ncu",
                    device: str = "") -> Roofline:
    """Aggregate launches by kernel name and place each name on the roofline (see the module docstring).

    Args:
        bounds: per-launch numbers (:func:`bounds.compute_bounds`).
        names: the kernel name of each launch.
        ceilings: the device's ceilings (:func:`bounds.device_ceilings`).
        weights_ns: each launch's GPU time (default: ncu's duration).
        total_ns: the GPU time ``time_pct`` is a share of (default: the launches' own total).
        time_source: ``trace`` or ``ncu``, recorded in the result.
        device: the GPU's name, recorded in the result.
    """
    if time_source not in TIME_SOURCES:
        raise ValueError(f"time_source {time_source!r}: expected one of {', '.join(TIME_SOURCES)}")
    groups = B.aggregate_bounds(bounds, names, weights_ns=weights_ns)
    counted = float(sum(g.duration_ns for g in groups))
    total = counted if total_ns is None else float(total_ns)
    bw = ceilings.dram_bytes_per_s or math.nan
    kernels: list[RooflineKernel] = []
    excluded: dict[str, int] = {}
    for g in groups:
        reason = ("no_flops" if not g.flops > 0 else "no_dram_bytes" if not g.dram_bytes > 0
                  else "no_time" if not g.duration_ns > 0 else "")
        prec = g.dominant_precision
        ai = g.arithmetic_intensity if not reason else math.nan
        peak = ceilings.peak_flops_per_s.get(prec, math.nan) if prec else math.nan
        roof = min(peak, ai * bw) if math.isfinite(peak) and math.isfinite(ai * bw) else math.nan
        limiting = "" if not math.isfinite(roof) else "dram" if ai * bw < peak else "compute"
        if reason:
            excluded[reason] = excluded.get(reason, 0) + 1
        kernels.append(RooflineKernel(
            name=g.key, launches=g.launches, duration_ns=g.duration_ns,
            time_pct=100.0 * g.duration_ns / total if total > 0 else math.nan, flops=g.flops,
            dram_bytes=g.dram_bytes, arithmetic_intensity=ai, flops_per_s=g.flops_per_s, precision=prec,
            roof_flops_per_s=roof, pct_of_roof=100.0 * g.flops_per_s / roof if roof > 0 else math.nan,
            limiting_roof=limiting, bound=g.bound, excluded=reason))
    return Roofline(ceilings, kernels, time_source, total, device=device, counted_ns=counted, excluded=excluded,
                    throughput_source=dict(bounds.throughput_source))


def metrics_roofline(metrics: Mapping[str, np.ndarray], names: Sequence[str] | np.ndarray,
                     spec: GpuSpec | None = None, device: str = "") -> Roofline:
    """The roofline of ncu launches on their own (``dnnprof analyze ncu.csv``): ncu's durations, ceilings from
    its peak metrics completed from ``spec``."""
    return kernel_roofline(B.compute_bounds(metrics), names, B.device_ceilings(metrics, spec), time_source="ncu",
                           device=device)


def profile_roofline(profile: Profile, rank: int = 0, spec: GpuSpec | None = None) -> Roofline | None:
    """The roofline of a profile's kernels that have Nsight Compute counters (None when none of ``rank`` has).

    Time is the trace's: each launch weighs its own duration and ``time_pct`` is a share of the rank's kernel time
    in the steps that have counted launches (a counters pass covers one step), so it reads like the summary's
    ``pct`` restricted to that step."""
    rows, metrics = counter_metrics(profile)
    k = profile.tables["kernels"]
    mine = k["rank"][rows] == rank if len(rows) else np.zeros(0, dtype=bool)
    if not mine.any():
        return None
    rows = rows[mine]
    metrics = {m: v[mine] for m, v in metrics.items()}
    steps = np.unique(k["step"][rows])
    total = float(k["dur_ns"][(k["rank"] == rank) & np.isin(k["step"], steps)].sum())
    dev = profile.device(int(k["device"][rows[0]]), rank) or (profile.devices[0] if profile.devices else None)
    return kernel_roofline(B.compute_bounds(metrics), profile.names(k["name_id"][rows]),
                           B.device_ceilings(metrics, spec), weights_ns=k["dur_ns"][rows].astype(np.float64),
                           total_ns=total, time_source="trace", device=dev.name if dev else "")
