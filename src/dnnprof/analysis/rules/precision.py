"""Rules about math precision and tensor cores: ``amp-not-used``, ``tensor-cores-unused``, ``fp64-used``.

Kernel precision and tensor-core use come from the kernel names (``analysis.kernel_names``); expected speedups
from the device's datasheet peaks (``model.gpu_specs``), named in every finding's ``how_estimated``.
"""

from __future__ import annotations

import re
from typing import Any

from dnnprof.analysis.kernel_summary import KernelRow
from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.model.units import ns_brief_text

#: ``amp-not-used`` fires when fp32 GEMM/conv kernels without tensor cores take this share of kernel time.
AMP_MIN_KERNEL_PCT = 10.0
#: ... or fp32 + TF32 matrix kernels take that share while fp16/bf16 matrix kernels are under this share of the
#: matrix time (the run does not use AMP).
AMP_MAX_HALF_SHARE_PCT = 10.0
#: ``tensor-cores-unused`` fires when fp16/bf16 GEMM/conv work on slow paths takes this share of kernel time.
TC_UNUSED_MIN_KERNEL_PCT = 5.0
#: ``fp64-used`` fires when double-precision kernels take this share of kernel time.
FP64_MIN_KERNEL_PCT = 5.0
#: Speedup assumed when the device is not in the spec table: A100's TF32 / FP32 dense ratio (156 / 19.5).
DEFAULT_TC_SPEEDUP = 8.0
#: Unaligned 16-bit GEMMs (``align1``/``align2``) vs aligned ones. Assumption, stated in the finding: padding
#: GPT-2's vocabulary 50257 → 50304 made nanoGPT ~25% faster end to end (A. Karpathy, 2023).
UNALIGNED_SPEEDUP = 2.0
#: With Nsight Compute counters, the measured speedup (aligned GEMMs' FLOP rate over the unaligned kernel's) is
#: used instead, capped at this.
MAX_MEASURED_UNALIGNED_SPEEDUP = 16.0
#: Kernels that are matrix products but not plain GEMMs (attention): their FLOP rate is no reference for a GEMM's.
_ATTENTION = re.compile(r"sdpa|flash|fmha|attention", re.IGNORECASE)
#: Non-GEMM fp64 kernels are assumed memory-bound: fp32 halves their bytes.
FP64_ELEMENTWISE_SPEEDUP = 2.0
TOP_N = 5
#: Share of its fp32 DRAM traffic a matrix kernel keeps in 16 bits (operands and output halve).
HALF_BYTES = 0.5

#: Kernel families whose work tensor cores can do.
TC_FAMILIES = frozenset({"gemm", "conv", "attention", "rnn"})
# Kernels in those families that are not matrix products: tensor cores cannot help them.
_NOT_MMA = re.compile(r"gemv|splitKreduce|reduce_kernel|depthwise|elementWise|elemWise|RNN_|bidirectional_accum|"
                      r"GENERIC_|softmax|scal_kernel|dot_kernel|axpy|nrm2|transpose|CatArray|region_transform|"
                      r"nchwToNhwc|nhwcToNchw|ToNhwc|ToNchw|im2col|col2im|computeOffsets|scalePacked",
                      re.IGNORECASE)
# What a matrix-product mainloop is called (cuBLAS, cuBLASLt, CUTLASS, cuDNN, flash attention).
_MMA = re.compile(r"gemm|gmma|mma|nvjet|xmma|cutlass|fprop|dgrad|wgrad|implicit_convolve|winograd|flash|fmha|"
                  r"matmul|_mm_|bmm|dot_product|conv2d_c1|sdpa", re.IGNORECASE)
_UNALIGNED_16BIT = re.compile(r"_align[12](?:\b|_)", re.IGNORECASE)
# Precision words the shared detector does not know (CUDA's __half / __nv_bfloat16 spellings).
_HALF = re.compile(r"__half|half_t|__nv_half", re.IGNORECASE)
_BF16 = re.compile(r"__nv_bfloat16|bfloat16_t", re.IGNORECASE)
# Double-precision GEMM spellings: CUTLASS ``tensorop_d884gemm``, cuBLAS ``f64f64``.
_FP64 = re.compile(r"_d\d{3,5}gemm|f64f64|dgemm|\bdouble\b", re.IGNORECASE)


def _precision(r: KernelRow) -> str:
    """The kernel's operand precision; CUDA's own half types win over the shared name heuristic, which reads
    ``cublasGemmSmallNParams`` as an ``sgemm``."""
    if _BF16.search(r.name):
        return "bf16"
    if _HALF.search(r.name):
        return "fp16"
    if not r.precision and _FP64.search(r.name):
        return "fp64"
    return r.precision


def _is_mma_work(r: KernelRow) -> bool:
    """A matrix-product mainloop of a family tensor cores serve (not its layout or elementwise helpers)."""
    return r.family in TC_FAMILIES and bool(_MMA.search(r.name)) and not _NOT_MMA.search(r.name)


def _speedup(ctx: Context, to: str, frm: str) -> tuple[float, str]:
    """Datasheet ratio of two peak rates, and the words naming the source."""
    spec = ctx.spec
    if spec is not None:
        a, b = spec.peak_flops_per_s(to), spec.peak_flops_per_s(frm)
        if a and b:
            return a / b, f"{spec.name} datasheet dense peaks, {to} {a / 1e12:g} vs {frm} {b / 1e12:g} TFLOP/s"
    return DEFAULT_TC_SPEEDUP, f"device not in the spec table: assumed {DEFAULT_TC_SPEEDUP:g}× (A100 TF32/FP32)"


def _gain_ns(ctx: Context, rows: list[KernelRow], speedup: float) -> float:
    return sum(ctx.in_window_ns(r.rows) for r in rows) * (1.0 - 1.0 / speedup)


def _gain_to_half(ctx: Context, rows: list[KernelRow], speedup: float) -> tuple[float, int]:
    """:func:`_gain_ns` for fp32/TF32 matrix kernels moving to 16 bits, floored by memory where the run has Nsight
    Compute counters: a kernel cannot take less than reading and writing half its measured DRAM bytes at the
    datasheet bandwidth (``HALF_BYTES``). (gain ns, kernels the floor limited)."""
    bw = ctx.spec.memory_bandwidth_gb_s * 1e9 if ctx.spec is not None else None
    gain, floored = 0.0, 0
    k = ctx.profile.tables["kernels"]
    for r in rows:
        t = ctx.in_window_ns(r.rows)
        per_launch = (ctx.doc_kernels.get(r.name) or {}).get("dram_bytes")
        new = t / speedup
        if bw and per_launch:
            launches = int((k["step"][r.rows] >= 0).sum()) if ctx.has_steps else r.rows.size
            floor = launches * per_launch * HALF_BYTES / bw * 1e9
            if floor > new:
                new, floored = min(floor, t), floored + 1
        gain += t - new
    return gain, floored


def _on_the_wall(ctx: Context, rows: list[KernelRow], gain_ns: float) -> tuple[float, float, str]:
    """A gain from summed kernel time, as wall time: (gain, overlap factor, words for ``how_estimated``)."""
    f = ctx.overlap_factor(rows)
    if f >= 0.995:
        return gain_ns, 1.0, ""
    return gain_ns * f, f, (f" These kernels overlap on several streams: the gain is scaled by {f:.2f}, their wall "
                            "time over their summed time.")


def _offenders(ctx: Context, rows: list[KernelRow]) -> list[dict[str, Any]]:
    ranked = sorted(rows, key=lambda r: -ctx.in_window_ns(r.rows))[:TOP_N]
    return [ctx.kernel_offender(r, {"precision": _precision(r) or None, "tensor_core": r.tensor_core})
            for r in ranked]


def _mostly_in(ctx: Context, rows: list[KernelRow]) -> str:
    """``, mostly in L1, L2`` naming the (at most 3) layers with most of the rows' time; "" when none is known."""
    acc: dict[str, int] = {}
    for r in rows:
        if r.layer:
            acc[r.layer] = acc.get(r.layer, 0) + ctx.in_window_ns(r.rows)
    layers = [k for k, _ in sorted(acc.items(), key=lambda kv: -kv[1])][:3]
    return f", mostly in {', '.join(layers)}" if layers else ""


@rule("amp-not-used", group="precision", nvidia_only=True)
def amp_not_used(ctx: Context) -> Finding | None:
    """Matrix products run in fp32 (on the FMA pipes, or as TF32) where bf16/fp16 would be 2-15x faster.

    Pattern: GEMM/conv/RNN/attention matrix kernels (not their elementwise helpers) whose names show fp32 math
    without tensor-core instructions (``sgemm``, ``simt``, ``f32f32_f32f32``, ``ffma``); or, in a run with no
    16-bit matrix math at all, fp32 tensors on TF32 tensor cores (cuDNN convolutions use TF32 by default).
    Algorithm: fp32 non-tensor-core matrix time ≥ ``AMP_MIN_KERNEL_PCT`` of kernel time; or fp32 + TF32 matrix
    time ≥ ``AMP_MIN_KERNEL_PCT`` while fp16/bf16 kernels (and tensor-core kernels whose precision the name does
    not show) are under ``AMP_MAX_HALF_SHARE_PCT`` of matrix time. The device must have tensor cores
    (compute capability ≥ 7.0, or unknown).
    Fix: ``torch.autocast("cuda", dtype=torch.bfloat16)`` (fp16 + ``GradScaler`` before Ampere), or at least
    ``torch.set_float32_matmul_precision("high")`` (TF32) for the fp32 GEMMs.
    """
    if ctx.compute_major is not None and ctx.compute_major < 7:
        return None
    mma = [r for r in ctx.kernels if _is_mma_work(r)]
    fp32 = [r for r in mma if not r.tensor_core and _precision(r) in ("fp32", "")]
    tf32 = [r for r in mma if r.tensor_core and _precision(r) == "tf32"]
    half = [r for r in mma if _precision(r) in ("fp16", "bf16", "fp8") or (r.tensor_core and not _precision(r))]
    t32, ttf, thalf = (sum(ctx.in_window_ns(r.rows) for r in rs) for rs in (fp32, tf32, half))
    t_mma = sum(ctx.in_window_ns(r.rows) for r in mma)
    if not ctx.kernel_ns:
        return None
    no_amp = pct(thalf, t_mma) < AMP_MAX_HALF_SHARE_PCT
    fires_fp32 = pct(t32, ctx.kernel_ns) >= AMP_MIN_KERNEL_PCT
    fires_tf32 = no_amp and pct(t32 + ttf, ctx.kernel_ns) >= AMP_MIN_KERNEL_PCT
    if not (fires_fp32 or fires_tf32):
        return None
    counted = fp32 + (tf32 if no_amp else [])
    t = t32 + (ttf if no_amp else 0)
    ampere = ctx.compute_major is None or ctx.compute_major >= 8
    target = "bf16" if ampere else "fp16"
    s, src = _speedup(ctx, target, "fp32")
    s_tf, src_tf = _speedup(ctx, target, "tf32") if ampere else (1.0, "")
    g32, f32 = _gain_to_half(ctx, fp32, s)
    gtf, ftf = _gain_to_half(ctx, tf32, s_tf) if no_amp and ampere else (0.0, 0)
    gain, overlap, overlap_words = _on_the_wall(ctx, counted, g32 + gtf)
    floored = f32 + ftf
    share = pct(t, ctx.kernel_ns)
    what = "fp32 matrix math without tensor cores" if not (no_amp and ttf) else "fp32/TF32 matrix math, no AMP"
    dtype = "bfloat16" if ampere else "float16"
    return Finding(
        id="amp-not-used",
        title=f"{what}: {share:.0f}% of GPU kernel time",
        summary=(f"{len(counted)} GEMM/conv kernels run in fp32 for {ns_brief_text(t)} ({pct(t * overlap, ctx.window_ns):.1f}% "
                 f"of step time; {ns_brief_text(t32)} on the FMA pipes, {ns_brief_text(ttf)} as TF32){_mostly_in(ctx, counted)}"),
        recommendation=(f"Wrap the forward pass and loss in torch.autocast('cuda', dtype=torch.{dtype})"
                        f"{'' if ampere else ' with torch.amp.GradScaler'}"
                        + ("; if you must stay in fp32, at least enable TF32 for matmuls with "
                           "torch.set_float32_matmul_precision('high')." if ampere and t32 else ".")),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"fp32 non-tensor-core kernels: time × (1 − 1/{s:.1f}), the {target}/fp32 peak ratio ({src})"
                       + (f"; TF32 kernels: time × (1 − 1/{s_tf:.1f}), the {target}/tf32 peak ratio ({src_tf})"
                          if no_amp and ttf and ampere else "")
                       + ". An upper bound reached by compute-bound GEMMs (memory-bound ones gain less), realised in "
                         "step time only while the GPU is the bottleneck."
                       + (f" With Nsight Compute counters, {floored} of the kernels are held at the time to move half "
                          "their measured DRAM bytes at the datasheet bandwidth." if floored else "")
                       + overlap_words),
        evidence={"fp32_kernel_us": us(t32), "tf32_kernel_us": us(ttf), "half_kernel_us": us(thalf),
                  "pct_of_kernel_time": round(share, 2), "pct_of_step": round(pct(t * overlap, ctx.window_ns), 2),
                  **ctx.overlap_evidence(overlap), **({"memory_floored_kernels": floored} if floored else {}),
                  "kernels": len(counted), "amp_in_use": not no_amp, "assumed_speedup_fp32": round(s, 2),
                  "assumed_speedup_tf32": round(s_tf, 2) if ampere else None,
                  "device": ctx.spec.name if ctx.spec else None},
        top=_offenders(ctx, counted),
    )


def _measured_unaligned(ctx: Context, unaligned: list[KernelRow]) -> tuple[dict[str, float], float | None, str]:
    """Measured speedups for unaligned tensor-core kernels, from the Nsight Compute counters of the run: the
    time-weighted FLOP rate of the *aligned* tensor-core GEMMs of the same precision (plain GEMMs, not attention)
    over each unaligned kernel's own rate. ({short name: speedup}, the aligned rate, words) — empty without
    counters or without an aligned GEMM to compare with."""
    roof = ctx.doc.get("roofline") if isinstance(ctx.doc.get("roofline"), dict) else None
    measured = [k for k in (roof or {}).get("kernels", []) if isinstance(k, dict)
                and (k.get("achieved_flops_per_s") or 0) > 0 and k.get("total_us")]
    if not measured or not unaligned:
        return {}, None, ""
    by_short = {k.get("short_name", ""): k for k in measured}
    precs = {f"tensor_{_precision(r)}" for r in unaligned}
    ref = [k for k in measured if k.get("dominant_precision") in precs and k.get("short_name") not in
           {r.short_name for r in unaligned} and _MMA.search(k.get("name", "")) and not _NOT_MMA.search(k.get("name", ""))
           and not _ATTENTION.search(k.get("name", "")) and not _UNALIGNED_16BIT.search(k.get("name", ""))]
    t_ref = sum(float(k["total_us"]) for k in ref)
    if not ref or t_ref <= 0:
        return {}, None, ""
    rate = sum(float(k["achieved_flops_per_s"]) * float(k["total_us"]) for k in ref) / t_ref
    out = {}
    for r in unaligned:
        k = by_short.get(r.short_name)
        if k is not None:
            out[r.short_name] = min(max(rate / float(k["achieved_flops_per_s"]), 1.0), MAX_MEASURED_UNALIGNED_SPEEDUP)
    words = (f"measured with Nsight Compute: the {len(ref)} aligned tensor-core GEMMs of this run reach "
             f"{rate / 1e12:.0f} TFLOP/s (time-weighted)")
    return out, rate, words


@rule("tensor-cores-unused", group="precision", nvidia_only=True)
def tensor_cores_unused(ctx: Context) -> Finding | None:
    """Half-precision matrix work that misses the fast tensor-core path.

    Pattern: fp16/bf16 GEMM/conv kernels without tensor-core instructions, or running the unaligned
    (``align1``/``align2``) tensor-core kernels that libraries fall back to when a dimension is not a multiple of
    8 (a vocabulary of 50257, odd hidden sizes, channel counts like 3 or 17).
    Algorithm: their kernel time ≥ ``TC_UNUSED_MIN_KERNEL_PCT`` of kernel time.
    Fix: pad the offending dimensions to multiples of 8 (64 is better): vocabulary, hidden and FFN sizes,
    channels, sequence length; keep batch × sequence a multiple of 8.
    """
    if ctx.compute_major is not None and ctx.compute_major < 7:
        return None
    half = [r for r in ctx.kernels if _is_mma_work(r) and _precision(r) in ("fp16", "bf16")]
    no_tc = [r for r in half if not r.tensor_core]
    unaligned = [r for r in half if r.tensor_core and _UNALIGNED_16BIT.search(r.name)]
    t_no, t_un = (sum(ctx.in_window_ns(r.rows) for r in rs) for rs in (no_tc, unaligned))
    if not ctx.kernel_ns or pct(t_no + t_un, ctx.kernel_ns) < TC_UNUSED_MIN_KERNEL_PCT:
        return None
    s_no, src = _speedup(ctx, "bf16", "fp32")
    s_no /= 2.0  # non-tensor half math runs at 2x the fp32 rate (packed HFMA2)
    s_no = max(s_no, 1.0)
    speedups, aligned_rate, measured_words = _measured_unaligned(ctx, unaligned)
    gain = _gain_ns(ctx, no_tc, s_no) + sum(
        _gain_ns(ctx, [r], speedups.get(r.short_name, UNALIGNED_SPEEDUP)) for r in unaligned)
    gain, overlap, overlap_words = _on_the_wall(ctx, no_tc + unaligned, gain)
    share = pct(t_no + t_un, ctx.kernel_ns)
    if speedups:
        lo, hi = min(speedups.values()), max(speedups.values())
        span = f"{lo:.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}–{hi:.1f}"
        how_unaligned = (f"Unaligned tensor-core kernels: time × (1 − 1/s), s = {span}, the aligned GEMMs' "
                         f"FLOP rate over each unaligned kernel's ({measured_words}; capped at "
                         f"{MAX_MEASURED_UNALIGNED_SPEEDUP:g}×; {UNALIGNED_SPEEDUP:g}× assumed for any without "
                         "counters)")
    else:
        how_unaligned = (f"Unaligned tensor-core kernels: time × (1 − 1/{UNALIGNED_SPEEDUP:g}) (assumed; padding "
                         "GPT-2's vocabulary to a multiple of 64 gave nanoGPT ~25% end to end)")
    parts = []
    if no_tc:
        parts.append(f"{len(no_tc)} fp16/bf16 kernels without tensor cores ({ns_brief_text(t_no)})")
    if unaligned:
        parts.append(f"{len(unaligned)} unaligned tensor-core kernels ({ns_brief_text(t_un)})")
    return Finding(
        id="tensor-cores-unused",
        title=f"Half-precision GEMMs off the fast tensor-core path: {share:.0f}% of GPU kernel time",
        summary=f"{' and '.join(parts)}{_mostly_in(ctx, no_tc + unaligned)}",
        recommendation=("Make GEMM/conv dimensions multiples of 8 (better 64): pad the vocabulary (50257 → 50304), "
                        "hidden/FFN sizes and channel counts, and keep batch × sequence length a multiple of 8."),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"{how_unaligned}; kernels without tensor "
                       f"cores: time × (1 − 1/{s_no:.1f}), the bf16 tensor-core peak over the packed-half FMA rate "
                       f"(2× fp32; {src})." + overlap_words),
        evidence={"no_tensor_core_us": us(t_no), "unaligned_us": us(t_un), "pct_of_kernel_time": round(share, 2),
                  "pct_of_step": round(pct((t_no + t_un) * overlap, ctx.window_ns), 2), **ctx.overlap_evidence(overlap),
                  **({"aligned_gemm_tflops": round(aligned_rate / 1e12, 1),
                      "unaligned_speedups": {k: round(v, 2) for k, v in sorted(speedups.items())}}
                     if speedups and aligned_rate else {})},
        top=_offenders(ctx, no_tc + unaligned),
    )


@rule("fp64-used", group="precision")
def fp64_used(ctx: Context) -> Finding | None:
    """Double-precision kernels in a deep-learning step.

    Pattern: kernels whose names show fp64 (``double``, ``dgemm``, ``f64``, ``dmma``) — usually a model or an
    input created with ``dtype=torch.float64`` (NumPy arrays default to float64 and ``torch.from_numpy`` keeps it).
    Algorithm: their kernel time ≥ ``FP64_MIN_KERNEL_PCT`` of kernel time.
    Fix: ``model.float()``, ``torch.from_numpy(x).float()``, ``torch.set_default_dtype(torch.float32)``.
    """
    rows = [r for r in ctx.kernels if _precision(r) == "fp64"]
    t = sum(ctx.in_window_ns(r.rows) for r in rows)
    if not ctx.kernel_ns or pct(t, ctx.kernel_ns) < FP64_MIN_KERNEL_PCT:
        return None
    mma = [r for r in rows if _is_mma_work(r)]
    other = [r for r in rows if not _is_mma_work(r)]
    if ctx.spec is not None and ctx.spec.tflops.get("fp64_tensor"):
        s_mma, src = _speedup(ctx, "tf32", "fp64_tensor")
    elif ctx.spec is not None and ctx.spec.tflops.get("fp64"):
        s_mma, src = _speedup(ctx, "fp32", "fp64")
    else:
        s_mma, src = FP64_ELEMENTWISE_SPEEDUP, "device not in the spec table: assumed 2× (half the bytes)"
    s_mma = max(s_mma, FP64_ELEMENTWISE_SPEEDUP)
    gain = _gain_ns(ctx, mma, s_mma) + _gain_ns(ctx, other, FP64_ELEMENTWISE_SPEEDUP)
    gain, overlap, overlap_words = _on_the_wall(ctx, rows, gain)
    share = pct(t, ctx.kernel_ns)
    return Finding(
        id="fp64-used",
        title=f"Double precision (fp64) kernels: {share:.0f}% of GPU kernel time",
        summary=(f"{len(rows)} fp64 kernels run for {ns_brief_text(t)} ({pct(t * overlap, ctx.window_ns):.1f}% of step time)"
                 f"{_mostly_in(ctx, rows)}"),
        recommendation=("Train in fp32 or lower: model.float(), convert inputs with .float() (NumPy arrays are "
                        "float64 and torch.from_numpy keeps that), or torch.set_default_dtype(torch.float32)."),
        est_gain_pct=pct(gain, ctx.window_ns),
        how_estimated=(f"fp64 GEMMs: time × (1 − 1/{s_mma:.1f}) ({src}); other fp64 kernels: time × "
                       f"(1 − 1/{FP64_ELEMENTWISE_SPEEDUP:g}) (memory-bound: fp32 halves their bytes)." + overlap_words),
        evidence={"fp64_kernel_us": us(t), "pct_of_kernel_time": round(share, 2), **ctx.overlap_evidence(overlap),
                  "pct_of_step": round(pct(t * overlap, ctx.window_ns), 2), "gemm_us": us(sum(ctx.in_window_ns(r.rows)
                                                                                    for r in mma))},
        top=_offenders(ctx, rows),
    )
