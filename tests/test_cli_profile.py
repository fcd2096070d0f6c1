"""``dnnprof profile WORKLOAD`` and ``dnnprof workloads``.

CPU: a tiny workload end to end, and every bad input. GPU (``-m gpu``): every full-size workload in train and
infer mode on CUDA; with ``OUT`` set, the figures of each run are also written to ``$OUT/workloads_gpu.json``
(step time, throughput, busy %, GPM, dilation) for the committed results table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli.main import main


def dnnprof(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dnnprof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_tiny_workload_on_cpu_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = dnnprof("profile", "transformer-tiny", "--device", "cpu", "--warmup-steps", "2", "--steps", "2",
                "--batch-size", "2", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] and meta["capture"]["step_source"] == "explicit"
    assert meta["workload"]["name"] == "transformer-tiny"
    assert meta["workload"]["config"]["batch_size"] == 2 and meta["workload"]["config"]["device"] == "cpu"
    s = json.loads((out / "summary.json").read_text())
    t = s["throughput"]
    assert t["unit"] == "samples/s" and t["items_per_step"] == 2 and t["items_per_s"] > 0
    assert t["steps"] == 2 == s["steps"]["count"]
    assert s["memory"]["note"].startswith("no CUDA device")
    assert s["layers"] == [] or all("name" in row for row in s["layers"])
    assert "2 steps profiled" in r.stderr and "samples/s" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["profile", "nosuch"], "unknown workload 'nosuch'; valid workloads: deepspeech2, deepspeech2-tiny, gpt2"),
    (["profile", "gpt2-tiny", "--precision", "fp99"], "unknown precision 'fp99'; valid choices: fp64, fp32"),
    (["profile", "gpt2-tiny", "--mode", "eval"], "unknown mode 'eval'; valid choices: train, infer"),
    (["profile", "gpt2-tiny", "--batch-size", "0"], "batch_size must be an integer >= 1"),
    (["profile", "gpt2-tiny", "--device", "cpu", "--pin-memory"], "pin_memory=True needs device 'cuda'"),
    (["profile", "gpt2-tiny", "--steps", "0"], "--steps must be at least 1"),
])
def test_bad_workload_or_knob_lists_the_valid_choices(args: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dnnprof: error: ") and message in err


def test_workloads_lists_names_and_knobs_without_torch(tmp_path: Path) -> None:
    code = ("import sys; from dnnprof.cli.main import main; rc = main(['workloads', '--json']); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    names = [w["name"] for w in doc["workloads"]]
    assert {"gpt2", "gpt2-tiny", "deepspeech2", "resnet50", "dcgan-tiny"} <= set(names)
    assert [k["knob"] for k in doc["knobs"]][:4] == ["batch_size", "precision", "mode", "device"]


def test_workloads_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workloads", "--no-tiny"]) == 0
    out = capsys.readouterr().out
    assert "gpt2" in out and "gpt2-tiny" not in out and "precision" in out


# --- GPU ---------------------------------------------------------------------------------------------------
def _full_size() -> list[str]:
    from dnnprof.workloads.registry import workload_names

    return workload_names(include_tiny=False)


def _figures(s: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    m = s["samples"]["metrics"]
    pick = (lambda k: m.get(k, {}).get("mean"))  # noqa: E731
    return {"step_ms": s["throughput"]["step_time_median_us"] / 1000, "p90_ms": s["throughput"]["step_time_p90_us"] / 1000,
            "throughput": s["throughput"]["items_per_s"], "unit": s["throughput"]["unit"],
            "busy_pct": s["gpu"]["busy_pct"], "gpu_util_pct": pick("gpu_util_pct"),
            "sm_active_pct": pick("sm_active_pct"), "sm_occupancy_pct": pick("sm_occupancy_pct"),
            "tensor_active_pct": pick("tensor_active_pct"), "dram_bw_util_pct": pick("dram_bw_util_pct"),
            "peak_allocated_gib": (s["memory"]["peak_allocated_bytes"] or 0) / 2**30,
            "dilation": s["overhead"]["dilation"],
            "attribution_matched_pct": (meta["capture"].get("attribution") or {}).get("matched_kernels_pct")}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("workload", _full_size())
def test_gpu_every_workload_in_both_modes(workload: str, mode: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = dnnprof("profile", workload, "--mode", mode, "--precision", "amp-bf16", "--warmup-steps", "3", "--steps",
                "5", "--out", str(out), cwd=tmp_path)
    if r.returncode == 2 and "needs the optional package" in r.stderr:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    s = json.loads((out / "summary.json").read_text())
    assert meta["complete"], meta["messages"]
    assert s["gpu"]["has_activity"] and s["throughput"]["items_per_s"] > 0
    assert meta["capture"]["attribution"]["matched_kernels_pct"] >= 80
    row = {"workload": workload, "mode": mode, **_figures(s, meta)}
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "workloads_gpu.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")


@pytest.mark.gpu
def test_gpu_counters_pass_joins_ncu_counters(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = dnnprof("profile", "gpt2-tiny", "--device", "cuda", "--warmup-steps", "3", "--steps", "4", "--counters",
                "--out", str(out), cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr
    counters = json.loads((out / "meta.json").read_text())["capture"]["counters"]
    if counters["status"] in ("ncu-not-found", "permission"):
        pytest.skip(counters["message"])
    assert counters["status"] == "ok", counters
    assert counters["covered_gpu_time_pct"] >= 80
    assert (out / "counters" / "ncu.csv").is_file()
    from dnnprof.model.profile import Profile

    assert Profile.load(out / "profile").rows("counters") > 0

