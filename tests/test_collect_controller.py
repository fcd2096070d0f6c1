"""The collector's state machine in process, on the CPU, with CUDA faked where the controller asks about it.

The profiler windows record CPU activity instead of CUDA here (there is no GPU), but the sequence is the real one:
warm-up, timing window, one-step gap, attribution window, gap, baseline, export, finish; then the parent-side
assembly joins the two windows.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dnnprof.collect.config import CollectorConfig
from dnnprof.ingest.assemble import assemble

torch = pytest.importorskip("torch")


class FakeMemory:
    def __init__(self, torch: Any, device: int) -> None:
        self.n = 0

    def read_and_reset(self) -> tuple[int, int]:
        self.n += 1
        return 1000 * self.n, 4000


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.collect import controller, windows

    props = SimpleNamespace(total_memory=80 << 30, name="Fake GPU", major=9, minor=0, multi_processor_count=132,
                            uuid="0000")
    for name, value in (("is_available", lambda: True), ("is_initialized", lambda: True),
                        ("synchronize", lambda *a: None), ("current_device", lambda: 0),
                        ("get_device_properties", lambda d: props)):
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(windows.Window, "_activities", lambda self: [torch.profiler.ProfilerActivity.CPU])
    monkeypatch.setattr(controller, "StepMemory", FakeMemory)


def _train(ctl: Any, iterations: int) -> int:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for _ in range(iterations):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        done += 1
        if ctl.done:
            break
    return done


def _collect(tmp_path: Path, cfg: CollectorConfig, loop: Any) -> dict[str, Any]:
    """Run ``loop(ctl)`` under a controller; the collector's results."""
    from dnnprof.collect.controller import Controller

    ctl = Controller(torch, tmp_path, cfg)
    ctl.install()
    try:
        loop(ctl)
    finally:
        ctl.uninstall()
    ctl.finalize()
    return json.loads((tmp_path / "collector.json").read_text())


def test_default_mode_sequence_and_join(tmp_path: Path, fake_cuda: None) -> None:
    from dnnprof.collect.controller import Controller

    cfg = CollectorConfig(warmup_steps=3, steps=3, attribution_steps=2, baseline_after_steps=2, nvml=False)
    ctl = Controller(torch, tmp_path, cfg)
    ctl.install()
    try:
        iterations = _train(ctl, 50)
    finally:
        ctl.uninstall()
    ctl.finalize()
    # Step k ends at the (k+2)-th optimizer step; the plan ends at boundary 3+3+1+2+1+2 = 12.
    assert iterations == 13 and ctl.done and ctl.status == "complete"
    col = json.loads((tmp_path / "collector.json").read_text())
    assert col["step_source"] == "optimizer" and col["steps_completed"] == 12
    windows = {w["kind"]: w for w in col["windows"]}
    assert list(windows) == ["timing", "attribution"]
    assert (windows["timing"]["first_step"], windows["timing"]["last_step"]) == (3, 5)
    assert (windows["attribution"]["first_step"], windows["attribution"]["last_step"]) == (7, 8)
    assert windows["attribution"]["module_ranges"] and windows["attribution"]["module_calls"] == 2 * 4
    assert windows["timing"]["clock_probe"]["method"] == "record_function"
    assert windows["timing"]["op_scopes"] == "user" and not windows["timing"]["ops"]
    assert windows["attribution"]["op_scopes"] == "all" and windows["attribution"]["ops"]
    # Each window is written before the next session starts (Kineto converts GPU times when a trace is saved).
    assert 0 < windows["timing"]["exported_ns"] < windows["attribution"]["started_ns"]
    assert windows["attribution"]["exported_ns"] > windows["attribution"]["stopped_ns"]
    assert col["plan"]["pre_baseline"] == [2, 3] and col["plan"]["post_baseline"] == [10, 12]
    assert col["memory"]["per_step"]["step"] == list(range(2, 12))
    static = col["memory"]["static"]
    n = 8 * 16 + 16 + 16 * 2 + 2
    assert static == {"weights_bytes": 4 * n, "gradients_bytes": 4 * n, "optimizer_state_bytes": 0}
    assert col["environment"]["gpu"]["name"] == "Fake GPU"
    assert col["host_hotspots"]["samples"] >= 0
    assert (tmp_path / "trace" / "timing.json.gz").is_file() and (tmp_path / "trace" / "attribution.json.gz").is_file()

    from dnnprof.ingest.kineto import read_kineto

    timing = read_kineto(tmp_path / "trace" / "timing.json.gz")  # user ranges only: no aten op was recorded
    ranges = set(timing.names(timing.tables["ops"]["name_id"]).tolist())
    assert {"dnnprof.clock_sync", "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"} <= ranges
    assert not [r for r in ranges if r.startswith("aten::")], ranges  # torch's own ranges (Optimizer.step#…) stay
    profile, info = assemble(tmp_path, col)
    assert profile.tables["steps"]["number"].tolist() == [3, 4, 5]
    assert info["clock"]["found"] and abs(info["clock"]["offset_ns"]) < 1_000_000
    assert info["attribution"]["attribution_steps"] == [7, 8]
    names = set(profile.names(profile.tables["ops"]["name_id"]).tolist())
    assert {"dnnprof.module:Sequential|Sequential", "dnnprof.module:0|Linear", "ProfilerStep#8"} <= names
    assert profile.self_check() == []


def test_explicit_steps_win_over_optimizer_steps(tmp_path: Path) -> None:
    import dnnprof
    from dnnprof.collect.controller import Controller

    cfg = CollectorConfig(warmup_steps=5, steps=2, baseline_after_steps=0, nvml=False, host_sampling=False)
    ctl = Controller(torch, tmp_path, cfg)
    ctl.install()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for i in range(20):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            if i >= 3:  # the script starts marking steps late: counting restarts on the stronger source
                dnnprof.step(items=2)
            if ctl.done:
                break
    finally:
        ctl.uninstall()
    ctl.finalize()
    col = json.loads((tmp_path / "collector.json").read_text())
    assert col["step_source"] == "explicit" and col["status"] == "complete"
    assert col["step_items"] == [2] * col["steps_completed"]
    assert col["windows"][0]["kind"] == "cpu"  # no CUDA in use: one CPU window
    assert "step source switched from optimizer to explicit before the window" in col["notes"]
    assert col["steps_completed"] == 5 + 2  # counted from the first dnnprof.step() on


def test_script_that_ends_before_the_window(tmp_path: Path) -> None:
    col = _collect(tmp_path, CollectorConfig(warmup_steps=5, steps=5, nvml=False), lambda ctl: _train(ctl, 3))
    assert col["status"] == "too_few_steps" and col["steps_completed"] == 2 and col["windows"] == []


def test_a_built_in_workload_warms_up_until_its_steps_settle(tmp_path: Path, fake_cuda: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that get faster (GPU clocks, lazy kernels) push the window back until two medians agree."""
    import time

    from dnnprof.collect import schedule

    monkeypatch.setattr(schedule, "STEADY_MIN_WARMUP_S", 0.05)
    cfg = CollectorConfig(warmup_steps=3, steps=2, attribution_steps=1, baseline_after_steps=1, nvml=False,
                          warmup_until_steady=True)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def slow_then_steady(ctl: Any) -> None:
        for ms in [40, 40, 40, 30, 20, 10] + [5] * 40:  # per optimizer step
            time.sleep(ms / 1000)
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            if ctl.done:
                break

    col = _collect(tmp_path, cfg, slow_then_steady)
    w = col["warmup"]
    assert w["requested_steps"] == 3 and w["until_steady"] and w["reason"] == "steady"
    assert w["steps"] >= 8, w  # past the slow steps, and the 5 ms steps agree with the ones before them
    timing = next(x for x in col["windows"] if x["kind"] == "timing")
    assert timing["first_step"] == w["steps"] == col["plan"]["warmup"]
    assert any(n.startswith("warmed up") for n in col["notes"])
    assert col["status"] == "complete"


def test_a_script_keeps_the_warm_up_it_asked_for(tmp_path: Path, fake_cuda: None) -> None:
    cfg = CollectorConfig(warmup_steps=3, steps=2, attribution_steps=1, baseline_after_steps=1, nvml=False)
    col = _collect(tmp_path, cfg, lambda ctl: _train(ctl, 30))
    assert col["warmup"] == {"requested_steps": 3, "steps": 3, "until_steady": False, "reason": "requested"}


def test_the_ncu_pass_runs_until_the_step_it_counts(tmp_path: Path) -> None:
    """A steady warm-up can put the counted step past the configured plan: a built-in workload, which runs as many
    steps as the plan says, must still reach it under ncu."""
    from dnnprof.collect.controller import Controller

    for step in (5, 40):  # a timed step of the plan as configured, and one far past it
        cfg = CollectorConfig(mode="counters", warmup_steps=3, steps=4, nvml=False, counters_step=step)
        assert Controller(torch, tmp_path, cfg).plan.total_steps > step + 1  # the boundary after it ends the pass
