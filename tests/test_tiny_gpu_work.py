"""Traces whose GPU did next to nothing: busy % is related to the host time, and the rules whose gains are
shares of GPU time stay quiet (``GPU_WORK_MIN_US``, ``GPU_WORK_MIN_HOST_PCT``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
pytestmark = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"real foreign traces not present ({FOREIGN})")


def _doc(name: str) -> dict[str, Any]:
    from dnnprof.cli.sources import analysed

    return analysed(FOREIGN / name, 0)[1]


def test_one_short_kernel_in_a_long_step_is_negligible_gpu_work() -> None:
    """HTA's Triton example: one 1.76 µs kernel in a ProfilerStep of 13.3 s of host time."""
    from dnnprof.analysis.utilization import GPU_WORK_MIN_HOST_PCT

    doc = _doc("hta__triton_example.json.gz")
    gpu = doc["gpu"]
    assert gpu["kernel_us"] == pytest.approx(1.76)
    assert gpu["host_us"] == pytest.approx(doc["steps"]["durations_us"][0])
    assert gpu["host_us"] > 13e6
    assert gpu["busy_of_host_pct"] == pytest.approx(100 * 1.76 / gpu["host_us"], rel=1e-3)
    assert gpu["busy_of_host_pct"] < GPU_WORK_MIN_HOST_PCT
    assert gpu["work_negligible"] is True
    ids = {f["id"] for f in doc["findings"]}
    assert "small-grid" not in ids  # was high, "99 % gain", on 2 µs of SM-time
    assert not ids & {"low-occupancy", "amp-not-used", "tensor-cores-unused", "fp64-used", "compile-not-used"}


def test_docs_trace_with_20_ns_of_gpu_work_gets_no_kernel_finding() -> None:
    """kineto's docs example: one 0.02 µs kernel, no steps; small-grid said "0 µs of SM-time left empty"."""
    from dnnprof.analysis.utilization import GPU_WORK_MIN_US

    doc = _doc("kineto__docs_before_fix_trace.json")
    assert doc["gpu"]["kernel_us"] < GPU_WORK_MIN_US
    assert doc["gpu"]["work_negligible"] is True
    assert [f["id"] for f in doc["findings"]] == ["no-steps"]


def test_real_gpu_work_keeps_its_kernel_findings() -> None:
    """The A100 training trace (1.2 s of GPU span, 36 % busy) is not negligible: small-grid and amp-not-used stay."""
    doc = _doc("hta__negative_queue_length_rank0.json.gz")
    assert doc["gpu"]["work_negligible"] is False
    assert doc["gpu"]["busy_of_host_pct"] > 10
    assert {"small-grid", "amp-not-used"} <= {f["id"] for f in doc["findings"]}


def test_terminal_says_how_little_the_gpu_worked(capsys: pytest.CaptureFixture[str]) -> None:
    from dnnprof.render.terminal import render

    render(_doc("hta__triton_example.json.gz"))
    out = " ".join(capsys.readouterr().out.split())
    assert "the GPU worked 1.8 µs in 13,336.32 ms of host time (< 0.01%)" in out
