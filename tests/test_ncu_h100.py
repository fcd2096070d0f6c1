"""Real Nsight Compute counters from an H100 (tests/data/ncu_gpt2_h100): bound classes and both CSV pages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dnnprof.cli.counters import ncu_summary
from dnnprof.ingest.ncu_csv import read_ncu

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h100"
RAW = DATA / "ncu_sel_first-per-config.csv.gz"


def _reference_bound(sm: float, mem: float, waves: float) -> str:
    """Nsight Compute's SOLBottleneck rule, written out independently."""
    if sm >= 80 or mem >= 80:
        return "high-throughput"
    if sm < 60 and mem < 60:
        return "small-grid" if waves < 1 else "latency"
    if abs(sm - mem) >= 10:
        return "compute" if sm > mem else "memory"
    return "balanced"


def test_bound_classes_follow_the_sol_rule_on_real_counters() -> None:
    from dnnprof.analysis.bounds import compute_bounds

    t = read_ncu(RAW)
    assert len(t) == 70
    sm = t.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = t.metric("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    waves = t.metric("launch__waves_per_multiprocessor")
    b = compute_bounds(t.metrics)
    for i in range(len(t)):
        assert b.bound[i] == _reference_bound(sm[i], mem[i], waves[i]), t.kernel_name[i]
    classes = set(b.bound.tolist())
    assert {"high-throughput", "memory", "latency"} <= classes


def test_gemm_flops_match_the_problem_size() -> None:
    doc = ncu_summary(RAW)
    lm_head = doc["kernels"][0]
    assert lm_head["short_name"].startswith("cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128")
    # LM head: (8*512) x 768 x 50257 multiply-adds = 2*M*N*K FLOPs (tensor-core ops counted by ncu).
    expected = 2 * 8 * 512 * 768 * 50257
    assert lm_head["flops"] == pytest.approx(expected, rel=0.01)
    assert lm_head["bound"] == "high-throughput"


@pytest.mark.parametrize("name", ["ncu_details_names.csv.gz", "ncu_details_labels.csv.gz"])
def test_details_pages_parse(name: str) -> None:
    t = read_ncu(DATA / name)
    assert len(t) >= 3
    assert np.isfinite(t.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed")).all()
