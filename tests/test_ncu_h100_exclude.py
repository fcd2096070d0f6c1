"""dnnprof's default selective pass on an H100 (tests/data/ncu_gpt2_h100_exclude): exclude filter, one launch per
kernel and launch configuration, every metric; joined back onto the Kineto launches of the same program."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import step_kernels_profile
from dnnprof.analysis.bounds import compute_bounds
from dnnprof.analysis.counters_join import join_counters
from dnnprof.collect import ncu as N
from dnnprof.ingest.ncu_csv import read_ncu
from dnnprof.model.profile import Profile

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h100_exclude"
STEP = 3


def _profile() -> Profile:
    """The step's launches as Kineto recorded them (columns/rows/names, as the benchmark writes them)."""
    return step_kernels_profile(DATA / "kernels_step3.json.gz", STEP)


def test_cuBLAS_and_cuDNN_kernels_get_counters() -> None:
    """The include filter never profiled these (nvjet …coopA/B…, cuDNN SDPA); the exclude filter does."""
    t = read_ncu(DATA / "ncu_sel_first-per-config.csv.gz")
    assert len(t) == 71
    names = {str(n) for n in t.kernel_name}
    assert any("coopA" in n for n in names) and any("coopB" in n for n in names)
    assert any("sdpa_sm90_flash_fprop" in n for n in names) and any("sdpa_sm90_flash_bprop" in n for n in names)
    p = _profile()
    j = join_counters(p, t, steps=[STEP])
    assert 0.94 <= j.coverage <= 0.95  # 94.55%: one predicted cuBLAS launch was skipped by ncu (see PRUNE_MARGIN)
    assert j.matched_kernels > 300 and len(j.unmatched_ncu_rows) <= 1
    b = compute_bounds(t.metrics)
    assert {"tensor_bf16", "fp32"} <= set(b.flops_by_precision)
    assert (b.bound != "").all()


def test_the_plan_lets_every_profiled_kernel_through() -> None:
    """Python's reading of the exclude regex agrees with ncu's: every kernel ncu profiled passes today's plan."""
    p = _profile()
    seq = N.LaunchSequence.from_profile(p, step=STEP)
    plan = N.plan_filters(seq, N.select_signatures(seq))
    assert plan.strategy == "first-per-config" and plan.mode == "exclude"
    assert plan.predicted_coverage >= 0.95 + N.PRUNE_MARGIN and len(plan.profiled) <= 75
    rx = re.compile(plan.kernel_regex)
    t = read_ncu(DATA / "ncu_sel_first-per-config.csv.gz")
    assert all(rx.search(str(n)) for n in t.kernel_name)
