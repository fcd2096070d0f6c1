"""Speed-of-light numbers per kernel from Nsight Compute counters, the bound class, and the roofline.

Input is a mapping of ncu metric name → float64 column (one row per kernel launch, base units, NaN when
absent) — ``NcuTable.metrics`` or a pivot of a profile's ``counters`` table. What is computed, and from what:

* SM / memory throughput % — ``sm__throughput.avg.pct_of_peak_sustained_elapsed`` and
  ``gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed`` (ncu's "Compute (SM) Throughput" and
  "Memory Throughput" in GPU Speed Of Light); where a capture has only their parts (dnnprof's own, cheaper
  collection: :mod:`dnnprof.model.sol_metrics`), the maximum over the parts present (``throughput_source``).
* DRAM bytes — ``dram__bytes.sum``; else ``dram__bytes_read.sum + dram__bytes_write.sum``; else
  ``dram__bytes.sum.per_second × gpu__time_duration.sum`` (``--set full`` collects only the rate).
* Non-tensor FLOPs per precision from predicated-on SASS thread instructions, weighted as ncu's roofline
  sections weigh them: FP64 = dadd + dmul + 2·dfma, FP32 = fadd + fmul + 2·ffma, FP16 = 2·hadd + 2·hmul + 4·hfma
  (half instructions are packed pairs), from ``smsp__sass_thread_inst_executed_op_<op>_pred_on.sum`` or, when
  only its ``.per_cycle_elapsed`` rate was collected, rate × ``smsp__cycles_elapsed.avg.per_second`` × duration.
* Tensor FLOPs from the tensor-path operation counters ``sm__ops_path_tensor_src_<type>[_dst_<type>…].sum``
  (sm_80+; each counts operations, an FMA being two, so they are FLOPs). ``<type>`` gives the precision:
  fp64 → ``tensor_fp64``, tf32 → ``tensor_tf32``, fp16 → ``tensor_fp16``, bf16 → ``tensor_bf16``, fp8 →
  ``tensor_fp8``; int8/int4/int1 are integer ops (``tensor_int_ops``), kept out of FLOPs. The per-instruction
  breakdowns ``sm__ops_path_tensor_op_*`` are not added (they would count the same work twice). Where only
  ``sm__inst_executed_pipe_tensor*.sum`` exists (older archs), it is reported as ``tensor_inst`` — warp-level
  MMA instructions, whose FLOPs depend on the MMA shape and are therefore not converted.
* Arithmetic intensity = FLOPs / DRAM bytes; achieved FLOP/s = FLOPs / duration.
* Bound class — Nsight Compute's SOLBottleneck rule (sections/SpeedOfLight.py), see :func:`sol_bound`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dnnprof.model.gpu_specs import GpuSpec
from dnnprof.model.sol_metrics import (
    MEMORY_THROUGHPUT,
    MEMORY_THROUGHPUT_PARTS,
    SM_THROUGHPUT,
    SM_THROUGHPUT_PARTS,
)

# SOLBottleneck thresholds, named as in NVIDIA's rule.
NO_BOUND_THRESHOLD_PCT = 80.0  #: either throughput at/above this → "high-throughput"
LATENCY_BOUND_THRESHOLD_PCT = 60.0  #: both below this → "latency" (or "small-grid")
BALANCED_THRESHOLD_PCT = 10.0  #: compute and memory this many points apart → "compute"/"memory"
WAVES_THRESHOLD = 1.0  #: fewer waves per SM than this in a latency-bound kernel → "small-grid"
BOUND_CLASSES = ("latency", "small-grid", "compute", "memory", "balanced", "high-throughput")

M_DURATION = "gpu__time_duration.sum"
M_SM_PCT = SM_THROUGHPUT
M_MEM_PCT = MEMORY_THROUGHPUT
M_DRAM_BYTES = "dram__bytes.sum"
M_DRAM_RATE = "dram__bytes.sum.per_second"
M_ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
M_THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
M_WAVES = "launch__waves_per_multiprocessor"
M_SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
M_SMSP_CLOCK = "smsp__cycles_elapsed.avg.per_second"
M_DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"

#: (precision, SASS op, FLOPs per predicated-on thread instruction), as ncu's roofline sections count them.
SASS_FLOP_WEIGHTS = (
    ("fp64", "dadd", 1), ("fp64", "dmul", 1), ("fp64", "dfma", 2),
    ("fp32", "fadd", 1), ("fp32", "fmul", 1), ("fp32", "ffma", 2),
    ("fp16", "hadd", 2), ("fp16", "hmul", 2), ("fp16", "hfma", 4),
)
SASS_METRIC = "smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
#: Peak thread instructions per cycle (whole GPU) and FLOPs per instruction for the non-tensor ceilings.
SASS_PEAK = {"fp64": ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained", 2),
             "fp32": ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained", 2),
             "fp16": ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained", 4)}
TENSOR_PATH = re.compile(r"^sm__ops_path_tensor_src_([a-z]+[0-9]+)((?:_[a-z0-9]+)*)\.sum$")
#: Dense tensor peaks: the aggregate ``sm__ops_path_tensor_src_<type>.sum.peak_sustained`` is the *sparse* peak on
#: sm_90 (1,081,344 op/cycle for bf16 on an H200 = 2 × the 540,672 of ``…op_hgmma_src_bf16_dst_fp32_sparsity_off``),
#: so ceilings use the ``sparsity_off`` peaks (largest instruction path per type) and FP64's, which has no sparsity.
TENSOR_PEAK = re.compile(r"^sm__ops_path_tensor_(?:op_[a-z]+_)?src_([a-z]+[0-9]+)\w*\.sum\.peak_sustained$")
TENSOR_PRECISIONS = {"fp64": "tensor_fp64", "tf32": "tensor_tf32", "fp16": "tensor_fp16", "bf16": "tensor_bf16",
                     "fp8": "tensor_fp8"}
FLOP_PRECISIONS = ("fp64", "fp32", "fp16", "tensor_fp64", "tensor_tf32", "tensor_fp16", "tensor_bf16",
                   "tensor_fp8")
#: FLOP precision → gpu_specs precision key for spec-sheet ceilings (None: the sheet has no such number).
SPEC_PRECISION = {"fp64": "fp64", "fp32": "fp32", "fp16": None, "tensor_fp64": "fp64_tensor",
                  "tensor_tf32": "tf32", "tensor_fp16": "fp16", "tensor_bf16": "bf16", "tensor_fp8": "fp8"}


def sol_bound(sm_pct: np.ndarray, mem_pct: np.ndarray, waves: np.ndarray | None = None) -> np.ndarray:
    """Nsight Compute's SOLBottleneck verdict per kernel, as a short class name ("" when SM% or Mem% is NaN).

    If SM% and Mem% are both below 80: both below 60 → "small-grid" when waves per SM < 1, else "latency";
    otherwise ≥ 10 points apart → "compute" (SM% higher) or "memory"; else "balanced". Either ≥ 80 →
    "high-throughput". (ncu: Small Grid / Latency Issue / High Compute|Memory Throughput / Balanced Throughput /
    High Throughput.)
    """
    sm = np.asarray(sm_pct, dtype=np.float64)
    mem = np.asarray(mem_pct, dtype=np.float64)
    wv = np.full(sm.shape, np.nan) if waves is None else np.asarray(waves, dtype=np.float64)
    out = np.full(sm.shape, "", dtype=object)
    known = np.isfinite(sm) & np.isfinite(mem)
    high = known & ((sm >= NO_BOUND_THRESHOLD_PCT) | (mem >= NO_BOUND_THRESHOLD_PCT))
    low = known & ~high & (sm < LATENCY_BOUND_THRESHOLD_PCT) & (mem < LATENCY_BOUND_THRESHOLD_PCT)
    small = low & np.isfinite(wv) & (wv < WAVES_THRESHOLD)
    mid = known & ~high & ~low
    apart = mid & (np.abs(sm - mem) >= BALANCED_THRESHOLD_PCT)
    out[high] = "high-throughput"
    out[low] = "latency"
    out[small] = "small-grid"
    out[apart & (sm > mem)] = "compute"
    out[apart & ~(sm > mem)] = "memory"
    out[mid & ~apart] = "balanced"
    return out


@dataclass
class KernelBounds:
    """Per-launch speed-of-light numbers; arrays of one length, NaN where the counters were not collected."""

    duration_ns: np.ndarray
    sm_throughput_pct: np.ndarray
    memory_throughput_pct: np.ndarray
    dram_bytes: np.ndarray
    achieved_occupancy_pct: np.ndarray
    theoretical_occupancy_pct: np.ndarray
    waves_per_sm: np.ndarray
    flops_by_precision: dict[str, np.ndarray]
    tensor_int_ops: np.ndarray
    tensor_inst: np.ndarray
    flops: np.ndarray
    arithmetic_intensity: np.ndarray
    flops_per_s: np.ndarray
    dram_bytes_per_s: np.ndarray
    bound: np.ndarray
    #: where the two throughputs came from: ``ncu`` (its own SOL metrics), ``parts`` (the maximum of their parts),
    #: ``mixed`` or ``none``
    throughput_source: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.duration_ns.shape[0])

    def row(self, i: int) -> dict[str, object]:
        """The summary-JSON fields of launch ``i`` (None for NaN)."""
        def f(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None
        return {
            "achieved_occupancy_pct": f(self.achieved_occupancy_pct[i]),
            "sm_throughput_pct": f(self.sm_throughput_pct[i]),
            "memory_throughput_pct": f(self.memory_throughput_pct[i]),
            "dram_bytes": f(self.dram_bytes[i]),
            "flops": f(self.flops[i]),
            "flops_by_precision": {k: f(v[i]) for k, v in self.flops_by_precision.items() if np.isfinite(v[i])},
            "arithmetic_intensity": f(self.arithmetic_intensity[i]),
            "waves_per_sm": f(self.waves_per_sm[i]),
            "bound": self.bound[i] or None,
        }


def _rows(metrics: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(metrics.values())).shape[0]) if metrics else 0


def _get(metrics: Mapping[str, np.ndarray], name: str, n: int) -> np.ndarray:
    v = metrics.get(name)
    return np.full(n, np.nan) if v is None else np.asarray(v, dtype=np.float64)


def _count(metrics: Mapping[str, np.ndarray], name: str, n: int, dur_s: np.ndarray) -> np.ndarray | None:
    """A ``….sum`` counter, or its ``.per_cycle_elapsed`` rate × clock × duration; None when neither exists."""
    if name in metrics:
        return _get(metrics, name, n)
    rate = metrics.get(name + ".per_cycle_elapsed")
    if rate is None:
        return None
    clock = _get(metrics, M_SMSP_CLOCK if name.startswith("smsp__") else M_SM_CLOCK, n)
    return np.asarray(rate, dtype=np.float64) * clock * dur_s


def _sum_parts(parts: list[np.ndarray], n: int) -> np.ndarray:
    """Sum treating NaN as 0, NaN where every part is NaN."""
    if not parts:
        return np.full(n, np.nan)
    stack = np.vstack(parts)
    return np.where(np.isfinite(stack).any(axis=0), np.nansum(stack, axis=0), np.nan)


def _throughput(metrics: Mapping[str, np.ndarray], name: str, parts: Sequence[str], n: int) -> tuple[np.ndarray, str]:
    """ncu's throughput where collected (per row), else the maximum of its parts; and where it came from
    (``ncu``, ``parts``, ``mixed`` or ``none``)."""
    top = _get(metrics, name, n)
    have = [_get(metrics, p, n) for p in parts if p in metrics]
    if not have:
        return top, "ncu" if name in metrics else "none"
    from_parts = np.fmax.reduce(np.vstack(have), axis=0)  # NaN only where every part is NaN
    out = np.where(np.isfinite(top), top, from_parts)
    used_top, used_parts = np.isfinite(top).any(), (~np.isfinite(top) & np.isfinite(from_parts)).any()
    return out, "mixed" if used_top and used_parts else "parts" if used_parts else "ncu" if used_top else "none"


def compute_bounds(metrics: Mapping[str, np.ndarray]) -> KernelBounds:
    """Per-launch throughputs, bytes, FLOPs by precision, intensity and bound class (see the module docstring)."""
    n = _rows(metrics)
    dur_ns = _get(metrics, M_DURATION, n)
    dur_s = dur_ns * 1e-9
    if M_DRAM_BYTES in metrics:
        dram = _get(metrics, M_DRAM_BYTES, n)
    elif "dram__bytes_read.sum" in metrics or "dram__bytes_write.sum" in metrics:
        dram = _sum_parts([_get(metrics, "dram__bytes_read.sum", n), _get(metrics, "dram__bytes_write.sum", n)], n)
    else:
        dram = _get(metrics, M_DRAM_RATE, n) * dur_s
    by_prec: dict[str, list[np.ndarray]] = {}
    for prec, op, weight in SASS_FLOP_WEIGHTS:
        c = _count(metrics, SASS_METRIC.format(op=op), n, dur_s)
        if c is not None:
            by_prec.setdefault(prec, []).append(weight * c)
    int_ops: list[np.ndarray] = []
    for name in metrics:
        m = TENSOR_PATH.match(name)
        if m is None:
            continue
        prec = TENSOR_PRECISIONS.get(m.group(1))
        (by_prec.setdefault(prec, []) if prec else int_ops).append(_get(metrics, name, n))
    for name in list(metrics):  # tensor path metrics collected only as rates
        if name.endswith(".sum.per_cycle_elapsed") and TENSOR_PATH.match(name[: -len(".per_cycle_elapsed")]):
            base = name[: -len(".per_cycle_elapsed")]
            if base not in metrics:
                prec = TENSOR_PRECISIONS.get(TENSOR_PATH.match(base).group(1))  # type: ignore[union-attr]
                c = _count(metrics, base, n, dur_s)
                (by_prec.setdefault(prec, []) if prec else int_ops).append(c)  # type: ignore[arg-type]
    flops_by = {p: _sum_parts(by_prec[p], n) for p in FLOP_PRECISIONS if p in by_prec}
    flops = _sum_parts(list(flops_by.values()), n)
    inst = [_get(metrics, k, n) for k in metrics if re.match(r"^sm__inst_executed_pipe_tensor[a-z_]*\.sum$", k)]
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(dram > 0, flops / dram, np.nan)
        fps = np.where(dur_s > 0, flops / dur_s, np.nan)
        bps = np.where(dur_s > 0, dram / dur_s, np.nan)
    sm, sm_src = _throughput(metrics, M_SM_PCT, SM_THROUGHPUT_PARTS, n)
    mem, mem_src = _throughput(metrics, M_MEM_PCT, MEMORY_THROUGHPUT_PARTS, n)
    waves = _get(metrics, M_WAVES, n)
    return KernelBounds(
        duration_ns=dur_ns, sm_throughput_pct=sm, memory_throughput_pct=mem, dram_bytes=dram,
        achieved_occupancy_pct=_get(metrics, M_ACHIEVED_OCC, n),
        theoretical_occupancy_pct=_get(metrics, M_THEORETICAL_OCC, n), waves_per_sm=waves,
        flops_by_precision=flops_by, tensor_int_ops=_sum_parts(int_ops, n), tensor_inst=_sum_parts(inst, n),
        flops=flops, arithmetic_intensity=ai, flops_per_s=fps, dram_bytes_per_s=bps,
        bound=sol_bound(sm, mem, waves),
        throughput_source={"sm": sm_src, "memory": mem_src})


# --- roofline ------------------------------------------------------------------------------------------------
@dataclass
class Ceilings:
    """Roofline ceilings: peak FLOP/s per FLOP precision (:data:`FLOP_PRECISIONS`) and DRAM bytes/s."""

    peak_flops_per_s: dict[str, float] = field(default_factory=dict)
    dram_bytes_per_s: float | None = None
    source: dict[str, str] = field(default_factory=dict)  # ceiling → "ncu" or "spec:<GPU>"

    def ridge_point(self, precision: str) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the precision's compute roof meets the DRAM roof."""
        peak = self.peak_flops_per_s.get(precision)
        return None if peak is None or not self.dram_bytes_per_s else peak / self.dram_bytes_per_s


def _median(metrics: Mapping[str, np.ndarray], name: str) -> float | None:
    v = metrics.get(name)
    if v is None:
        return None
    v = np.asarray(v, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.median(v)) if v.size else None


def device_ceilings(metrics: Mapping[str, np.ndarray] | None = None, spec: GpuSpec | None = None) -> Ceilings:
    """Ceilings from ncu's own peak metrics (peak per cycle × the clock it measured, median over launches, so they
    reflect the clock the kernels ran at), completed from the spec sheet for what ncu did not report.

    FP32/FP64/FP16 = ``sm__sass_thread_inst_executed_op_{f,d,h}fma_pred_on.sum.peak_sustained`` × 2 (× 4 for
    packed half) × ``sm__cycles_elapsed.avg.per_second``; tensor = dense ``sm__ops_path_tensor_…`` peaks (see
    :data:`TENSOR_PEAK`) × the same clock; DRAM = ``dram__bytes.sum.peak_sustained`` ×
    ``dram__cycles_elapsed.avg.per_second`` (ncu's SpeedOfLight_RooflineChart formulas)."""
    c = Ceilings()
    m = metrics or {}
    sm_clk, dram_clk = _median(m, M_SM_CLOCK), _median(m, M_DRAM_CLOCK)
    if sm_clk:
        for prec, (name, flops_per_inst) in SASS_PEAK.items():
            if (peak := _median(m, name)) is not None:
                c.peak_flops_per_s[prec], c.source[prec] = peak * flops_per_inst * sm_clk, "ncu"
        for name in m:
            hit = TENSOR_PEAK.match(name)
            dense = hit is not None and ("sparsity_off" in name or ("sparsity" not in name and hit.group(1) == "fp64"))
            if dense and (prec := TENSOR_PRECISIONS.get(hit.group(1))) and (peak := _median(m, name)) is not None:
                c.peak_flops_per_s[prec] = max(peak * sm_clk, c.peak_flops_per_s.get(prec, 0.0))
                c.source[prec] = "ncu"
    if dram_clk and (peak := _median(m, "dram__bytes.sum.peak_sustained")) is not None:
        c.dram_bytes_per_s, c.source["dram"] = peak * dram_clk, "ncu"
    if spec is not None:
        for prec, key in SPEC_PRECISION.items():
            v = spec.peak_flops_per_s(key) if key else None
            if prec not in c.peak_flops_per_s and v is not None:
                c.peak_flops_per_s[prec], c.source[prec] = v, f"spec:{spec.name}"
        if c.dram_bytes_per_s is None:
            c.dram_bytes_per_s, c.source["dram"] = spec.memory_bandwidth_bytes_per_s, f"spec:{spec.name}"
    return c


@dataclass
class RooflinePoints:
    """One point per launch: where it sits (AI, FLOP/s) and the roof above it for its dominant precision."""

    arithmetic_intensity: np.ndarray
    flops_per_s: np.ndarray
    precision: np.ndarray  # object: the FLOP precision carrying most of the launch's FLOPs ("" if none)
    roof_flops_per_s: np.ndarray  # min(peak[precision], AI × DRAM B/s); NaN when a ceiling is missing
    pct_of_roof: np.ndarray


def roofline_points(bounds: KernelBounds, ceilings: Ceilings) -> RooflinePoints:
    """Place each launch on the roofline of its dominant precision."""
    n = len(bounds)
    precs = [p for p in FLOP_PRECISIONS if p in bounds.flops_by_precision]
    prec = np.full(n, "", dtype=object)
    if precs:
        stack = np.vstack([np.nan_to_num(bounds.flops_by_precision[p], nan=0.0) for p in precs])
        best = stack.argmax(axis=0)
        has = stack.max(axis=0) > 0
        prec[has] = np.asarray(precs, dtype=object)[best[has]]
    peak = np.asarray([ceilings.peak_flops_per_s.get(p, np.nan) if p else np.nan for p in prec], dtype=np.float64)
    bw = ceilings.dram_bytes_per_s if ceilings.dram_bytes_per_s else np.nan
    roof = np.fmin(peak, bounds.arithmetic_intensity * bw)
    roof = np.where(np.isfinite(peak) & np.isfinite(bounds.arithmetic_intensity) & np.isfinite(bw), roof, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(roof > 0, 100.0 * bounds.flops_per_s / roof, np.nan)
    return RooflinePoints(bounds.arithmetic_intensity, bounds.flops_per_s, prec, roof, pct)


# --- aggregation ---------------------------------------------------------------------------------------------
@dataclass
class GroupBounds:
    """Bounds of a group of launches (a layer, a kernel family, a kernel name): sums and time-weighted means."""

    key: str
    launches: int
    duration_ns: float
    sm_throughput_pct: float
    memory_throughput_pct: float
    achieved_occupancy_pct: float
    waves_per_sm: float
    dram_bytes: float
    flops: float
    arithmetic_intensity: float
    flops_per_s: float
    bound: str
    flops_by_precision: dict[str, float] = field(default_factory=dict)  # summed, precisions with any FLOPs

    @property
    def dominant_precision(self) -> str:
        """The FLOP precision carrying most of the group's FLOPs ("" when it has none)."""
        best = max(self.flops_by_precision.items(), key=lambda kv: kv[1], default=("", 0.0))
        return best[0] if best[1] > 0 else ""


def aggregate_bounds(bounds: KernelBounds, keys: Sequence[str] | np.ndarray,
                     weights_ns: np.ndarray | None = None) -> list[GroupBounds]:
    """Group launches by ``keys``; percentages and waves are weighted by duration (``weights_ns`` or the ncu
    duration), bytes/FLOPs/time are summed, the bound class is the SOL rule applied to the weighted means.
    Groups come out longest first."""
    keys_arr = np.asarray(keys, dtype=object)
    if len(keys_arr) != len(bounds):
        raise ValueError(f"{len(keys_arr)} keys for {len(bounds)} launches")
    if not len(bounds):
        return []
    # as Python strings: a fixed-width copy is as wide as the longest key in every row
    uniq, inv = np.unique(np.array([str(x) for x in keys_arr.tolist()], dtype=object), return_inverse=True)
    w = np.nan_to_num(np.asarray(bounds.duration_ns if weights_ns is None else weights_ns, dtype=np.float64))
    g = len(uniq)

    def total(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        s = np.bincount(inv, weights=np.nan_to_num(x), minlength=g)
        return np.where(np.bincount(inv, weights=np.isfinite(x), minlength=g) > 0, s, np.nan)

    def wmean(x: np.ndarray) -> np.ndarray:
        ok = np.isfinite(x)
        num = np.bincount(inv, weights=np.where(ok, x * w, 0.0), minlength=g)
        den = np.bincount(inv, weights=np.where(ok, w, 0.0), minlength=g)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / den, np.nan)

    dur, dram, flops = np.bincount(inv, weights=w, minlength=g), total(bounds.dram_bytes), total(bounds.flops)
    sm, mem = wmean(bounds.sm_throughput_pct), wmean(bounds.memory_throughput_pct)
    waves = wmean(bounds.waves_per_sm)
    verdict = sol_bound(sm, mem, waves)
    occ = wmean(bounds.achieved_occupancy_pct)
    count = np.bincount(inv, minlength=g)
    by_prec = {p: total(v) for p, v in bounds.flops_by_precision.items()}
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(dram > 0, flops / dram, np.nan)
        fps = np.where(dur > 0, flops / (dur * 1e-9), np.nan)
    out = [GroupBounds(str(uniq[i]), int(count[i]), float(dur[i]), float(sm[i]), float(mem[i]), float(occ[i]),
                       float(waves[i]), float(dram[i]), float(flops[i]), float(ai[i]), float(fps[i]),
                       str(verdict[i]),
                       {p: float(v[i]) for p, v in by_prec.items() if np.isfinite(v[i]) and v[i] > 0})
           for i in range(g)]
    return sorted(out, key=lambda b: -b.duration_ns)
