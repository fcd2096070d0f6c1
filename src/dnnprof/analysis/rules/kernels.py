"""Rules about how kernels use the GPU: ``low-occupancy``, ``small-grid``, ``compile-not-used``,
``optimizer-not-fused``, ``cudnn-benchmark-off``."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from dnnprof.analysis.attribution import PHASES
from dnnprof.analysis.kernel_summary import KernelRow
from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.analysis.rules.precision import TC_FAMILIES
from dnnprof.model.mapped_columns import release_pages_of
from dnnprof.model.units import ns_brief_text

#: ``low-occupancy``: kernels below this theoretical occupancy ...
LOW_OCC_MAX_PCT = 25.0
#: ... that together take at least this share of kernel time.
LOW_OCC_MIN_KERNEL_PCT = 5.0
#: Latency-bound kernels are assumed to speed up in proportion to resident warps up to this occupancy.
LOW_OCC_TARGET_PCT = 50.0
#: With Nsight Compute counters, a kernel at or above this SM or memory throughput is not latency-bound
#: (Nsight Compute's SOL rule uses 60%).
LOW_OCC_BUSY_THROUGHPUT_PCT = 60.0
#: ``small-grid``: kernels with fewer blocks than SMs take at least this share of kernel time ...
SMALL_GRID_MIN_KERNEL_PCT = 5.0
#: ... and leave at least this share of kernel time's SM-time empty.
SMALL_GRID_MIN_WASTE_PCT = 5.0
#: ``compile-not-used``: small fusable kernels per step ...
COMPILE_MIN_KERNELS_PER_STEP = 30
#: ... taking at least this share of kernel time.
COMPILE_MIN_KERNEL_PCT = 15.0
#: Assumed speedup of fusable kernels under torch.compile (PyTorch 2 paper, Ansel et al. ASPLOS 2024: 1.41×
#: geomean training speedup on A100 across 180+ models, mostly from fusing pointwise ops and reductions).
COMPILE_FUSION_SPEEDUP = 2.0
#: ``optimizer-not-fused``: per-parameter kernels per step before the optimizer counts as unfused ...
OPT_MIN_KERNELS_PER_STEP = 40
#: ... and the estimated gain that makes it worth reporting (per-parameter loops / foreach kernels).
OPT_MIN_GAIN_PCT = 1.0
OPT_FOREACH_MIN_GAIN_PCT = 2.0
#: A fused optimizer reads and writes each state tensor once; the foreach/per-parameter AdamW runs ~7 passes of
#: ~3 tensors each, so its kernel time is assumed to shrink by this factor.
OPT_FUSED_SPEEDUP = 3.0
#: ``cudnn-benchmark-off``: convolution kernels take at least this share of kernel time ...
CUDNN_MIN_CONV_PCT = 5.0
#: ... and benchmark mode is assumed to save this share of their time (it times every algorithm and keeps the
#: fastest; the heuristic pick is often already best, so the saving assumed is modest).
CUDNN_BENCHMARK_SAVING = 0.10
TOP_N = 5

_FUSABLE_FAMILIES = frozenset({"elementwise", "norm", "softmax", "reduction", "memory", "loss"})
_COMPILED_KERNEL = re.compile(r"^triton_|triton_(?:poi|red|per|tem)_|cutlass_.*_inductor", re.IGNORECASE)
_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
_COMPILED_OPS = ("CompiledFunction", "Torch-Compiled Region", "CompiledFxGraph", "TorchDynamo", "## Call Compiled")
_FUSED_OPT = re.compile(r"fused|Fused", re.IGNORECASE)


def _occupancy(ctx: Context) -> dict[str, np.ndarray] | None:
    """Per-row theoretical occupancy of the kernels table (None when it cannot be computed)."""
    if ctx.device is None:
        return None
    try:
        from dnnprof.analysis.occupancy import kernel_occupancy
    except ImportError:
        return None
    return kernel_occupancy(ctx.profile.tables["kernels"], ctx.device)


def _throughput(dk: dict[str, Any]) -> float | None:
    vals = [dk.get(k) for k in ("sm_throughput_pct", "memory_throughput_pct")]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return max(vals) if vals else None


@rule("low-occupancy", group="kernels", nvidia_only=True)
def low_occupancy(ctx: Context) -> Finding | None:
    """Kernels that keep few warps resident per SM, outside the libraries' matrix kernels.

    Pattern: theoretical occupancy (warps an SM can hold for the launch, limited by registers, shared memory,
    block size or the block limit) below ``LOW_OCC_MAX_PCT``. cuBLAS/cuDNN/CUTLASS matrix kernels are excluded:
    they trade occupancy for registers and shared-memory tiles by design.
    Algorithm: occupancy from the summary's ``theoretical_occupancy_pct`` when present, else computed from the
    launch configuration the trace records (``analysis.occupancy``); with Nsight Compute counters, kernels at ≥
    ``LOW_OCC_BUSY_THROUGHPUT_PCT`` SM or memory throughput are dropped (occupancy is not their limit). Fires
    when the rest take ≥ ``LOW_OCC_MIN_KERNEL_PCT`` of kernel time.
    Fix: depends on the limiter — registers: ``__launch_bounds__``/``maxrregcount``, Triton ``num_warps``;
    shared memory: smaller tiles or ``num_stages``; block size: more threads per block; blocks: fewer, larger
    blocks.
    """
    occ = None
    rows: list[tuple[KernelRow, float, str]] = []
    for r in ctx.kernels:
        if r.family in TC_FAMILIES or r.tensor_core:
            continue
        dk = ctx.doc_kernels.get(r.name, {})
        o, lim = dk.get("theoretical_occupancy_pct"), dk.get("occupancy_limiters")
        if o is None:
            if occ is None:
                occ = _occupancy(ctx) or {}
            if not occ:
                return None
            vals = occ["theoretical_occupancy_pct"][r.rows].astype(np.float64)
            ok = ~np.isnan(vals)
            if not ok.any():
                continue
            d = ctx.profile.tables["kernels"]["dur_ns"][r.rows][ok].astype(np.float64)
            o = float(np.average(vals[ok], weights=d)) if d.sum() > 0 else float(vals[ok].mean())
            lim = str(occ["limiter"][r.rows[ok][int(np.argmax(d))]])
        thr = _throughput(dk)
        if o < LOW_OCC_MAX_PCT and (thr is None or thr < LOW_OCC_BUSY_THROUGHPUT_PCT):
            lim_s = "+".join(lim) if isinstance(lim, list) else str(lim or "")
            rows.append((r, float(o), lim_s))
    t = sum(ctx.in_window_ns(r.rows) for r, _, _ in rows)
    if not ctx.kernel_ns or pct(t, ctx.kernel_ns) < LOW_OCC_MIN_KERNEL_PCT:
        return None
    # kernels overlapping on several streams count once (Context.overlap_factor)
    overlap = ctx.overlap_factor([r for r, _, _ in rows])
    gain = sum(ctx.in_window_ns(r.rows) * (1.0 - o / LOW_OCC_TARGET_PCT) for r, o, _ in rows) * overlap
    rows.sort(key=lambda x: -ctx.in_window_ns(x[0].rows))
    top = [ctx.kernel_offender(r, {"theoretical_occupancy_pct": round(o, 1), "limiter": lim,
                                   "registers_per_thread": r.registers_per_thread,
                                   "shared_memory_bytes": r.shared_memory_bytes, "block": r.block, "grid": r.grid})
           for r, o, lim in rows[:TOP_N]]
    limiters = sorted({lim for _, _, lim in rows if lim})
    return Finding(
        id="low-occupancy",
        title=f"Low-occupancy kernels: {pct(t, ctx.kernel_ns):.0f}% of GPU kernel time below "
              f"{LOW_OCC_MAX_PCT:.0f}% occupancy",
        summary=(f"{len(rows)} kernels ({ns_brief_text(t)}) hold few warps per SM; limited by "
                 f"{', '.join(limiters) or 'unknown'}"),
        recommendation=("Raise resident warps for these kernels: cut registers per thread (__launch_bounds__, "
                        "Triton num_warps) or shared memory per block (smaller tiles, fewer num_stages), use larger "
                        "blocks; for PyTorch ops with this problem, try torch.compile, which generates its own."),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"Kernel time × (1 − occupancy/{LOW_OCC_TARGET_PCT:.0f}%): latency-bound kernels are assumed "
                       f"to speed up in proportion to resident warps up to {LOW_OCC_TARGET_PCT:.0f}% occupancy. An "
                       "upper bound: kernels already limited by memory or compute throughput gain less (add Nsight "
                       "Compute counters to exclude them)."),
        evidence={"kernels": len(rows), "kernel_us": us(t), "pct_of_kernel_time": round(pct(t, ctx.kernel_ns), 2),
                  "limiters": limiters, "counters_used": any(_throughput(ctx.doc_kernels.get(r.name, {}))
                                                             is not None for r, _, _ in rows),
                  **ctx.overlap_evidence(overlap)},
        top=top,
    )



def _blocks(k: dict[str, np.ndarray], lo: int, hi: int | None, rows: np.ndarray) -> np.ndarray:
    """Thread blocks of the launches at ``rows`` of kernel rows [lo, hi): grid x × y × z (a 0 y or z counts as 1)."""
    return (k["grid_x"][lo:hi][rows].astype(np.int64) * np.maximum(k["grid_y"][lo:hi][rows], 1)
            * np.maximum(k["grid_z"][lo:hi][rows], 1))


#: Kernels a rule reads at once.
_BLOCK_ROWS = 1 << 20


@rule("small-grid", group="kernels")
def small_grid(ctx: Context) -> Finding | None:
    """Kernels launched with fewer blocks than the GPU has SMs.

    Pattern: grid size (blocks) < SM count, so some SMs get no work for the kernel's whole duration; collective
    (NCCL) kernels are left out.
    Algorithm: per launch, empty SM-time = duration × (1 − blocks/SMs); fires when such launches take ≥
    ``SMALL_GRID_MIN_KERNEL_PCT`` of kernel time and their empty SM-time is ≥ ``SMALL_GRID_MIN_WASTE_PCT``.
    Fix: give each kernel more parallel work — a larger batch, fused/batched small ops (``torch.bmm``,
    ``torch._foreach_*``, grouped GEMM), split-K for tall-skinny GEMMs, or independent work on another stream.
    """
    sms = ctx.sm_count
    if not sms:
        return None
    k = ctx.profile.tables["kernels"]
    # Collectives (NCCL) run on a few channels by design and spend their time on links or waiting for other ranks:
    # more blocks would not help them (communication-exposed, rank-straggler speak for them).
    nccl = np.zeros(k["dur_ns"].size, dtype=bool)
    for r in ctx.kernels:
        if r.family == "nccl":
            nccl[r.rows] = True
    is_small = np.zeros(k["dur_ns"].size, dtype=bool)
    t = waste = 0.0
    for lo in range(0, k["dur_ns"].size, _BLOCK_ROWS):  # a big trace's kernels are millions: a block at a time
        hi = lo + _BLOCK_ROWS
        sel = np.flatnonzero((k["rank"][lo:hi] == ctx.rank) & ((k["step"][lo:hi] >= 0) if ctx.has_steps else True))
        blocks = _blocks(k, lo, hi, sel)
        small = (blocks > 0) & (blocks < sms) & ~nccl[lo:hi][sel]
        d = k["dur_ns"][lo:hi][sel][small].astype(np.float64)
        t += float(d.sum())
        waste += float((d * (1.0 - blocks[small] / sms)).sum())
        is_small[lo + sel[small]] = True
        release_pages_of(*(k[c] for c in ("rank", "step", "dur_ns", "grid_x", "grid_y", "grid_z")))
    if not ctx.kernel_ns or pct(t, ctx.kernel_ns) < SMALL_GRID_MIN_KERNEL_PCT \
            or pct(waste, ctx.kernel_ns) < SMALL_GRID_MIN_WASTE_PCT:
        return None
    per_kernel = []
    for r in ctx.kernels:
        mine = r.rows[is_small[r.rows]]
        if not mine.size:
            continue
        dm = k["dur_ns"][mine].astype(np.float64)
        bm = _blocks(k, 0, None, mine)
        per_kernel.append((float((dm * (1.0 - bm / sms)).sum()), r, int(np.median(bm))))
    per_kernel.sort(key=lambda x: -x[0])
    top = [ctx.kernel_offender(r, {"blocks": b, "sm_count": sms, "empty_sm_time_us": us(w)})
           for w, r, b in per_kernel[:TOP_N]]
    return Finding(
        id="small-grid",
        title=f"Kernels with fewer blocks than SMs: {pct(t, ctx.kernel_ns):.0f}% of GPU kernel time",
        summary=f"{len(per_kernel)} kernels launch < {sms} blocks; {ns_brief_text(waste)} of SM-time left empty",
        recommendation=("Give these kernels more parallel work: raise the batch size, batch many small ops into one "
                        "(torch.bmm, grouped GEMMs, torch._foreach_*), or run independent work on another CUDA "
                        "stream."),
        est_gain_pct=pct(waste, ctx.window_ns),
        how_estimated=(f"Σ kernel time × (1 − blocks/{sms} SMs): the SM-time these launches leave empty, as a share "
                       "of the step windows; realised as throughput when the same kernels do more work each, an upper "
                       "bound (concurrent kernels on other streams may already fill some SMs)."),
        evidence={"sm_count": sms, "small_grid_kernel_us": us(t), "empty_sm_time_us": us(waste),
                  "pct_of_kernel_time": round(pct(t, ctx.kernel_ns), 2)},
        top=top,
    )


def _compiled(ctx: Context) -> bool:
    if any(_COMPILED_KERNEL.search(r.name) for r in ctx.kernels):
        return True
    k = ctx.profile.tables["kernels"]
    if (k["graph_id"] >= 0).any():
        return True
    # Kineto records no graph id on a replayed kernel (PyTorch 2.11): its launch is the graph launch itself.
    launched = np.zeros(ctx.profile.rows("runtime"), dtype=bool)  # the distinct launch rows, without a sort
    launched[k["launch_row"][k["launch_row"] >= 0]] = True
    launches = np.flatnonzero(launched)
    if launches.size:
        called = set(ctx.profile.names(ctx.profile.tables["runtime"]["name_id"][launches]).tolist())
        if any(str(n).startswith(_GRAPH_LAUNCHES) for n in called):
            return True
    return any(any(m in n for m in _COMPILED_OPS) for n in ctx.op_name_set)


@rule("compile-not-used", group="kernels")
def compile_not_used(ctx: Context) -> Finding | None:
    """Eager mode with many small elementwise/normalisation kernels a compiler would fuse.

    Pattern: no ``triton_*`` kernels, compiled-region ops or CUDA-graph launches, and many pointwise, norm,
    softmax, reduction and copy kernels per step.
    Algorithm: ≥ ``COMPILE_MIN_KERNELS_PER_STEP`` such kernels per step taking ≥ ``COMPILE_MIN_KERNEL_PCT`` of
    kernel time.
    Fix: ``model = torch.compile(model)`` (``mode="max-autotune"`` for long runs); for the optimizer,
    ``fused=True``.
    """
    if not ctx.kernel_ns or _compiled(ctx):
        return None
    rows = [r for r in ctx.kernels if r.family in _FUSABLE_FAMILIES and r.phase != "optimizer"]
    t = sum(ctx.in_window_ns(r.rows) for r in rows)
    calls = sum(int((ctx.kernel_step[r.rows] >= 0).sum()) if ctx.has_steps else r.calls for r in rows)
    per_step = calls / ctx.n_windows
    if per_step < COMPILE_MIN_KERNELS_PER_STEP or pct(t, ctx.kernel_ns) < COMPILE_MIN_KERNEL_PCT:
        return None
    overlap = ctx.overlap_factor(rows)  # kernels overlapping on several streams count once
    gain = t * (1.0 - 1.0 / COMPILE_FUSION_SPEEDUP) * overlap
    rows.sort(key=lambda r: -ctx.in_window_ns(r.rows))
    fams: dict[str, int] = {}
    for r in rows:
        fams[r.family] = fams.get(r.family, 0) + ctx.in_window_ns(r.rows)
    return Finding(
        id="compile-not-used",
        title=f"Eager mode: {per_step:.0f} small fusable kernels per step ({pct(t, ctx.kernel_ns):.0f}% of kernel time)",
        summary=(f"{per_step:.0f} pointwise/norm/softmax/reduction/copy kernels per step run for {ns_brief_text(t)} and no "
                 "torch.compile (Triton) kernels or CUDA graphs appear in the trace"),
        recommendation=("Compile the model: model = torch.compile(model) (first steps are slower while it compiles; "
                        "mode='max-autotune' for long runs, mode='reduce-overhead' adds CUDA graphs)."),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"Time of the fusable kernels × (1 − 1/{COMPILE_FUSION_SPEEDUP:g}): fusion is assumed to halve "
                       "their memory traffic (PyTorch 2 paper: 1.41× geomean training speedup on A100, mostly from "
                       "fused pointwise ops); matrix kernels are left unchanged."),
        evidence={"fusable_kernels_per_step": round(per_step, 1), "fusable_kernel_us": us(t),
                  "pct_of_kernel_time": round(pct(t, ctx.kernel_ns), 2),
                  **ctx.overlap_evidence(overlap),
                  "by_family_us": {f: us(v) for f, v in sorted(fams.items(), key=lambda kv: -kv[1])}},
        top=[ctx.kernel_offender(r, {"family": r.family}) for r in rows[:TOP_N]],
    )


@rule("optimizer-not-fused", group="kernels")
def optimizer_not_fused(ctx: Context) -> Finding | None:
    """The optimizer step runs as many small kernels instead of one fused pass.

    Pattern: kernels under ``Optimizer.step#…`` that are per-parameter elementwise launches (``foreach=False``,
    custom loops) or foreach ``multi_tensor_apply`` kernels, with no fused optimizer kernel.
    Algorithm: the optimizer's GPU span (first to last kernel of each unbroken run of optimizer kernels, so the
    forward and backward between GradScaler's unscale and its next scale update stay out) minus its kernel time
    divided by ``OPT_FUSED_SPEEDUP`` is the expected saving; fires for per-parameter optimizers with ≥
    ``OPT_MIN_KERNELS_PER_STEP`` kernels and ≥ ``OPT_MIN_GAIN_PCT`` gain, for foreach ones at ≥
    ``OPT_FOREACH_MIN_GAIN_PCT``.
    Fix: ``torch.optim.AdamW(params, fused=True)`` (also Adam, SGD, Adagrad); at least ``foreach=True``.
    """
    att = ctx.a.attribution
    if att.phase.size == 0:
        return None
    k = ctx.profile.tables["kernels"]
    opt = np.flatnonzero((att.phase == PHASES.index("optimizer")) & (k["rank"] == ctx.rank)
                         & ((k["step"] >= 0) if ctx.has_steps else True))
    if opt.size == 0 or not ctx.window_ns:
        return None
    ids = k["name_id"][opt]
    d = k["dur_ns"][opt]
    fused = ctx.profile.names_where(ids, _FUSED_OPT.search)
    if d[fused].sum() >= 0.5 * d.sum():
        return None
    multi = ctx.profile.names_where(ids, lambda s: "multi_tensor_apply" in s)
    per_param = multi.mean() < 0.5
    per_step = opt.size / ctx.n_windows
    span = _optimizer_span_ns(ctx, att.phase)
    kt = int(d.sum())
    gain = max(0.0, span - kt / OPT_FUSED_SPEEDUP)
    if per_param and (per_step < OPT_MIN_KERNELS_PER_STEP or pct(gain, ctx.window_ns) < OPT_MIN_GAIN_PCT):
        return None
    if not per_param and pct(gain, ctx.window_ns) < OPT_FOREACH_MIN_GAIN_PCT:
        return None
    opt_name = _optimizer_name(ctx)
    mode = "per-parameter kernels (foreach=False or a custom loop)" if per_param else "foreach (multi-tensor) kernels"
    rows = [r for r in ctx.kernels if r.phase == "optimizer"]
    return Finding(
        id="optimizer-not-fused",
        title=f"Optimizer step is not fused: {per_step:.0f} kernels per step ({mode.split(' (')[0]})",
        summary=(f"{opt_name or 'the optimizer'} runs {per_step:.0f} {mode} per step; its GPU span is "
                 f"{ns_brief_text(span / ctx.n_windows)} per step for {ns_brief_text(kt / ctx.n_windows)} of kernel time"),
        recommendation=(f"Use the fused implementation: torch.optim.{(opt_name or 'AdamW').split('.')[0]}(params, ..., "
                        "fused=True) (Adam, AdamW, SGD, Adagrad support it on CUDA)"
                        + ("; at least foreach=True." if per_param else ".")),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"Optimizer GPU span per step (first to last kernel of each unbroken run of optimizer kernels, "
                       f"launch gaps included) minus its "
                       f"kernel time / {OPT_FUSED_SPEEDUP:g}: a fused step is one pass that reads each state tensor "
                       "once instead of several elementwise passes."),
        evidence={"optimizer": opt_name, "mode": "per_parameter" if per_param else "foreach",
                  "kernels_per_step": round(per_step, 1), "kernel_us_per_step": us(kt / ctx.n_windows),
                  "gpu_span_us_per_step": us(span / ctx.n_windows), "pct_of_step": round(pct(span, ctx.window_ns), 2)},
        top=[ctx.kernel_offender(r) for r in sorted(rows, key=lambda r: -r.total_ns)[:TOP_N]],
    )


def _optimizer_span_ns(ctx: Context, phase: np.ndarray) -> int:
    """GPU time from first to last kernel of each unbroken run of optimizer kernels (in start order on the rank's
    GPU, inside steps), added up: launch gaps inside an optimizer call count, the forward and backward work between
    two optimizer-side calls (GradScaler's unscale before the step, its scale update at the top of the next) do not.
    """
    k = ctx.profile.tables["kernels"]
    sel = np.flatnonzero((k["rank"] == ctx.rank) & ((k["step"] >= 0) if ctx.has_steps else True))
    if sel.size == 0:
        return 0
    sel = sel[np.argsort(k["start_ns"][sel], kind="stable")]
    is_opt = phase[sel] == PHASES.index("optimizer")
    if not is_opt.any():
        return 0
    steps = k["step"][sel]
    new_run = is_opt & ~np.concatenate(([False], is_opt[:-1] & (steps[1:] == steps[:-1])))
    run = np.cumsum(new_run)[is_opt]
    opt = sel[is_opt]
    start = k["start_ns"][opt]
    end = start + k["dur_ns"][opt]
    first = np.flatnonzero(np.concatenate(([True], run[1:] != run[:-1])))
    return int((np.maximum.reduceat(end, first) - np.minimum.reduceat(start, first)).sum())


def _optimizer_name(ctx: Context) -> str:
    for s in ctx.op_name_set:  # in id order: the first optimizer the trace names
        if s.startswith("Optimizer.step#"):
            return s[len("Optimizer.step#"):]
    return ""


def _is_false(v: Any) -> bool:
    return v is False or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0) or (
        isinstance(v, str) and v.strip().lower() in ("false", "0", "off", "no"))


@rule("cudnn-benchmark-off", group="kernels")
def cudnn_benchmark_off(ctx: Context) -> Finding | None:
    """Convolutions run with ``torch.backends.cudnn.benchmark`` off.

    Pattern: convolution kernels in the trace and the run recorded ``cudnn_benchmark: false`` (``dnnprof run``
    records it; for your own traces: ``prof.add_metadata_json("dnnprof_run", json.dumps({"cudnn_benchmark":
    torch.backends.cudnn.benchmark}))``, or ``cudnn-benchmark-off`` in the file name). Quiet when not recorded.
    Algorithm: conv kernels ≥ ``CUDNN_MIN_CONV_PCT`` of kernel time and the setting is false.
    Fix: ``torch.backends.cudnn.benchmark = True`` before the training loop when input shapes are fixed.
    """
    setting = ctx.run_setting("cudnn_benchmark")
    if setting is None or not _is_false(setting):
        return None
    rows = [r for r in ctx.kernels if r.family == "conv"]
    t = sum(ctx.in_window_ns(r.rows) for r in rows)
    if not ctx.kernel_ns or pct(t, ctx.kernel_ns) < CUDNN_MIN_CONV_PCT:
        return None
    rows.sort(key=lambda r: -ctx.in_window_ns(r.rows))
    return Finding(
        id="cudnn-benchmark-off",
        title=f"cuDNN benchmark mode is off; convolutions are {pct(t, ctx.kernel_ns):.0f}% of kernel time",
        summary=(f"{len(rows)} convolution kernels run {ns_brief_text(t)} with algorithms picked by cuDNN's heuristics "
                 "(torch.backends.cudnn.benchmark = False)"),
        recommendation=("Set torch.backends.cudnn.benchmark = True before training when input shapes do not change "
                        "(with varying shapes it re-tunes for each new shape)."),
        est_gain_pct=pct(t * CUDNN_BENCHMARK_SAVING, ctx.window_ns),
        how_estimated=(f"Convolution kernel time × {CUDNN_BENCHMARK_SAVING:.0%}: an assumed saving (benchmark mode times "
                       "every algorithm and keeps the fastest; how much that beats the heuristic depends on the "
                       "layer shapes)."),
        evidence={"conv_kernel_us": us(t), "pct_of_kernel_time": round(pct(t, ctx.kernel_ns), 2),
                  "cudnn_benchmark": setting},
        top=[ctx.kernel_offender(r) for r in rows[:TOP_N]],
    )
