"""A real CPU sweep of a built-in ``-tiny`` workload: out-of-memory under --memory-limit, the search, a profile.

Each trial imports torch in a fresh process (about 3 s on an idle 2-core runner), so this file holds the two
sweeps that need real workloads; the runner's logic is tested on a stand-in script in test_sweep_runner.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dnnprof.runs.sweep import (
    SweepSpec,
    parse_batch_sizes,
    parse_size,
    run_sweep,
    script_target,
    trial_bound,
    workload_target,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
WORKLOAD = "deepspeech2-tiny"


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny models on a busy 2-core box run several times faster on one intra-op thread.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def spec(out: Path, **kw: object) -> SweepSpec:
    base = {"target": workload_target(WORKLOAD), "out": out, "device": "cpu", "steps": 1, "warmup_steps": 1,
            "profile_points": ()}
    return SweepSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_cpu_out_of_memory_is_real_and_the_search_pins_the_largest_batch(tmp_path: Path) -> None:
    # Calibrate: the address space one trial maps at batch 1 on this machine (same allocator settings as below).
    cal = run_sweep(spec(tmp_path / "cal", batches=parse_batch_sizes("1"), memory_limit=parse_size("100%")))
    base = cal["points"][0]["peak_address_space_bytes"]
    assert cal["points"][0]["status"] == "ok" and base > 100 * 2**20
    limit = base + 24 * 2**20  # room for roughly 20 samples of deepspeech2-tiny training
    doc = run_sweep(spec(tmp_path / "sw", batches=parse_batch_sizes("auto"), memory_limit=parse_size(str(limit))))
    (m,) = doc["max_batch_size"]
    pts = {p["batch_size"]: p for p in doc["points"]}
    best = m["batch_size"]
    assert best >= 4, pts
    assert m["exact"] and m["limited_by"] == "host_memory"
    assert pts[best]["status"] == "ok" and pts[best + 1]["status"] == "oom"
    assert any(s in pts[best + 1]["message"] for s in ("DefaultCPUAllocator", "MemoryError", "bad_alloc"))
    assert m["trials"] <= trial_bound(best), sorted(pts)
    ok = [p for p in pts.values() if p["status"] == "ok"]
    assert all(p["peak_address_space_bytes"] <= limit for p in ok)
    assert all(p["throughput_samples_per_s"] > 0 and p["step_time_ms"] > 0 for p in ok)
    assert ok[0]["throughput_unit"] == "audio_s/s" and ok[0]["device"]["kind"] == "cpu"


def test_precision_skip_modes_and_a_profile_through_dnnprof_profile(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    doc = run_sweep(spec(out, batches=parse_batch_sizes("2"), precisions=("fp32", "fp16"), modes=("train", "infer"),
                         profile_points=("default",), target=workload_target(WORKLOAD).__class__(
                             kind="workload", name=WORKLOAD, default_batch_size=2), steps=2, warmup_steps=2))
    by = {(p["precision"], p["mode"], p["kind"]): p for p in doc["points"]}
    fp16 = by[("fp16", "train", "probe")]
    assert fp16["status"] == "skipped" and "not run on CPU" in fp16["message"] and fp16["returncode"] is None
    assert ("fp16", "train", "profile") not in by
    prof = by[("fp32", "train", "profile")]
    assert prof["status"] == "ok", prof["message"]
    assert (out / prof["run_dir"] / "summary.json").is_file()
    ops = {k["name"] for k in prof["top_kernels"]}
    assert any("backward" in n for n in ops), ops  # a CPU profile ranks operators; training has backward ones
    infer_ops = {k["name"] for k in by[("fp32", "infer", "profile")]["top_kernels"]}
    assert not any("backward" in n for n in infer_ops), infer_ops
    assert json.loads((out / "sweep.json").read_text())["status"] == "complete"


def test_a_device_the_machine_lacks_is_a_skip_with_the_reason(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    doc = run_sweep(spec(tmp_path / "sw", device="cuda", batches=parse_batch_sizes("auto")))
    (p,) = doc["points"]
    assert p["status"] == "skipped" and "no CUDA GPU" in p["message"]
    assert doc["max_batch_size"][0]["limited_by"] == "unsupported"


def test_a_torch_script_gets_step_times_and_throughput(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "b = int(sys.argv[1])\n"
        "m = torch.nn.Linear(32, 32)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(8):\n"
        "    opt.zero_grad(); m(torch.randn(b, 32)).sum().backward(); opt.step()\n")
    doc = run_sweep(SweepSpec(target=script_target([sys.executable, str(script), "{batch_size}"]),
                              out=tmp_path / "sw", device="cpu", batches=parse_batch_sizes("16"), warmup_steps=2,
                              profile_points=()))
    (p,) = doc["points"]
    assert p["status"] == "ok" and p["steps_timed"] == 5  # 8 optimizer steps, 2 of warm-up, 5 intervals after
    assert p["step_time_ms"] > 0 and p["throughput_samples_per_s"] > 0 and p["peak_rss_bytes"] > 0
