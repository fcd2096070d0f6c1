"""``dnnprof device``: no GPU → clear error; properties + spec peaks; the measurement cache; a real measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli import device as D
from dnnprof.cli.main import main

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_bytes": 85_520_809_984,
        "sm_count": 132, "uuid": "GPU-0f2c6a1e-aaaa-bbbb-cccc-123456789abc"}


def test_no_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(D, "_torch_properties", lambda i: (None, "torch sees no CUDA device"))
    monkeypatch.setattr(D, "_nvml_properties", lambda i: (None, "NVML unavailable"))
    assert main(["device"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dnnprof: error: no NVIDIA GPU found") and "Traceback" not in err
    assert "torch sees no CUDA device" in err and "NVML unavailable" in err


def test_properties_and_spec_peaks_as_json(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(D, "_torch_properties", lambda i: ({**H100, "uuid": "torch-uuid"}, ""))
    monkeypatch.setattr(D, "_nvml_properties", lambda i: ({"uuid": H100["uuid"], "max_sm_clock_mhz": 1980}, ""))
    assert main(["device", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device"]["uuid"] == H100["uuid"] and doc["device"]["max_sm_clock_mhz"] == 1980
    assert doc["spec"]["name"] == "H100 SXM5 80GB" and doc["spec"]["peak_tflops"]["bf16"] == pytest.approx(989.4)
    assert doc["spec"]["memory_bandwidth_gb_s"] == 3350 and "measured" not in doc


def test_unknown_gpu_has_no_spec_but_still_reports(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(D, "_torch_properties", lambda i: (None, "no torch"))
    monkeypatch.setattr(D, "_nvml_properties", lambda i: ({"name": "NVIDIA Future GPU 9000"}, ""))
    assert main(["device", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spec"] is None and doc["device"]["name"] == "NVIDIA Future GPU 9000"
    assert main(["device"]) == 0  # the table renderer copes with a missing spec
    assert "no spec-sheet entry" in capsys.readouterr().out


def test_measure_uses_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DNNPROF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(D, "_torch_properties", lambda i: (dict(H100), ""))
    monkeypatch.setattr(D, "_nvml_properties", lambda i: (None, "no NVML"))
    calls: list[int] = []

    def fake_measure(index: int) -> dict[str, Any]:
        calls.append(index)
        return {"copy_bytes": 1 << 30, "copy_bandwidth_gb_s": 2900.0, "gemm_n": {"bf16": 8192},
                "gemm_tflops": {"fp64": 50.0, "fp32": 48.0, "tf32": 350.0, "fp16": 700.0, "bf16": 690.0}}

    monkeypatch.setattr(D, "measure_device", fake_measure)
    assert main(["device", "--measure", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["measured"]
    path = tmp_path / "device-GPU-0f2c6a1e-aaaa-bbbb-cccc-123456789abc.json"
    assert first["cached"] is False and Path(first["cache_path"]) == path and path.is_file()
    assert main(["device", "--measure", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["measured"]
    assert second["cached"] is True and second["copy_bandwidth_gb_s"] == 2900.0 and calls == [0]
    assert main(["device", "--measure", "--refresh"]) == 0  # table output, measures again
    out = capsys.readouterr().out
    assert calls == [0, 0] and "2,900.0 (copy)" in out and "86.6" in out  # 2900 / 3350 GB/s
    path.write_text("{not json")
    assert main(["device", "--measure", "--json"]) == 0 and calls == [0, 0, 0]  # unreadable cache: re-measure


def test_cache_path_without_uuid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DNNPROF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert D.cache_path({"name": "NVIDIA L4"}) == tmp_path / "dnnprof" / "device-NVIDIA_L4.json"


@pytest.mark.gpu
def test_measure_on_a_real_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    monkeypatch.setenv("DNNPROF_CACHE_DIR", str(tmp_path))
    assert main(["device", "--measure", "--refresh", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["measured"]
    assert m["cached"] is False and Path(m["cache_path"]).is_file()
    assert 50 < m["copy_bandwidth_gb_s"] < 20_000
    tf = m["gemm_tflops"]
    assert set(tf) == {"fp64", "fp32", "tf32", "fp16", "bf16"} and all(v > 0.05 for v in tf.values())
    if torch.cuda.get_device_capability()[0] >= 8:  # tensor cores: half precision beats the FP32 pipe
        assert tf["bf16"] > 2 * tf["fp32"] and tf["tf32"] > tf["fp32"]
    spec = doc["spec"]
    if spec:  # a measurement never beats the sheet by much (clocks can exceed the datasheet's a little)
        assert m["copy_bandwidth_gb_s"] < 1.1 * spec["memory_bandwidth_gb_s"]
        assert tf["bf16"] < 1.15 * spec["peak_tflops"]["bf16"]
    assert main(["device", "--measure", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["measured"]["cached"] is True


def test_nvml_properties_go_through_the_one_nvml_wrapper() -> None:
    """``dnnprof device`` reads NVML through ``collect.nvml.Nvml`` (fake library through its seam): what NVML
    answers is there, what this library lacks is left out, a library that cannot start is one reason."""
    from dnnprof.cli.device import _nvml_properties
    from dnnprof.collect.nvml import Nvml
    from test_collect_nvml import LIB_NOT_FOUND, FakeNvml

    props, why = _nvml_properties(0, Nvml(FakeNvml([0])))
    assert why == "" and props == {"name": "NVIDIA H200", "uuid": "GPU-1234", "memory_bytes": 141 << 30,
                                   "driver_version": "580.159.04"}
    props, why = _nvml_properties(0, Nvml(FakeNvml([0], init_error=LIB_NOT_FOUND)))
    assert props is None and "NVML Shared Library Not Found" in why
