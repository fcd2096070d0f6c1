"""`dnnprof analyze` on real traces other projects recorded (``../shared/foreign``, see its README): a rank-N file,
legacy torch 1.8/1.9 categories, traces without GPU activity records, MTIA and AMD devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli.main import main

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
pytestmark = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"the foreign trace corpus ({FOREIGN}) is not here")


def summary(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / "s.json"
    assert main(["analyze", str(FOREIGN / name), "--json", str(out), "--quiet", *args]) == 0
    return json.loads(out.read_text())


def report(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> str:
    assert main(["analyze", str(FOREIGN / name), *args]) == 0
    return capsys.readouterr().out


# --- a single file of rank N ≠ 0 -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "rank", "world"), [("hta__cpu_only_rank34.json.gz", 34, 300),
                                                     ("hta__df_index_resolver.json.gz", 1, 2)])
def test_single_rank_file_reports_its_rank(tmp_path: Path, name: str, rank: int, world: int) -> None:
    doc = summary(tmp_path, name)
    assert (doc["rank"], doc["world_size"]) == (rank, world)
    assert doc["steps"]["count"] >= 1


def test_single_rank_file_header_names_the_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert "rank 34 of 300" in report(capsys, "hta__cpu_only_rank34.json.gz")


def test_rank_option_still_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(FOREIGN / "hta__cpu_only_rank34.json.gz"), "--rank", "0"]) == 2
    assert "no rank 0 (ranks in the trace: [34])" in capsys.readouterr().err


def test_several_ranks_default_to_rank_0(tmp_path: Path) -> None:
    assert summary(tmp_path, "hta__trace_filter_2ranks")["rank"] == 0
    assert summary(tmp_path, "hta__trace_filter_2ranks", "--rank", "1")["rank"] == 1


# --- legacy Kineto (torch 1.8/1.9: Operator, Runtime, Kernel, Memcpy, Memset) ------------------------------------
@pytest.mark.parametrize("name", ["kineto__tbplugin_resnet50_workers0.json.gz",
                                  "kineto__tbplugin_resnet50_workers4.json.gz"])
def test_legacy_profiler_steps_phases_and_attribution(tmp_path: Path, name: str) -> None:
    doc = summary(tmp_path, name)
    steps = doc["steps"]
    assert (steps["source"], steps["count"]) == ("profiler_step", 6)  # ProfilerStep#5 … #10 under cat "Operator"
    assert doc["attribution"]["attributed_pct"] > 95  # launches link to kernels through args.correlation
    ph = doc["phases"]
    assert ph["forward_us"] > 0 and ph["backward_us"] > ph["forward_us"] and ph["optimizer_us"] > 0
    assert ph["other_us"] < 0.05 * sum(ph.values())
    assert doc["gpu"]["memcpy_us"] > 0 and sum(m["count"] for m in doc["memcpy"]) == 12
    assert doc["gpu"]["idle_breakdown_us"].get("host_launch", 0) > 0  # runtime calls are read
    # record_function ranges are annotations, not host operators
    assert not any(o["name"].startswith(("ProfilerStep#", "Optimizer.step#")) for o in doc["host_ops"])
    assert "no-steps" not in {f["id"] for f in doc["findings"]}


def test_legacy_autograd_api_trace_finds_optimizer_steps(tmp_path: Path) -> None:
    doc = summary(tmp_path, "kineto__tbplugin_resnet50_autograd_api_2021-01.json.gz")
    assert doc["steps"]["source"] == "optimizer" and doc["steps"]["count"] >= 4  # Optimizer.step#SGD.step ranges
    assert doc["attribution"]["attributed_pct"] > 90
    assert doc["phases"]["backward_us"] > doc["phases"]["forward_us"] > 0


# --- what the device is, and what the trace does not hold --------------------------------------------------------
def test_runtime_calls_without_gpu_records_are_not_called_cpu_only(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(tmp_path, "hta__cupti_profiler_counters.json.gz")  # CUPTI range-profiler (counter) mode
    gpu = doc["gpu"]
    assert not gpu["has_activity"] and (gpu["runtime_calls"], gpu["launch_calls"]) == (1862, 77)
    assert "range-profiler" in gpu["activity_note"] and "1,862 runtime calls (77 kernel launches)" in gpu["activity_note"]
    assert gpu["busy_pct"] is None  # no share of a window that holds nothing
    out = report(capsys, "hta__cupti_profiler_counters.json.gz")
    assert "CPU-only" not in out and "GPU activity not recorded" in out


def test_gpu_trace_without_runtime_calls_stays_cpu_only(tmp_path: Path) -> None:
    gpu = summary(tmp_path, "hta__distributed_info_missing.json.gz")["gpu"]  # an A100 box, CPU ops only
    assert (gpu["has_activity"], gpu["runtime_calls"], gpu["activity_note"]) == (False, 0, None)


def test_mtia_device_has_no_sentinel_properties(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(tmp_path, "hta__mtia_inference_rank0.json.gz")
    assert doc["device"] == {"name": "ARTEMIS", "compute_capability": "", "sm_count": None, "memory_bytes": None,
                             "vendor": "meta"}
    assert "MTIA device activity (1,313 device events) is not analysed" in doc["gpu"]["activity_note"]
    head = report(capsys, "hta__mtia_inference_rank0.json.gz").split("Top host ops")[0]
    assert "Meta MTIA ARTEMIS" in head and "-1" not in head and "CPU-only" not in head


@pytest.mark.parametrize(("name", "vendor"), [("hta__alexnet_critical_path.json.gz", "nvidia"),
                                              ("hta__trace_filter_2ranks", "nvidia"),  # no deviceProperties: cuda* calls
                                              ("kineto__tbplugin_resnet50_autograd_api_2021-01.json.gz", "nvidia"),
                                              ("hta__mtia_rank0.json.gz", "meta"),
                                              ("hta__mi250_minitoy_train.json.gz", "amd")])
def test_vendor_is_detected(tmp_path: Path, name: str, vendor: str) -> None:
    assert summary(tmp_path, name)["device"]["vendor"] == vendor


def test_amd_trace_gets_no_nvidia_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(tmp_path, "hta__mi250_minitoy_train.json.gz")
    assert doc["gpu"]["tensor_core_pct"] is None
    assert all(k.get("theoretical_occupancy_pct") is None for k in doc["kernels"])
    head = report(capsys, "hta__mi250_minitoy_train.json.gz").split("Top kernels")[0]
    assert "sm_90" not in head and "104 CUs" in head and "tensor cores: not applicable on AMD" in head


def test_nvidia_only_rules_stay_quiet_on_amd(tmp_path: Path, variant: Any) -> None:
    """The MI250 trace with its Tensile GEMMs named as rocBLAS names fp16 GEMMs: NVIDIA's tensor-core name
    heuristics would call them 'tensor cores unused'."""
    def edit(doc: dict[str, Any]) -> None:
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e.get("name", "").startswith("Cijk_"):
                e["name"] = "rocblas_hgemm_tn_kernel"

    path = variant(FOREIGN / "hta__mi250_minitoy_train.json.gz", edit, "mi250_fp16.json")
    out = tmp_path / "s.json"
    assert main(["analyze", str(path), "--json", str(out), "--quiet"]) == 0
    ids = {f["id"] for f in json.loads(out.read_text())["findings"]}
    assert ids.isdisjoint({"tensor-cores-unused", "amp-not-used", "low-occupancy"}), ids
    assert "launch-bound" in ids  # vendor-neutral rules still run
