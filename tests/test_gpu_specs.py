"""Spec-sheet table: name matching, unknown GPUs, and the numbers against their own derivations and real ncu data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest.ncu_csv import read_ncu_csv
from dnnprof.model.gpu_specs import PRECISIONS, SPECS, lookup_gpu

RAW = Path(__file__).parent / "data" / "ncu_gpt2_h200" / "ncu_raw.csv"


@pytest.mark.parametrize(("name", "expect"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
    ("NVIDIA H100", "H100 SXM5 80GB"),
    ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
    ("NVIDIA H200", "H200 SXM 141GB"),
    ("nvidia h200", "H200 SXM 141GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", "L40"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla T4", "T4"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
])
def test_lookup_by_device_name(name: str, expect: str) -> None:
    spec = lookup_gpu(name)
    assert spec is not None and spec.name == expect


@pytest.mark.parametrize("name", [
    "", "AMD Radeon RX 7900", "NVIDIA A10G", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 4080", "NVIDIA A100", "NVIDIA A40", "Tesla V100S-PCIE-32GB", "NVIDIA L40G",
])
def test_unknown_or_ambiguous_names_give_none(name: str) -> None:
    assert lookup_gpu(name) is None


def test_memory_size_resolves_a100_variants() -> None:
    assert lookup_gpu("NVIDIA A100", memory_bytes=85_000_000_000).name == "A100 SXM4 80GB"  # type: ignore[union-attr]
    assert lookup_gpu("NVIDIA A100", memory_bytes=42_000_000_000).name == "A100 SXM4 40GB"  # type: ignore[union-attr]


def test_hopper_numbers_match_their_derivation() -> None:
    h100 = lookup_gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.sm_count == 132
    # FP32 = SMs x 128 lanes x 2 FLOP x 1.98 GHz; FP64 = x 64 lanes; dense BF16 = SMs x 4096 FLOP/clk x 1.83 GHz
    assert h100.peak_flops_per_s("fp32") == pytest.approx(132 * 128 * 2 * 1.98e9, rel=2e-3)
    assert h100.peak_flops_per_s("fp64") == pytest.approx(132 * 64 * 2 * 1.98e9, rel=2e-3)
    assert h100.peak_flops_per_s("bf16") == pytest.approx(132 * 4096 * 1.83e9, rel=2e-3)
    assert h100.peak_flops_per_s("fp8") == pytest.approx(2 * h100.peak_flops_per_s("bf16"), rel=1e-3)
    assert h100.peak_flops_per_s("bf16") / h100.memory_bandwidth_bytes_per_s == pytest.approx(295, abs=1)
    h200 = lookup_gpu("NVIDIA H200")
    assert h200 is not None and h200.tflops == h100.tflops and h200.memory_bandwidth_gb_s == 4800
    assert h200.l2_bytes == 62_914_560  # measured on the H200 device machine


def test_pcie_dense_rates_are_half_the_sparse_datasheet() -> None:
    p = lookup_gpu("NVIDIA H100 PCIe")
    assert p is not None
    assert (2 * p.tflops["tf32"], 2 * p.tflops["bf16"], 2 * p.tflops["fp8"]) == (756, 1513, 3026)


def test_every_spec_is_sane() -> None:
    for spec in SPECS.values():
        assert spec.sm_count > 0 and spec.memory_bandwidth_gb_s > 0, spec.name
        assert set(spec.tflops) <= set(PRECISIONS) and spec.tflops.get("fp32", 0) > 0, spec.name
        assert all(v > 0 for v in spec.tflops.values()), spec.name
        for tensor in ("tf32", "fp16", "bf16", "fp8"):  # tensor cores never lose to the FP32 pipe
            if tensor in spec.tflops:
                assert spec.tflops[tensor] >= spec.tflops["fp32"], (spec.name, tensor)
        assert lookup_gpu(spec.name, memory_bytes=int((spec.memory_gb or 16) * 1e9)) is spec, spec.name
        d = spec.to_dict()
        assert set(d["peak_tflops"]) == set(PRECISIONS) and d["name"] == spec.name


def test_missing_values_and_bad_precision() -> None:
    a100 = lookup_gpu("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100.peak_flops_per_s("fp8") is None
    with pytest.raises(KeyError, match="unknown precision"):
        a100.peak_flops_per_s("fp4")


def test_spec_agrees_with_ncu_peaks_on_a_real_h200() -> None:
    """ncu's FP32 and DRAM ceilings on the H200 (measured clock) equal the sheet's up to the clock ratio."""
    t = read_ncu_csv(RAW)
    spec = lookup_gpu(str(t.text["device__attribute_display_name"][0]))
    assert spec is not None and spec.name == "H200 SXM 141GB"
    assert int(t.metric("device__attribute_multiprocessor_count")[0]) == spec.sm_count
    clk = float(np.median(t.metric("sm__cycles_elapsed.avg.per_second")))
    ncu_fp32 = float(t.metric("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained")[0]) * 2 * clk
    assert ncu_fp32 / spec.peak_flops_per_s("fp32") == pytest.approx(clk / 1.98e9, rel=0.01)  # type: ignore[operator]
    dram = float(t.metric("dram__bytes.sum.peak_sustained")[0]) * float(
        np.median(t.metric("dram__cycles_elapsed.avg.per_second")))
    assert dram == pytest.approx(spec.memory_bandwidth_bytes_per_s, rel=0.01)
