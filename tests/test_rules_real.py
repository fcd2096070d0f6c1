"""Expert-system rules on the real H200 traces, both ways: fires where the trace has the problem, quiet where not.

* GPT-2 124M, bf16 autocast, foreach AdamW, recorded under torch.profiler (host-bound there: GPU busy ~58%), with
  an unpadded vocabulary of 50257 (unaligned lm_head GEMMs).
* DeepSpeech, fp32, CTC loss with CUDA lengths (device→host copies and pageable host→device copies inside
  ``ctc_loss``), SGD.
Evidence numbers are checked against references computed from the raw JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CPU_MLP, DEEPSPEECH, GPT2, load_raw
from dnnprof.analysis.rules import findings_from_analysis, kernels, sync
from dnnprof.analysis.summary import analyse, summary_of
from dnnprof.ingest.kineto import read_kineto

NCU_H200 = Path(__file__).parent / "data" / "ncu_gpt2_h200"
NEVER_ON_BF16 = {"amp-not-used", "host-sync", "pageable-memcpy", "dataloader-bound", "fp64-used"}


def _analysed(path: Any) -> tuple[Any, dict[str, Any]]:
    a = analyse(read_kineto(path))
    return a, summary_of(a)


@pytest.fixture(scope="module")
def gpt2() -> tuple[Any, dict[str, Any]]:
    return _analysed(GPT2)


@pytest.fixture(scope="module")
def deepspeech() -> tuple[Any, dict[str, Any]]:
    return _analysed(DEEPSPEECH)


def found(analysed: tuple[Any, dict[str, Any]], **extra: Any) -> dict[str, dict[str, Any]]:
    a, doc = analysed
    return {f["id"]: f for f in findings_from_analysis(a, {**doc, **extra})}


def raw_kernels(path: Any) -> list[dict[str, Any]]:
    return [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def test_bf16_transformer_is_not_told_to_use_amp_or_fix_syncs(gpt2: Any) -> None:
    assert not NEVER_ON_BF16 & set(found(gpt2))


def test_amp_not_used_fires_on_fp32_deepspeech_only(gpt2: Any, deepspeech: Any) -> None:
    f = found(deepspeech)["amp-not-used"]
    ref = sum(e["dur"] for e in raw_kernels(DEEPSPEECH)
              if ("f32f32_f32f32" in e["name"] or "simt_sgemm" in e["name"]) and "splitK" not in e["name"])
    assert f["evidence"]["fp32_kernel_us"] == pytest.approx(ref, abs=0.1)
    # No 16-bit matrix math at all, so the TF32 RNN GEMMs (cuDNN's default) count too.
    ref_tf32 = sum(e["dur"] for e in raw_kernels(DEEPSPEECH) if "tensorop_s1688gemm" in e["name"]
                   or "tf32f32" in e["name"])
    assert f["evidence"]["tf32_kernel_us"] == pytest.approx(ref_tf32, abs=0.1)
    assert f["evidence"]["amp_in_use"] is False
    assert {t["layer"] for t in f["evidence"]["top"]} == {"aten::linear", "aten::rnn_relu"}
    assert f["severity"] == "high" and 0 < f["est_gain_pct"] < 100
    # the RNN's GEMMs overlap on two streams: their wall time (union of their intervals, computed here from the raw
    # events) is 0.90 of their summed time, and the gain and the step share count them once
    counted = [e for e in raw_kernels(DEEPSPEECH) if e["dur"] > 0 and (
        (("f32f32_f32f32" in e["name"] or "simt_sgemm" in e["name"]) and "splitK" not in e["name"])
        or "tensorop_s1688gemm" in e["name"] or "tf32f32" in e["name"])]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in counted)
    wall, end = 0.0, float("-inf")
    for a, b in spans:
        wall += max(0.0, b - max(a, end))
        end = max(end, b)
    assert f["evidence"]["overlap_factor"] == pytest.approx(wall / sum(e["dur"] for e in counted), abs=0.002)
    assert "amp-not-used" not in found(gpt2)


def test_tensor_cores_unused_sees_gpt2_unpadded_vocabulary(gpt2: Any, deepspeech: Any) -> None:
    f = found(gpt2)["tensor-cores-unused"]
    ref = sum(e["dur"] for e in raw_kernels(GPT2) if "tensorop_bf16" in e["name"] and "_align1" in e["name"])
    assert f["evidence"]["unaligned_us"] == pytest.approx(ref, abs=0.1)
    assert f["evidence"]["no_tensor_core_us"] == 0
    assert "50304" in f["recommendation"]
    assert "tensor-cores-unused" not in found(deepspeech)


def test_tensor_cores_unused_measures_the_gain_with_counters(gpt2: Any) -> None:
    """With Nsight Compute counters of the same GPT-2 on the same H200 (``ncu_gpt2_h200``: the LM-head GEMM
    ``cutlass_75_…_align1`` at 94 TFLOP/s, the aligned ``nvjet`` GEMMs at 570–620), the speedup of padding is
    measured (~6×) instead of assumed (2×), so the expected gain grows."""
    from dnnprof.cli.counters import ncu_summary

    roof = ncu_summary(NCU_H200 / "ncu_raw.csv")["roofline"]
    plain = found(gpt2)["tensor-cores-unused"]
    f = found(gpt2, roofline=roof)["tensor-cores-unused"]
    ev = f["evidence"]
    assert 550 <= ev["aligned_gemm_tflops"] <= 650
    s = ev["unaligned_speedups"]["cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"]
    assert 5.5 <= s <= 7.0
    assert "measured with Nsight Compute" in f["how_estimated"]
    assert f["est_gain_pct"] > plain["est_gain_pct"]
    assert "aligned_gemm_tflops" not in plain["evidence"] and "assumed" in plain["how_estimated"]


def test_gpu_idle_fires_on_host_bound_gpt2_only(gpt2: Any, deepspeech: Any) -> None:
    _, doc = gpt2
    f = found(gpt2)["gpu-idle"]
    assert f["evidence"]["busy_pct"] == pytest.approx(doc["gpu"]["busy_pct"], abs=0.05)
    assert f["evidence"]["idle_us"] == pytest.approx(doc["gpu"]["idle_us"], abs=1)
    assert f["evidence"]["largest_cause"] == "host_launch"
    assert "unprofiled" in f["recommendation"]
    assert "gpu-idle" not in found(deepspeech)  # busy 89.5%


def test_launch_bound_on_gpt2_not_on_deepspeech(gpt2: Any, deepspeech: Any) -> None:
    f = found(gpt2)["launch-bound"]
    durs = [e["dur"] for e in raw_kernels(GPT2)]
    assert f["evidence"]["median_kernel_us"] == pytest.approx(float(np.median(durs)), abs=0.01)
    assert f["evidence"]["short_kernel_share"] == pytest.approx(np.mean(np.array(durs) < 10), abs=0.001)
    # DeepSpeech's launch gaps all follow the ctc_loss sync: they are host-sync's, not launch-bound's.
    assert "launch-bound" not in found(deepspeech)


def test_host_sync_names_ctc_loss_on_deepspeech(gpt2: Any, deepspeech: Any) -> None:
    _, doc = deepspeech
    f = found(deepspeech)["host-sync"]
    ev = f["evidence"]
    top = ev["top"][0]
    assert (top["op"], top["in_op"], top["what"]) == ("aten::to", "aten::ctc_loss", "DtoH copy")
    assert "ctc_loss" in f["recommendation"]
    # Reference for the first direct gap: from the end of the DtoH copy to the next GPU activity.
    evs = [e for e in load_raw(DEEPSPEECH)["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    d2h = min((e for e in evs if "DtoH" in e["name"]), key=lambda e: e["ts"])
    end = d2h["ts"] + d2h["dur"]
    nxt = min(e["ts"] for e in evs if e["ts"] >= end)
    assert ev["direct_idle_us"] >= nxt - end - 0.01
    # Every host-launch gap of this step comes after the sync: all of them are blamed on it, within the total idle.
    assert ev["refill_idle_us"] == pytest.approx(doc["gpu"]["idle_breakdown_us"]["host_launch"], abs=0.5)
    assert ev["gpu_idle_caused_us"] <= doc["gpu"]["idle_us"]
    assert "host-sync" not in found(gpt2)


def test_pageable_memcpy_measures_deepspeech_copies(deepspeech: Any, gpt2: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The pageable copies are ~27 KB inside ctc_loss: below 1% of the step, so the rule stays quiet...
    assert "pageable-memcpy" not in found(deepspeech)
    # ...and with the threshold lowered, its evidence matches the raw copies.
    monkeypatch.setattr(sync, "PAGEABLE_MIN_PCT", 0.1)
    f = found(deepspeech)["pageable-memcpy"]
    raw = [e for e in load_raw(DEEPSPEECH)["traceEvents"] if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]]
    assert f["evidence"]["copies"] == len(raw) == 9
    assert f["evidence"]["bytes"] == sum(e["args"]["bytes"] for e in raw)
    assert f["evidence"]["gpu_copy_us"] == pytest.approx(sum(e["dur"] for e in raw), abs=0.1)
    assert f["evidence"]["top"][0]["in_op"] in ("aten::ctc_loss", "aten::_ctc_loss")
    assert f["est_gain_pct"] < sync.PAGEABLE_MIN_PCT * 10
    assert "pageable-memcpy" not in found(gpt2)


def test_small_grid_on_deepspeech_rnn(deepspeech: Any, gpt2: Any) -> None:
    f = found(deepspeech)["small-grid"]
    ref = sum(e["dur"] * (1 - b / 132) for e in raw_kernels(DEEPSPEECH)
              if (b := int(np.prod(e["args"]["grid"]))) < 132)
    assert f["evidence"]["empty_sm_time_us"] == pytest.approx(ref, abs=0.5)
    assert f["evidence"]["top"][0]["layer"] == "aten::rnn_relu"
    assert "small-grid" not in found(gpt2)


@pytest.mark.parametrize("block", [1, 7, 1000])
def test_small_grid_a_block_of_kernels_at_a_time(block: int, deepspeech: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = found(deepspeech)["small-grid"]
    monkeypatch.setattr(kernels, "_BLOCK_ROWS", block)
    f = found(deepspeech)["small-grid"]
    assert f is not whole and f["evidence"] == whole["evidence"] and f["title"] == whole["title"]
    assert f["est_gain_pct"] == pytest.approx(whole["est_gain_pct"], rel=1e-12)


def test_optimizer_not_fused_on_foreach_adamw(gpt2: Any, deepspeech: Any) -> None:
    f = found(gpt2)["optimizer-not-fused"]
    n = sum("multi_tensor_apply" in e["name"] for e in raw_kernels(GPT2))
    assert f["evidence"]["mode"] == "foreach"
    assert f["evidence"]["kernels_per_step"] == n / 2
    assert f["evidence"]["optimizer"] == "AdamW.step"
    assert "optimizer-not-fused" not in found(deepspeech)  # SGD: 0.5% of the step


def test_compile_not_used_on_eager_gpt2(gpt2: Any, deepspeech: Any) -> None:
    f = found(gpt2)["compile-not-used"]
    assert f["evidence"]["fusable_kernels_per_step"] > 500
    assert "compile-not-used" not in found(deepspeech)


def test_low_occupancy_leaves_library_gemms_alone(gpt2: Any, deepspeech: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "low-occupancy" not in found(gpt2) and "low-occupancy" not in found(deepspeech)
    monkeypatch.setattr(kernels, "LOW_OCC_MIN_KERNEL_PCT", 0.0)
    monkeypatch.setattr(kernels, "LOW_OCC_MAX_PCT", 60.0)
    f = found(deepspeech)["low-occupancy"]  # ctc_loss kernels at 50% occupancy
    assert all("gemm" not in t["kernel"] for t in f["evidence"]["top"])
    assert f["evidence"]["top"][0]["limiter"]


def test_memory_rules_need_a_measurement(gpt2: Any, deepspeech: Any) -> None:
    assert not {"memory-underused", "memory-near-limit"} & set(found(gpt2))
    _, doc = gpt2
    total = doc["device"]["memory_bytes"]
    f = found(gpt2, memory={"device_total_bytes": total, "peak_reserved_bytes": 10 * 2**30})["memory-underused"]
    w, busy = doc["gpu"]["window_us"], doc["gpu"]["window_us"] - doc["gpu"]["idle_us"]
    assert f["evidence"]["batch_factor"] == 4
    assert f["est_gain_pct"] == pytest.approx(100 * (1 - max(w, 4 * busy) / (4 * w)), abs=0.1)
    near = found(deepspeech, memory={"device_total_bytes": total, "peak_reserved_bytes": int(total * 0.95)})
    assert "memory-near-limit" in near and "memory-underused" not in near


def test_unstable_steps_on_cpu_trace_with_warmup_step(gpt2: Any) -> None:
    f = found(_analysed(CPU_MLP))["unstable-steps"]
    d = [e["dur"] for e in load_raw(CPU_MLP)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert f["evidence"]["cv_pct"] == pytest.approx(100 * np.std(d) / np.mean(d), abs=0.05)
    assert "unstable-steps" not in found(gpt2)  # two steps, CV 0.1%


def test_no_steps_when_markers_are_gone(variant: Any) -> None:
    def strip(doc: dict[str, Any]) -> None:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith(
            ("ProfilerStep#", "Optimizer.step#", "Optimizer.zero_grad#"))]

    path = variant(DEEPSPEECH, strip, "nosteps.json")
    a, doc = _analysed(path)
    fs = {f["id"]: f for f in findings_from_analysis(a, doc)}
    if doc["steps"]["count"]:
        pytest.skip(f"steps were inferred from the launch pattern ({doc['steps']['source']})")
    assert fs["no-steps"]["severity"] == "info"
    assert "prof.step()" in fs["no-steps"]["recommendation"]


def test_cudnn_benchmark_off_needs_convolutions(gpt2: Any) -> None:
    assert "cudnn-benchmark-off" not in found(gpt2, meta={"cudnn_benchmark": False})


@pytest.mark.parametrize("drop", [
    "deviceProperties", "cpu_op", "everything_but_kernels",
    "cuda_runtime",
])
def test_rules_survive_foreign_traces_missing_parts(variant: Any, drop: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        if drop == "deviceProperties":
            doc.pop("deviceProperties", None)
        elif drop == "everything_but_kernels":
            doc.pop("deviceProperties", None)
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        else:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in (drop, "cuda_driver")]

    a, doc = _analysed(variant(DEEPSPEECH, edit, f"no_{drop}.json"))
    fs = {f["id"]: f for f in findings_from_analysis(a, doc)}
    json.dumps(list(fs.values()), allow_nan=False)
    assert "amp-not-used" in fs  # kernel names alone show the fp32 GEMMs
    if drop in ("deviceProperties", "everything_but_kernels"):
        assert "small-grid" not in fs  # SM count unknown: the rule cannot judge grids
        assert "assumed" in fs["amp-not-used"]["how_estimated"]


@pytest.mark.parametrize("block", [1000, 1 << 20])
def test_the_host_op_at_a_gap_is_found_a_block_of_ops_at_a_time(gpt2: Any, block: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The innermost op running as the GPU ran dry, looked for a few ops at a time, is the deepest op (the first of
    equally deep ones) of a test of every op at once; and the evidence built on it does not change."""
    from dnnprof.analysis.rules import idle
    from dnnprof.analysis.rules.context import Context

    a, doc = gpt2
    before = found(gpt2)
    ctx = Context(a, doc)
    ops = a.profile.tables["ops"]
    monkeypatch.setattr(idle, "_SCAN_ROWS", block)
    starts = ctx.timeline.gap_start[:: max(1, ctx.timeline.gap_start.size // 40)].tolist()
    for t in starts:
        sel = np.flatnonzero((ops["rank"] == ctx.rank) & (ops["start_ns"] <= t) & (ops["start_ns"] + ops["dur_ns"] > t))
        want = ctx.op_name(int(sel[np.argmax(ops["depth"][sel])])) if sel.size else ""
        assert idle._host_op_at(ctx, int(t)) == want
    assert ops["start_ns"].size > 3 * 1000 and any(idle._host_op_at(ctx, int(t)) for t in starts)
    assert found(gpt2) == before


def test_the_ops_distinct_names_are_every_name_once(gpt2: Any) -> None:
    """What the rules ask of the ops' names (an optimizer's, a compiled region's) comes from the distinct ids, in
    id order, not from a column of every op's name."""
    from dnnprof.analysis.rules.context import Context

    a, doc = gpt2
    ids = a.profile.tables["ops"]["name_id"]
    got = Context(a, doc).op_name_set
    assert got == [a.profile.strings[i] for i in sorted(set(ids.tolist())) if i >= 0] + ([""] if (ids < 0).any() else [])
    assert len(got) == len(set(got)) and "aten::addmm" in got
    assert a.profile.distinct_names(np.array([3, -1, 3, 10**9, 0])) == [a.profile.strings[0], a.profile.strings[3], ""]


def test_the_host_op_at_a_time_when_the_ops_were_never_nested() -> None:
    """An ops table built elsewhere, depths unknown (-1): the first op running at the time, as a test of every op
    at once gives it."""
    from types import SimpleNamespace

    from dnnprof.analysis.rules import idle
    from dnnprof.model.profile import Profile
    from dnnprof.model.schema import empty_table

    p = Profile()
    ops = empty_table("ops", 3)
    ops["start_ns"][:] = [0, 10, 50]
    ops["dur_ns"][:] = [100, 20, 5]
    ops["rank"][:] = 0
    ops["depth"][:] = -1
    ops["name_id"][:] = [p.intern("outer"), p.intern("inner"), p.intern("later")]
    p.tables["ops"] = ops
    ctx = SimpleNamespace(profile=p, rank=0, op_name=lambda row: p.name(int(ops["name_id"][row])) if row >= 0 else "")
    assert idle._host_op_at(ctx, 15) == "outer" and idle._host_op_at(ctx, 200) == ""
