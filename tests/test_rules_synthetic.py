"""Expert-system rules on SYNTHETIC profiles (built with the model API): edge cases and exact evidence numbers.

Real traces are in test_rules_real.py; these cover what the recorded traces do not contain yet (fp64, data
loading, planted syncs with hand-computable blame, optimizer loops, occupancy, recorded run settings).
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pytest

from dnnprof.analysis.rules import findings_from_analysis, kernels, sync
from dnnprof.analysis.summary import analyse, summary_of
from dnnprof.model.gpu_specs import SPECS
from test_rules_builder import (
    BF16_ADD,
    BF16_GEMM,
    CONV,
    FP32_SGEMM,
    FP64_ADD,
    FP64_GEMM,
    TRITON,
    Synth,
    steps_of,
    transformer_steps,
)

H100 = SPECS["H100 SXM5 80GB"]
CLEAN_FORBID = {"amp-not-used", "host-sync", "pageable-memcpy", "launch-bound", "dataloader-bound", "fp64-used",
                "gpu-idle"}
FP32_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, float>(int)"
PER_PARAM = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, float>(int)"
WINDOW_US = 3 * 10_000 + 9_480  # transformer_steps(4): three 10 ms windows and the last step's own span


def run(s: Synth, steps: list[tuple[float, float]] | None, extra: dict[str, Any] | None = None,
        **build: Any) -> dict[str, dict[str, Any]]:
    a = analyse(s.build(steps, **build))
    doc = summary_of(a)
    doc.update(extra or {})
    return {f["id"]: f for f in findings_from_analysis(a, doc)}


def test_clean_bf16_training_cries_no_wolf() -> None:
    found = run(transformer_steps(), steps_of(4))
    assert not CLEAN_FORBID & set(found), found.keys()
    assert found == {}


@pytest.mark.parametrize("gemm", [FP64_GEMM, "void cutlass::Kernel2<cutlass_80_tensorop_d884gemm_64x64_16x4_nn_align1>"])
def test_fp64_fires_with_datasheet_gain(gemm: str) -> None:
    f = run(transformer_steps(gemm=gemm, elementwise=FP64_ADD), steps_of(4))["fp64-used"]
    ev = f["evidence"]
    assert ev["fp64_kernel_us"] == pytest.approx(4 * 8 * 1100)
    assert ev["gemm_us"] == pytest.approx(4 * 8 * 900)
    s = H100.tflops["tf32"] / H100.tflops["fp64_tensor"]
    want = 100 * (4 * 8 * 900 * (1 - 1 / s) + 4 * 8 * 200 * 0.5) / WINDOW_US
    assert f["est_gain_pct"] == pytest.approx(want, abs=0.05)
    assert f["severity"] == "high"
    assert "amp-not-used" not in run(transformer_steps(gemm=gemm, elementwise=FP64_ADD), steps_of(4))


def test_amp_not_used_gain_uses_bf16_over_fp32_peak() -> None:
    f = run(transformer_steps(gemm=FP32_SGEMM, elementwise=FP32_ADD), steps_of(4))["amp-not-used"]
    s = H100.tflops["bf16"] / H100.tflops["fp32"]
    assert f["evidence"]["fp32_kernel_us"] == pytest.approx(4 * 8 * 900)
    assert f["evidence"]["assumed_speedup_fp32"] == pytest.approx(s, abs=0.01)
    assert f["est_gain_pct"] == pytest.approx(100 * 4 * 8 * 900 * (1 - 1 / s) / WINDOW_US, abs=0.05)
    assert "H100" in f["how_estimated"]


def test_amp_gain_is_floored_by_the_measured_dram_bytes() -> None:
    """With Nsight Compute counters, an fp32 GEMM cannot get faster in bf16 than moving half its measured DRAM
    bytes at the datasheet bandwidth: a kernel whose traffic takes 300 µs of its 900 gains 600 µs, not 839."""
    bw = H100.memory_bandwidth_gb_s * 1e9
    per_launch = 2 * 300e-6 * bw  # half of it takes 300 µs
    doc = {"kernels": [{"name": FP32_SGEMM, "dram_bytes": per_launch}]}
    f = run(transformer_steps(gemm=FP32_SGEMM, elementwise=FP32_ADD), steps_of(4), doc)["amp-not-used"]
    assert f["est_gain_pct"] == pytest.approx(100 * 4 * 8 * 600 / WINDOW_US, abs=0.05)
    assert f["evidence"]["memory_floored_kernels"] == 1 and "half their measured DRAM bytes" in f["how_estimated"]
    # traffic that bf16 moves faster than its math: the peak ratio stands
    doc = {"kernels": [{"name": FP32_SGEMM, "dram_bytes": per_launch / 100}]}
    f = run(transformer_steps(gemm=FP32_SGEMM, elementwise=FP32_ADD), steps_of(4), doc)["amp-not-used"]
    s = H100.tflops["bf16"] / H100.tflops["fp32"]
    assert f["est_gain_pct"] == pytest.approx(100 * 4 * 8 * 900 * (1 - 1 / s) / WINDOW_US, abs=0.05)
    assert "memory_floored_kernels" not in f["evidence"]


def test_kernels_on_parallel_streams_gain_wall_time_not_summed_time() -> None:
    """A bidirectional RNN runs its two directions' fp32 GEMMs at the same time on two streams (the DeepSpeech2
    H200 trace: the amp-not-used kernels' wall time is 0.90 of their summed time). Summed, the kernel time of this
    step is twice the step, and its gain came out as 100 %; as wall time it is what the step can lose."""
    s = Synth()
    step = s.op("ProfilerStep#0", 0, 2_200, category="user_annotation")
    for d in range(2):  # forward and backward direction, 10 GEMMs each, launched together
        for j in range(10):
            o = s.op("aten::mm", 1 + 20 * j + d, 5, parent=step)
            s.kernel(FP32_SGEMM, 100 + 200 * j, 190, launch=3 + 20 * j + d, op=o, grid=(1056, 1, 1))
    f = run(s, [(0, 2_200)])["amp-not-used"]
    ev = f["evidence"]
    sp = H100.tflops["bf16"] / H100.tflops["fp32"]
    window = 9 * 200 + 190
    assert ev["fp32_kernel_us"] == pytest.approx(20 * 190) and ev["overlap_factor"] == pytest.approx(0.5)
    assert ev["pct_of_step"] == pytest.approx(100 * 10 * 190 / window, abs=0.01)
    assert f["est_gain_pct"] == pytest.approx(100 * 10 * 190 * (1 - 1 / sp) / window, abs=0.05)
    assert f["est_gain_pct"] < 100
    assert "scaled by 0.50" in f["how_estimated"]
    # the same GEMMs one after the other: nothing to scale
    serial = run(transformer_steps(gemm=FP32_SGEMM, elementwise=FP32_ADD), steps_of(4))["amp-not-used"]
    assert "overlap_factor" not in serial["evidence"] and "scaled" not in serial["how_estimated"]


def test_tensor_cores_unused_on_unaligned_and_non_tc_half_gemms() -> None:
    unaligned = "void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align2>(Params)"
    no_tc = "void gemmSN_NN_kernel<__half, 256, 4, 2, 8, 4, 4, false>(cublasGemmSmallNParams<__half const>)"
    for name, key in ((unaligned, "unaligned_us"), (no_tc, "no_tensor_core_us")):
        f = run(transformer_steps(gemm=name), steps_of(4))["tensor-cores-unused"]
        assert f["evidence"][key] == pytest.approx(4 * 8 * 900)
    assert "tensor-cores-unused" not in run(transformer_steps(), steps_of(4))


def _dataloader_scene() -> tuple[Synth, list[tuple[float, float]]]:
    s = Synth()
    for i in range(4):
        t0 = i * 10_000
        s.op(f"ProfilerStep#{i}", t0, 10_000, category="user_annotation")
        s.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1, 2_999,
             category="user_annotation")
        for k in range(5):
            s.kernel(BF16_GEMM, t0 + 3_005 + k * 1_000, 1_000, launch=t0 + 3_000 + k * 10)
    return s, [(i * 10_000, (i + 1) * 10_000) for i in range(4)]


def test_dataloader_bound_measures_idle_inside_next() -> None:
    run_extras = {"host_hotspots": {"top_user_lines": [{"file": "/w/data.py", "line": 42, "function": "load",
                                                        "pct": 81.5}]},
                  "samples": {"metrics": {"gpu_util_pct": {"mean": 55.0}, "power_w": {"mean": 300.0}}}}
    found = run(*_dataloader_scene(), run_extras)
    f = found["dataloader-bound"]
    # Gaps between steps run from the previous step's last kernel end (t0 + 8005) to the next first kernel
    # (t0 + 13005); DataLoader.__next__ covers [t0 + 10001, t0 + 13000) of each: 2999 µs, three times.
    window = 3 * 10_000 + 5_000
    assert f["evidence"]["gpu_idle_in_dataloader_us"] == pytest.approx(3 * 2_999)
    assert f["est_gain_pct"] == pytest.approx(100 * 3 * 2_999 / window, abs=0.05)
    assert "gpu-idle" in found  # busy 57%
    assert f["evidence"]["host_hotspots"] == ["data.py:42 (load) 81.5%"]
    assert found["gpu-idle"]["evidence"]["nvml_mean"] == {"gpu_util_pct": 55.0}
    assert "launch-bound" not in found  # long kernels: the host is not launch-bound


def test_long_host_gaps_are_host_work_not_launch_bound() -> None:
    s, steps = _dataloader_scene()
    s.ops = [o for o in s.ops if not o["name"].startswith("enumerate(DataLoader)")]  # a hand-written data pipeline
    found = run(s, steps)
    assert "dataloader-bound" not in found and "launch-bound" not in found
    f = found["gpu-idle"]
    assert f["evidence"]["largest_cause"] == "host_work"
    assert f["evidence"]["idle_by_cause"]["host_work"]["idle_us"] == pytest.approx(3 * 5_000)
    assert f["evidence"]["top"][0]["cause"] == "host_work"


def _item_scene(big: bool = True) -> Synth:
    """Four queued GEMMs, an .item() that waits for them, then the host launches again (short, short, long)."""
    s = Synth()
    s.op("ProfilerStep#0", 0, 6_000, category="user_annotation")
    dur = 1_000 if big else 1
    for k in range(4):
        s.kernel(BF16_GEMM, 5 + k * dur, dur, launch=k)
    end = 5 + 4 * dur
    item = s.op("aten::item", 9, end - 9 + 6)
    dense = s.op("aten::_local_scalar_dense", 9.5, end - 9.5 + 5, parent=item)
    s.copy("DtoH", "pageable", 4, end, 2, call_t=10, call_dur=end - 10 + 5, op=dense)
    t = end + 5
    s.kernel(BF16_ADD, t + 45, 5, launch=t + 40)   # direct gap: end+2 .. t+45
    s.kernel(BF16_ADD, t + 75, 5, launch=t + 70)   # refill gap 25
    s.kernel(BF16_GEMM, t + 105, 1_000, launch=t + 100)  # refill gap 25
    return s


def test_host_sync_blames_direct_and_refill_gaps() -> None:
    s = _item_scene()
    f = run(s, [(0, 6_000)])["host-sync"]
    ev = f["evidence"]
    assert ev["direct_idle_us"] == pytest.approx(48)   # 4007 -> 4055
    assert ev["refill_idle_us"] == pytest.approx(50)   # 4060 -> 4085, 4090 -> 4115
    window = 4115 + 1_000 - 5
    assert f["est_gain_pct"] == pytest.approx(100 * 98 / window, abs=0.05)
    top = f["evidence"]["top"][0]
    assert (top["op"], top["what"]) == ("aten::item", "DtoH copy")
    assert ".item()" in f["recommendation"]


def test_host_sync_refill_is_capped_by_the_wait() -> None:
    # The GPU is already idle when .item() is called: it waits ~7 µs, so it cannot be blamed for later launch gaps
    # beyond that; the direct gap is still its own.
    s = _item_scene(big=False)
    p = s.build([(0, 2_000)])
    a = analyse(p)
    from dnnprof.analysis.rules.context import Context

    tl = Context(a, summary_of(a)).timeline
    (call,) = tl.calls
    assert call.charged_refill_ns <= call.wait_ns
    assert call.owner == "host-sync"


def _pageable_scene(copy_us: float) -> tuple[Synth, list[tuple[float, float]]]:
    s = Synth()
    for i in range(3):
        t0 = i * 20_000
        s.op(f"ProfilerStep#{i}", t0, 20_000, category="user_annotation")
        to = s.op("aten::to", t0 + 10, copy_us + 40)
        cp = s.op("aten::copy_", t0 + 11, copy_us + 30, parent=to)
        s.copy("HtoD", "pageable", 50 << 20, t0 + 20, copy_us, call_t=t0 + 12, call_dur=copy_us + 10, op=cp)
        s.call("cudaStreamSynchronize", t0 + copy_us + 25, 5, op=cp)
        for k in range(8):
            s.kernel(BF16_GEMM, t0 + copy_us + 60 + k * 1_000, 1_000, launch=t0 + copy_us + 55 + k)
    return s, [(i * 20_000, (i + 1) * 20_000) for i in range(3)]


def test_pageable_memcpy_counts_copy_time_and_forced_sync_idle() -> None:
    found = run(*_pageable_scene(5_000))
    f = found["pageable-memcpy"]
    ev = f["evidence"]
    assert ev["copies"] == 3
    assert ev["bytes"] == 3 * (50 << 20)
    assert ev["gpu_copy_us"] == pytest.approx(15_000)
    # After each copy the GPU idles from copy end (t0+5020) to the first kernel (t0+5060): blamed on the copy.
    assert ev["gpu_idle_caused_us"] == pytest.approx(3 * 40)
    assert f["evidence"]["top"][0]["op"] == "aten::to"
    assert "host-sync" not in found  # the sync belongs to the pageable copy


def test_pageable_memcpy_quiet_below_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "pageable-memcpy" not in run(*_pageable_scene(20))
    monkeypatch.setattr(sync, "PAGEABLE_MIN_PCT", 0.01)
    assert "pageable-memcpy" in run(*_pageable_scene(20))


def _tiny_kernels(n: int = 200, op_name: str = "aten::addmm", optimizer: bool = False) -> Synth:
    s = Synth()
    s.op("ProfilerStep#0", 0, 20 * n + 100, category="user_annotation")
    parent = s.op("Optimizer.step#AdamW.step", 1, 20 * n + 50, category="user_annotation") if optimizer else -1
    for k in range(n):
        o = s.op(op_name, 2 + 20 * k, 10, parent=parent)
        s.kernel(PER_PARAM if optimizer else FP32_ADD, 10 + 20 * k, 3, launch=5 + 20 * k, op=o)
    return s


def test_launch_bound_on_tiny_kernels() -> None:
    found = run(_tiny_kernels(), [(0, 20 * 200 + 100)])
    f = found["launch-bound"]
    assert f["evidence"]["median_kernel_us"] == pytest.approx(3)
    assert f["evidence"]["short_kernel_share"] == 1.0
    assert f["evidence"]["host_launch_idle_us"] == pytest.approx(199 * 17)
    assert "gpu-idle" in found and "host-sync" not in found


def _with_capture_cost(profiled_us: float, unprofiled_us: float,
                       before_after_us: tuple[float, float] | None = None) -> dict[str, dict[str, Any]]:
    """The tiny-kernel step as ``dnnprof run`` records it: with its own timing of steps without the profiler."""
    profile = _tiny_kernels().build([(0, 20 * 200 + 100)])
    before, after = before_after_us or (unprofiled_us, unprofiled_us)
    profile.meta["capture"] = {"overhead": {"baseline": {"median_us": unprofiled_us, "count": 6},
                                            "profiled": {"median_us": profiled_us, "count": 10},
                                            "baseline_before": {"median_us": before, "count": 3},
                                            "baseline_after": {"median_us": after, "count": 3},
                                            "dilation": round(profiled_us / unprofiled_us, 4)}}
    a = analyse(profile)
    return {f["id"]: f for f in findings_from_analysis(a, summary_of(a))}


def test_idle_findings_leave_out_what_the_capture_added() -> None:
    """Host-bound steps dilate by the capture's per-launch cost (GPT-2 124M: ~3 µs a launch on an H100 host), all
    of it GPU idle; a run that timed its steps without the profiler too says how much, and the gains exclude it."""
    plain = run(_tiny_kernels(), [(0, 20 * 200 + 100)])
    found = _with_capture_cost(profiled_us=4_100, unprofiled_us=1_100)  # the capture added 3 ms a step
    lb, idle = found["launch-bound"], found["gpu-idle"]
    ev = lb["evidence"]
    assert ev["host_launch_idle_us"] == pytest.approx(199 * 17) and ev["capture_added_us_per_step"] == 3_000
    assert (ev["unprofiled_step_us"], ev["profiled_step_us"]) == (1_100, 4_100)
    assert ev["pct_of_step"] == plain["launch-bound"]["evidence"]["pct_of_step"]  # what was measured, as before
    window = idle["evidence"]["window_us"]
    want = 100 * (199 * 17 - 3_000) / (window - 3_000)
    assert lb["est_gain_pct"] == pytest.approx(want, abs=0.05) and ev["pct_of_step_net_of_capture"] == \
        pytest.approx(want, abs=0.01)
    assert lb["est_gain_pct"] < plain["launch-bound"]["est_gain_pct"]
    assert idle["est_gain_pct"] == pytest.approx(100 * (idle["evidence"]["idle_us"] - 3_000) / (window - 3_000),
                                                 abs=0.05)
    assert idle["evidence"]["idle_net_of_capture_us"] == pytest.approx(idle["evidence"]["idle_us"] - 3_000)
    assert "added 3.00 ms to each step" in lb["evidence"]["summary"] and "profiler's own" in lb["recommendation"]
    # the capture explains all of the launch idle: the program itself is not launch-bound
    found = _with_capture_cost(profiled_us=4_100, unprofiled_us=700)
    assert "launch-bound" not in found and found["gpu-idle"]["est_gain_pct"] < 5
    # a run whose capture cost nothing keeps the measured numbers
    same = _with_capture_cost(profiled_us=4_100, unprofiled_us=4_200)
    assert same["launch-bound"]["est_gain_pct"] == plain["launch-bound"]["est_gain_pct"]
    assert same["launch-bound"]["evidence"]["capture_added_us_per_step"] == 0
    assert "pct_of_step_net_of_capture" not in same["launch-bound"]["evidence"]
    # unprofiled steps that were still warming up (2 ms before the window, 1.1 ms after it) are no measure
    warming = _with_capture_cost(profiled_us=4_100, unprofiled_us=1_100, before_after_us=(2_000, 1_100))
    assert warming["launch-bound"]["est_gain_pct"] == plain["launch-bound"]["est_gain_pct"]
    assert "capture_added_us_per_step" not in warming["launch-bound"]["evidence"]


def test_optimizer_per_parameter_loop() -> None:
    # One step: 4 ms of GEMMs, then AdamW(foreach=False): 100 per-parameter kernels of 3 µs, one every 20 µs.
    s = Synth()
    s.op("ProfilerStep#0", 0, 6_500, category="user_annotation")
    for k in range(4):
        s.kernel(BF16_GEMM, 10 + k * 1_000, 1_000, launch=1 + k)
    opt = s.op("Optimizer.step#AdamW.step", 4_000, 2_100, category="user_annotation")
    for k in range(100):
        o = s.op("aten::mul_", 4_010 + 20 * k, 10, parent=opt)
        s.kernel(PER_PARAM, 4_020 + 20 * k, 3, launch=4_012 + 20 * k, op=o)
    f = run(s, [(0, 6_500)])["optimizer-not-fused"]
    ev = f["evidence"]
    assert (ev["mode"], ev["kernels_per_step"], ev["optimizer"]) == ("per_parameter", 100, "AdamW.step")
    span = 99 * 20 + 3
    assert ev["gpu_span_us_per_step"] == pytest.approx(span)
    window = 4_020 + 99 * 20 + 3 - 10
    assert f["est_gain_pct"] == pytest.approx(100 * (span - 300 / kernels.OPT_FUSED_SPEEDUP) / window, abs=0.05)
    assert "fused=True" in f["recommendation"]


def test_low_occupancy_names_the_limiter() -> None:
    s = transformer_steps(n_steps=2)
    for i in range(2):
        s.kernel("lowocc_stencil", i * 10_000 + 9_500, 1_500, launch=i * 10_000 - 7_000, block=(64, 1, 1),
                 smem=196_608, regs=32)
    f = run(s, steps_of(2))["low-occupancy"]
    top = f["evidence"]["top"][0]
    assert top["kernel"] == "lowocc_stencil"
    assert top["theoretical_occupancy_pct"] == pytest.approx(100 * 2 / 64, abs=0.05)  # 1 block of 2 warps / SM
    assert "shared_memory" in top["limiter"]
    # With Nsight Compute counters saying the kernel saturates memory, occupancy is not its problem.
    a = analyse(s.build(steps_of(2)))
    doc = summary_of(a)
    for k in doc["kernels"]:
        if k["name"] == "lowocc_stencil":
            k["memory_throughput_pct"] = 85.0
    assert "low-occupancy" not in {f["id"] for f in findings_from_analysis(a, doc)}


def test_small_grid_empty_sm_time() -> None:
    s = transformer_steps(n_steps=2)
    for i in range(2):
        s.kernel("my_tiny_grid_kernel", i * 10_000 + 9_500, 3_000, launch=i * 10_000 - 7_000, grid=(8, 1, 1))
    f = run(s, steps_of(2))["small-grid"]
    assert f["evidence"]["empty_sm_time_us"] == pytest.approx(2 * 3_000 * (1 - 8 / 132), abs=0.2)
    assert f["evidence"]["top"][0]["blocks"] == 8


@pytest.mark.parametrize(("where", "fires"), [
    ("meta_false", True), ("doc_false", True), ("filename_off", True), ("meta_true", False), ("absent", False)])
def test_cudnn_benchmark_needs_the_recorded_setting(where: str, fires: bool) -> None:
    s = transformer_steps(gemm=CONV)
    extra, path = {}, "trace.json"
    if where == "meta_false":
        s.meta["dnnprof_run"] = '{"cudnn_benchmark": false}'
    elif where == "meta_true":
        s.meta["dnnprof_run"] = {"cudnn_benchmark": True}
    elif where == "doc_false":
        extra = {"meta": {"cudnn_benchmark": False}}
    elif where == "filename_off":
        path = "runs/resnet_cudnn-benchmark-off.json.gz"
    found = run(s, steps_of(4), extra, source_path=path)
    assert ("cudnn-benchmark-off" in found) is fires
    if fires:
        f = found["cudnn-benchmark-off"]
        assert f["est_gain_pct"] == pytest.approx(100 * 4 * 8 * 900 * kernels.CUDNN_BENCHMARK_SAVING / WINDOW_US,
                                                  abs=0.05)


def test_compile_not_used_fires_in_eager_and_not_with_triton() -> None:
    found = run(transformer_steps(layers=32, n_steps=2), [(-8_000, 2_000), (2_000, 60_000)])
    assert "compile-not-used" in found
    compiled = run(transformer_steps(layers=32, n_steps=2, elementwise=TRITON), [(-8_000, 2_000), (2_000, 60_000)])
    assert "compile-not-used" not in compiled


@pytest.mark.parametrize(("peak_gib", "expect"), [(4, "memory-underused"), (76, "memory-near-limit"), (40, None)])
def test_memory_rules_use_the_run_memory_block(peak_gib: int, expect: str | None) -> None:
    mem = {"memory": {"device_total_bytes": 80 * 2**30, "peak_reserved_bytes": peak_gib * 2**30}}
    found = run(_tiny_kernels(), [(0, 4_100)], mem)
    got = {"memory-underused", "memory-near-limit"} & set(found)
    assert got == ({expect} if expect else set())
    if expect == "memory-underused":
        f = found[expect]
        assert f["evidence"]["batch_factor"] == 4
        assert 0 < f["est_gain_pct"] < 100
    if expect == "memory-near-limit":
        assert found[expect]["est_gain_pct"] is None and found[expect]["severity"] == "medium"
    assert not {"memory-underused", "memory-near-limit"} & set(run(_tiny_kernels(), [(0, 4_100)]))


def test_unstable_steps_and_no_steps() -> None:
    s = Synth()
    bounds = [0, 10_000, 20_000, 30_000, 50_000]
    for i in range(4):
        s.op(f"ProfilerStep#{i}", bounds[i], bounds[i + 1] - bounds[i], category="user_annotation")
        s.kernel(BF16_GEMM, bounds[i] + 10, bounds[i + 1] - bounds[i] - 20, launch=bounds[i] + 5)
    f = run(s, list(itertools.pairwise(bounds)))["unstable-steps"]
    assert f["evidence"]["cv_pct"] == pytest.approx(100 * 4.330127 / 12.5, abs=0.01)
    assert f["est_gain_pct"] == pytest.approx(20.0)

    lone = Synth()
    for k, name in enumerate((BF16_GEMM, FP32_ADD, CONV)):
        lone.kernel(name, 10 + k * 100, 50)
    found = run(lone, None)
    assert found["no-steps"]["severity"] == "info" and found["no-steps"]["est_gain_pct"] is None


def test_cpu_only_and_empty_profiles_give_no_gpu_findings() -> None:
    from dnnprof.model.profile import Profile

    a = analyse(Profile())
    assert findings_from_analysis(a, summary_of(a)) == []


def test_unstable_steps_reads_the_gpu_cadence_when_the_host_runs_ahead() -> None:
    """A host that queues work ahead of the GPU waits whenever the launch queue is full: its step times jump
    (2, 2, 2, 34 µs) while the GPU finishes an iteration every 10 µs. No unstable iteration; when the GPU's own
    cadence does vary, the finding is about that cadence (and says so), not about the host's waits."""
    def loop(gpu_lengths: list[int], busy: float = 1.0) -> dict[str, Any]:
        s = Synth()
        host = [0, 2_000, 4_000, 6_000, 40_000]
        t = 10_000
        for i in range(4):
            s.op(f"ProfilerStep#{i}", host[i], host[i + 1] - host[i], category="user_annotation")
            s.kernel(BF16_GEMM, t, int(gpu_lengths[i] * busy), launch=host[i] + 5)
            t += gpu_lengths[i]
        return run(s, list(itertools.pairwise(host)))

    assert "unstable-steps" not in loop([10_000] * 4)
    assert "unstable-steps" not in loop([10_000] * 4, busy=0.5)  # 5 µs of work every 10 µs: as steady
    f = loop([10_000, 10_000, 30_000, 10_000])["unstable-steps"]
    assert f["evidence"]["measured_on"] == "gpu_cadence" and "GPU cadence" in f["title"]
    gpu = [10, 10, 30]  # start to start; the last step's work fits a usual period
    assert f["evidence"]["cv_pct"] == pytest.approx(100 * statistics.pstdev(gpu) / statistics.mean(gpu), abs=0.01)
    assert f["evidence"]["host_cv_pct"] > f["evidence"]["cv_pct"]
