"""Bound classes, FLOPs, intensity, roofline and aggregation; the join of ncu rows onto a real Kineto step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import step_kernels_profile
from dnnprof.analysis import bounds as B
from dnnprof.analysis.counters_join import (
    join_counters,
    kernel_base_name,
    kernel_name_words,
    match_counters,
    ncu_launch_rows,
    profile_bounds,
)
from dnnprof.ingest.ncu_csv import read_ncu_csv
from dnnprof.model.gpu_specs import lookup_gpu
from dnnprof.model.profile import Profile

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h200"
NAN = np.nan


# --- the SOL rule ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("sm", "mem", "waves", "expect"), [
    (98.7, 0.3, 10, "high-throughput"),  # ncu: FMA loop -> "utilizing greater than 80.0%"
    (43.3, 66.7, 3, "memory"),  # ncu: saxpy -> "Memory is more heavily utilized than Compute"
    (80.0, 10.0, 1, "high-throughput"),  # the 80 % threshold is inclusive
    (79.9, 79.9, 1, "balanced"),
    (70.0, 60.5, 1, "balanced"),  # 9.5 points apart
    (70.0, 60.0, 1, "compute"),  # exactly 10 points apart
    (60.0, 50.0, 1, "compute"),  # SM at 60 is not latency-bound
    (59.9, 59.9, 4.0, "latency"),
    (30.0, 20.0, 0.5, "small-grid"),
    (30.0, 20.0, NAN, "latency"),  # unknown waves: the rule reports a latency issue
    (NAN, 20.0, 1, ""),
    (20.0, NAN, 1, ""),
])
def test_sol_bound(sm: float, mem: float, waves: float, expect: str) -> None:
    assert B.sol_bound(np.array([sm]), np.array([mem]), np.array([waves]))[0] == expect


def test_sol_bound_thresholds_are_named_constants() -> None:
    assert (B.NO_BOUND_THRESHOLD_PCT, B.LATENCY_BOUND_THRESHOLD_PCT, B.BALANCED_THRESHOLD_PCT, B.WAVES_THRESHOLD) == \
        (80.0, 60.0, 10.0, 1.0)
    assert set(B.sol_bound(np.array([90, 50, 50, 70, 70, 30]), np.array([0, 50, 50, 10, 75, 70]),
                           np.array([1, 0.2, 2, 1, 1, 1]))) == set(B.BOUND_CLASSES)


# --- FLOPs and bytes -------------------------------------------------------------------------------------------
def test_flops_from_sum_counters() -> None:
    m = {
        B.M_DURATION: np.array([1e6, 2e6]),
        "dram__bytes.sum": np.array([1e6, 0.0]),
        "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": np.array([1.0, 0]),
        "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum": np.array([2.0, 0]),
        "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": np.array([3.0, 0]),
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": np.array([10.0, 5]),
        "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": np.array([1.0, 0]),
        "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum": np.array([1.0, 0]),
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum": np.array([1e9, 0]),
        "sm__ops_path_tensor_src_fp8_sparsity_off.sum": np.array([0, 4e9]),
        "sm__ops_path_tensor_src_int8.sum": np.array([7e9, 0]),
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum": np.array([1e9, 0]),  # not added again
        "sm__inst_executed_pipe_tensor_op_hmma.sum": np.array([5.0, NAN]),
    }
    b = B.compute_bounds(m)
    assert b.flops_by_precision["fp64"].tolist() == [1 + 2 + 2 * 3, 0]
    assert b.flops_by_precision["fp32"].tolist() == [20, 10]
    assert b.flops_by_precision["fp16"].tolist() == [4 + 2, 0]  # packed half: hfma x4, hadd x2
    assert b.flops_by_precision["tensor_bf16"].tolist() == [1e9, 0]
    assert b.flops_by_precision["tensor_fp8"].tolist() == [0, 4e9]
    assert b.tensor_int_ops.tolist() == [7e9, 0]  # integer ops stay out of FLOPs
    assert b.flops.tolist() == [9 + 20 + 6 + 1e9, 10 + 4e9]
    assert b.arithmetic_intensity[0] == pytest.approx(b.flops[0] / 1e6) and np.isnan(b.arithmetic_intensity[1])
    assert b.flops_per_s[1] == pytest.approx((10 + 4e9) / 2e-3)
    assert b.tensor_inst[0] == 5.0


def test_dram_bytes_fallbacks() -> None:
    rw = B.compute_bounds({B.M_DURATION: np.array([1000.0]), "dram__bytes_read.sum": np.array([3.0]),
                           "dram__bytes_write.sum": np.array([4.0])})
    assert rw.dram_bytes.tolist() == [7.0]
    rate = B.compute_bounds({B.M_DURATION: np.array([2000.0]), "dram__bytes.sum.per_second": np.array([5e9])})
    assert rate.dram_bytes.tolist() == [pytest.approx(1e4)]
    none = B.compute_bounds({B.M_DURATION: np.array([1.0])})
    assert np.isnan(none.dram_bytes).all() and np.isnan(none.flops).all() and none.bound.tolist() == [""]


def test_bounds_on_the_real_h200_capture() -> None:
    """Rates-only counters (the roofline sections): FLOPs = rate x clock x duration, as ncu's chart computes."""
    t = read_ncu_csv(DATA / "ncu_raw.csv")
    b = B.compute_bounds(t.metrics)
    dur_s = t.metric(B.M_DURATION) * 1e-9
    clk = t.metric(B.M_SMSP_CLOCK)
    rate = {op: t.metric(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed")
            for op in ("fadd", "fmul", "ffma")}
    np.testing.assert_allclose(b.flops_by_precision["fp32"],
                               (rate["fadd"] + rate["fmul"] + 2 * rate["ffma"]) * clk * dur_s, rtol=1e-12)
    np.testing.assert_allclose(b.dram_bytes, t.metric("dram__bytes.sum.per_second") * dur_s, rtol=1e-12)
    qkv = next(i for i, n in enumerate(t.kernel_name) if n.startswith("nvjet_sm90_tst_192x192"))
    # QKV projection of 8 x 512 tokens: 2 x 4096 x 768 x 2304 FLOP (+ tile padding)
    assert b.flops_by_precision["tensor_bf16"][qkv] == pytest.approx(2 * 4096 * 768 * 2304, rel=0.04)
    assert b.arithmetic_intensity[qkv] > 500 and b.flops_per_s[qkv] > 4e14
    lm_head = next(i for i, n in enumerate(t.kernel_name) if "cutlass_75_tensorop" in n)
    assert b.flops[lm_head] == pytest.approx(2 * 4096 * 768 * 50257, rel=0.01)
    assert (b.bound == "").all()  # these sections do not collect SM%/Memory% — no verdict is invented
    row = b.row(qkv)
    assert set(row) >= {"achieved_occupancy_pct", "sm_throughput_pct", "memory_throughput_pct", "dram_bytes",
                        "flops", "arithmetic_intensity", "bound"}
    assert row["bound"] is None and row["sm_throughput_pct"] is None and row["flops"] > 0  # type: ignore[operator]


# --- roofline --------------------------------------------------------------------------------------------------
def test_ceilings_from_ncu_use_dense_tensor_peaks() -> None:
    t = read_ncu_csv(DATA / "ncu_raw.csv")
    c = B.device_ceilings(t.metrics)
    clk = float(np.median(t.metric(B.M_SM_CLOCK)))
    assert c.peak_flops_per_s["fp32"] == pytest.approx(16_896 * 2 * clk)
    assert c.peak_flops_per_s["fp64"] == pytest.approx(8_448 * 2 * clk)
    assert c.peak_flops_per_s["tensor_bf16"] == pytest.approx(540_672 * clk)  # not the sparse 1,081,344
    assert c.peak_flops_per_s["tensor_tf32"] == pytest.approx(270_336 * clk)
    assert c.peak_flops_per_s["tensor_fp64"] == pytest.approx(33_792 * clk)
    assert c.dram_bytes_per_s == pytest.approx(1504 * float(np.median(t.metric(B.M_DRAM_CLOCK))))
    assert set(c.source.values()) == {"ncu"}
    assert c.ridge_point("tensor_bf16") == pytest.approx(c.peak_flops_per_s["tensor_bf16"] / c.dram_bytes_per_s)


def test_ceilings_from_the_spec_fill_gaps() -> None:
    spec = lookup_gpu("NVIDIA H100 80GB HBM3")
    c = B.device_ceilings(None, spec)
    assert c.peak_flops_per_s["tensor_bf16"] == pytest.approx(989.4e12)
    assert c.peak_flops_per_s["fp32"] == pytest.approx(66.9e12) and "fp16" not in c.peak_flops_per_s
    assert c.dram_bytes_per_s == pytest.approx(3.35e12) and c.source["dram"] == "spec:H100 SXM5 80GB"
    mixed = B.device_ceilings({B.M_SM_CLOCK: np.array([1.9e9]),
                               "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": np.array([16896.0])},
                              spec)
    assert mixed.source["fp32"] == "ncu" and mixed.source["tensor_bf16"].startswith("spec:")
    assert B.device_ceilings().peak_flops_per_s == {} and B.device_ceilings().ridge_point("fp32") is None


def test_roofline_points() -> None:
    b = B.compute_bounds({
        B.M_DURATION: np.array([1e6, 1e6, 1e6]),
        "dram__bytes.sum": np.array([1e9, 1e6, 1e6]),
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": np.array([5e8, 0, 0]),
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum": np.array([0, 5e11, 0]),
    })
    c = B.Ceilings({"fp32": 60e12, "tensor_bf16": 1000e12}, 4e12)
    r = B.roofline_points(b, c)
    assert r.precision.tolist() == ["fp32", "tensor_bf16", ""]
    assert r.roof_flops_per_s[0] == pytest.approx(1.0 * 4e12)  # AI 1 FLOP/B: memory roof
    assert r.roof_flops_per_s[1] == pytest.approx(1000e12)  # AI 5e5: compute roof
    assert r.pct_of_roof[0] == pytest.approx(100 * 1e12 / 4e12) and r.pct_of_roof[1] == pytest.approx(50.0)
    assert np.isnan(r.roof_flops_per_s[2])


def test_aggregate_bounds_is_time_weighted() -> None:
    b = B.compute_bounds({
        B.M_DURATION: np.array([100.0, 300.0, 50.0]),
        B.M_SM_PCT: np.array([90.0, 10.0, 40.0]), B.M_MEM_PCT: np.array([10.0, 90.0, 20.0]),
        B.M_ACHIEVED_OCC: np.array([20.0, 60.0, NAN]), B.M_WAVES: np.array([4.0, 0.5, 2.0]),
        "dram__bytes.sum": np.array([10.0, 30.0, 5.0]),
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": np.array([100.0, 0.0, 50.0]),
    })
    groups = B.aggregate_bounds(b, ["gemm", "gemm", "norm"])
    assert [g.key for g in groups] == ["gemm", "norm"]
    g = groups[0]
    assert (g.launches, g.duration_ns, g.dram_bytes, g.flops) == (2, 400.0, 40.0, 100.0)
    assert g.sm_throughput_pct == pytest.approx((90 * 100 + 10 * 300) / 400)
    assert g.memory_throughput_pct == pytest.approx((10 * 100 + 90 * 300) / 400)  # 70 %, SM 30 %
    assert g.achieved_occupancy_pct == pytest.approx((20 * 100 + 60 * 300) / 400)
    assert g.bound == "memory" and g.arithmetic_intensity == pytest.approx(2.5)
    assert groups[1].achieved_occupancy_pct != groups[1].achieved_occupancy_pct  # all NaN -> NaN
    assert groups[1].bound == "latency"
    weighted = B.aggregate_bounds(b, ["a", "a", "a"], weights_ns=np.array([1.0, 0.0, 0.0]))
    assert weighted[0].sm_throughput_pct == pytest.approx(90.0)
    with pytest.raises(ValueError, match="keys"):
        B.aggregate_bounds(b, ["x"])


# --- the join --------------------------------------------------------------------------------------------------
def _kineto_step() -> Profile:
    """The real GPT-2 124M training step (H200, Kineto) as a profile with only a kernels table."""
    p = step_kernels_profile(DATA / "kineto_step4_kernels.json", 4)
    p.tables["kernels"]["device"][:] = 0
    return p


def test_names_from_both_tools_normalise_alike() -> None:
    kineto = "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, bool)"
    ncu = "void native::vectorized_gather_kernel<16, long>(char *, char *, T2 *, int, long, long, long, bool)"
    assert kernel_base_name(kineto) == kernel_base_name(ncu) == "vectorized_gather_kernel"
    assert kernel_name_words(kineto) == kernel_name_words(ncu)
    k2 = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>"
          "(int, float, float const*)")
    n2 = "void native::<unnamed>::vectorized_layer_norm_kernel<float, float, 0>(int, T2, const T1 *)"
    assert kernel_base_name(k2) == kernel_base_name(n2) and kernel_name_words(k2) == kernel_name_words(n2)
    assert kernel_base_name("at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long*, long*)") == "unpack_cudnn"
    assert kernel_base_name("nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNN") == \
        "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNN"


def test_join_onto_a_real_step() -> None:
    p = _kineto_step()
    t = read_ncu_csv(DATA / "ncu_raw.csv")  # 41 launches of a 4-layer GPT-2 forward + optimizer on the same GPU
    j = join_counters(p, t)
    assert not p.self_check()
    k = p.tables["kernels"]
    names = p.names(k["name_id"])
    matched = j.group_of_kernel >= 0
    qkv = np.asarray([n.startswith("nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNN") for n in names])
    assert qkv.sum() == 12 and matched[qkv].all()  # the QKV GEMM of all 12 layers, from one ncu launch
    bwd = np.asarray(["backward" in n.lower() or "bprop" in n for n in names])
    assert bwd.any() and not matched[bwd].any()  # ncu saw no backward kernels: none may be claimed
    tanh_bwd = np.asarray(["tanh_backward" in n for n in names])
    assert tanh_bwd.any() and not matched[tanh_bwd].any()  # same launcher and grid as tanh, different functor
    assert j.total_kernels == len(names) and j.matched_kernels == int(matched.sum())
    assert j.covered_ns == int(k["dur_ns"][matched].sum()) and 0.2 < j.coverage < 0.9
    assert "of GPU kernel time" in j.message
    c = p.tables["counters"]
    assert (c["kernel_row"] >= -1).all() and set(np.unique(c["kernel_row"][c["kernel_row"] >= 0])) == \
        set(np.flatnonzero(matched).tolist())
    # every QKV launch carries the mean of the two ncu launches of that signature
    rows, b = profile_bounds(p)
    first_qkv = int(np.flatnonzero(qkv)[0])
    ncu_qkv = [i for i, n in enumerate(t.kernel_name) if n.startswith("nvjet_sm90_tst_192x192")]
    assert len(ncu_qkv) == 2
    ref = B.compute_bounds({m: np.array([np.nanmean(v[ncu_qkv])]) for m, v in t.metrics.items()
                            if np.isfinite(v[ncu_qkv]).any()})
    i = int(np.searchsorted(rows, first_qkv))
    assert rows[i] == first_qkv
    assert b.flops[i] == pytest.approx(ref.flops[0]) and b.dram_bytes[i] == pytest.approx(ref.dram_bytes[0])
    unit = p.name(int(c["unit_id"][c["metric_id"] == p.string_id("gpu__time_duration.sum")][0]))
    assert unit == "ns"


def test_join_averages_repeated_launches_and_keeps_unmatched_rows() -> None:
    p = _kineto_step()
    t = read_ncu_csv(DATA / "ncu_raw.csv")
    j = match_counters(p, t)
    sizes = {len(g) for g in j.groups}
    assert max(sizes) >= 2  # some signatures were profiled more than once (the 4 layers)
    assert len(j.unmatched_ncu_rows) >= 1  # e.g. the optimizer chunk of the 4-layer model's parameter count
    join_counters(p, t)
    c = p.tables["counters"]
    assert (c["kernel_row"] == -1).any()


def test_unknown_registers_match_any_and_steps_restrict() -> None:
    p = _kineto_step()
    t = read_ncu_csv(DATA / "ncu_raw.csv")
    full = match_counters(p, t)
    p.tables["kernels"]["registers_per_thread"][:] = -1
    wild = match_counters(p, t)
    assert wild.matched_kernels == full.matched_kernels
    none = match_counters(p, t, steps=[99])
    assert none.total_kernels == 0 and none.coverage == 0.0


def test_profile_without_counters() -> None:
    rows, b = profile_bounds(Profile())
    assert len(rows) == 0 and len(b) == 0


def test_ncu_csv_on_its_own_gives_a_per_kernel_table() -> None:
    t = read_ncu_csv(DATA / "ncu_raw.csv")
    rows = ncu_launch_rows(t)
    assert len(rows) == len(t) and rows[0]["kernel_name"].startswith("void cutlass::Kernel2")  # the LM head
    assert rows[0]["duration_ns"] == 3_354_720.0 and rows[0]["grid"] == [256, 50, 1]
    assert rows[0]["registers_per_thread"] == 254 and rows[0]["shared_memory_bytes"] == 32_768
    durations = [r["duration_ns"] for r in rows]
    assert durations == sorted(durations, reverse=True)
    json.dumps(rows)  # plain data, ready for the summary JSON
