"""`dnnprof analyze ncu.csv`: an Nsight Compute CSV on its own gives the per-kernel counters table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprof.cli.main import main

NCU = Path(__file__).parent / "data" / "ncu_gpt2_h200"


def test_analyze_ncu_raw_csv(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    assert main(["analyze", str(NCU / "ncu_raw.csv"), "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "dnnprof.counters/1"
    assert doc["launches"] == sum(k["launches"] for k in doc["kernels"])
    assert sum(k["pct"] for k in doc["kernels"]) == pytest.approx(100, abs=0.05)
    top = doc["kernels"][0]
    assert top["short_name"] == "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"
    assert top["tensor_core"] is True
    assert top["flops"] > 1e11 and top["arithmetic_intensity"] > 100  # the LM-head GEMM is compute-heavy
    names = {k["short_name"] for k in doc["kernels"]}
    assert "cunn_SoftMaxForward" in names  # ncu's '<unnamed>' namespaces are cleaned like Kineto's


def test_analyze_ncu_permission_error_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "ncu.csv"
    bad.write_text("==PROF== Connected to process 123\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                   "permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "ERR_NVGPUCTRPERM" in err[0] or "permission" in err[0]


def test_counters_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["counters", str(tmp_path)]) == 2
    assert "not a dnnprof run directory" in capsys.readouterr().err


def test_counters_refuses_an_incomplete_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "profile").mkdir()
    (tmp_path / "meta.json").write_text(json.dumps({"complete": False, "reason": "interrupted (Ctrl-C)"}))
    assert main(["counters", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "incomplete" in err and "Ctrl-C" in err


def test_analyze_a_parts_only_capture(tmp_path: Path) -> None:
    """dnnprof's own ncu pass collects the parts of the speed-of-light throughputs (H100, 12 replay passes): the
    file on its own gives the same per-kernel table, and says the throughputs are maxima of parts."""
    out = tmp_path / "c.json"
    parts = Path(__file__).parent / "data" / "ncu_gpt2_h100_parts" / "ncu.csv.gz"
    assert main(["analyze", str(parts), "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    assert doc["throughput_source"] == {"sm": "parts", "memory": "parts"}
    assert doc["launches"] == 75
    assert all(k["sm_throughput_pct"] is not None and k["bound"] for k in doc["kernels"])
    ref = tmp_path / "ref.json"  # ncu's own throughputs, another run of the same step on the same day
    full = Path(__file__).parent / "data" / "ncu_gpt2_h100_breakdown" / "ncu.csv.gz"
    assert main(["analyze", str(full), "--json", str(ref), "--quiet"]) == 0
    theirs = {k["name"]: k for k in json.loads(ref.read_text())["kernels"]}
    top = doc["kernels"][:5]  # 76 % of the step's counted time
    assert all(k["bound"] == theirs[k["name"]]["bound"] for k in top)
    for k in top:
        assert abs(k["memory_throughput_pct"] - theirs[k["name"]]["memory_throughput_pct"]) < 3


def test_timeline_outputs_of_an_ncu_file_are_refused_with_a_reason(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(NCU / "ncu_raw.csv"), "--perfetto", str(tmp_path / "t.json")]) == 2
    assert "has no timeline" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
