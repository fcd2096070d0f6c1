"""What a GPU's live numbers mean, in words: ``dnnprof monitor``'s one line per GPU.

The rules are data (:data:`RULES`): each has a stable id, the conditions it needs (metric, comparison,
threshold; thresholds are the named constants below) and the words it says. The first rule whose conditions
all hold wins; a rule that needs a metric the GPU does not give (GPM before Hopper) is skipped, so a GPU without
GPM gets only the rules plain NVML can support.

Why these rules: NVML's GPU-Util is the share of time *any* kernel ran — one spinning 32-thread block reads
100 % — while GPM's SM active is the share of SMs busy (measured on an H200: a one-block spin reads GPU-Util
100 %, SM active 0.76 %; a bf16 GEMM 99 % / 95.6 % with 14 % occupancy and 93 % tensor activity). Low occupancy
with busy tensor cores is therefore not a defect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: GPU-Util below this: nothing runs.
IDLE_GPU_UTIL_PCT = 5.0
#: GPU-Util at least this while SM active is below :data:`FEW_SMS_PCT`: busy time on a few SMs.
BUSY_GPU_UTIL_PCT = 50.0
FEW_SMS_PCT = 25.0
#: Tensor pipes at least this busy: the matmuls run on tensor cores.
TENSOR_BUSY_PCT = 40.0
#: DRAM bandwidth at least this share of peak: memory-bound.
DRAM_BUSY_PCT = 60.0
#: FP32 pipe this busy while tensor cores are nearly idle (:data:`TENSOR_IDLE_PCT`): FP32 math.
FP32_BUSY_PCT = 30.0
TENSOR_IDLE_PCT = 5.0
#: GPU-Util below this (but above idle): kernels leave gaps.
GAPPY_GPU_UTIL_PCT = 80.0
#: SMs this active but every pipe and DRAM under :data:`PIPES_LIGHT_PCT`: latency-bound.
SMS_BUSY_PCT = 60.0
PIPES_LIGHT_PCT = 30.0
#: Clock reasons that mean the GPU is held below its clocks (not "idle" or application settings).
SLOWDOWN_REASONS = ("power cap", "hw slowdown", "sw thermal", "hw thermal", "power brake")


@dataclass(frozen=True)
class LiveRule:
    """One meaning: ``when`` is ``(metric, ">=" | "<", threshold)`` conditions that must all hold."""

    id: str
    when: tuple[tuple[str, str, float], ...]
    words: str


RULES: tuple[LiveRule, ...] = (
    LiveRule("idle", (("gpu_util_pct", "<", IDLE_GPU_UTIL_PCT),), "idle: no kernel is running"),
    LiveRule("few_sms_busy", (("gpu_util_pct", ">=", BUSY_GPU_UTIL_PCT), ("sm_active_pct", "<", FEW_SMS_PCT)),
             "busy but mostly idle SMs: small kernels or one-block spins"),
    LiveRule("tensor_busy", (("tensor_active_pct", ">=", TENSOR_BUSY_PCT),),
             "tensor cores busy: matmul-bound, good use (low occupancy is normal here)"),
    LiveRule("dram_bound", (("dram_bw_util_pct", ">=", DRAM_BUSY_PCT),),
             "memory-bandwidth bound: DRAM busy, math light (fuse element-wise ops, fewer passes over memory)"),
    LiveRule("fp32_no_tensor", (("fp32_active_pct", ">=", FP32_BUSY_PCT), ("tensor_active_pct", "<", TENSOR_IDLE_PCT)),
             "FP32 math without tensor cores: try bf16 autocast or TF32"),
    LiveRule("gaps", (("gpu_util_pct", "<", GAPPY_GPU_UTIL_PCT),),
             "GPU waits between kernels: input pipeline, CPU launch overhead or syncs"),
    LiveRule("latency_bound", (("sm_active_pct", ">=", SMS_BUSY_PCT), ("tensor_active_pct", "<", PIPES_LIGHT_PCT),
                               ("dram_bw_util_pct", "<", PIPES_LIGHT_PCT), ("fp32_active_pct", "<", PIPES_LIGHT_PCT),
                               ("fp16_active_pct", "<", PIPES_LIGHT_PCT)),
             "SMs busy but pipes and DRAM light: latency-bound kernels (memory latency, syncs, little work per thread)"),
    LiveRule("busy", (("sm_active_pct", ">=", FEW_SMS_PCT),), "SMs busy"),
    LiveRule("busy_no_gpm", (("gpu_util_pct", ">=", GAPPY_GPU_UTIL_PCT),),
             "a kernel runs most of the time; without GPM NVML cannot say how much of the GPU it uses"),
)


@dataclass(frozen=True)
class Verdict:
    """The rule that matched, its words, the numbers it read, and clock slow-downs seen."""

    rule_id: str
    words: str
    evidence: dict[str, float]
    slowdowns: tuple[str, ...] = ()


def _holds(v: float, op: str, threshold: float) -> bool:
    if op == ">=":
        return v >= threshold
    if op == "<":
        return v < threshold
    raise ValueError(f"unknown comparison {op!r}")


def verdict(values: Mapping[str, float | None], throttle_reasons: tuple[str, ...] = (),
            rules: tuple[LiveRule, ...] = RULES) -> Verdict | None:
    """The first rule of ``rules`` whose metrics are all present (not None/NaN) and whose conditions hold."""
    slow = tuple(r for r in throttle_reasons if r in SLOWDOWN_REASONS)
    for rule in rules:
        seen: dict[str, float] = {}
        for metric, op, threshold in rule.when:
            v = values.get(metric)
            if v is None or math.isnan(v) or not _holds(v, op, threshold):
                break
            seen[metric] = float(v)
        else:
            return Verdict(rule.id, rule.words, seen, slow)
    return None
