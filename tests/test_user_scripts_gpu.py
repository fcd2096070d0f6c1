"""``dnnprof run`` on ordinary user scripts on a GPU: the profile must agree with what each script does.

Every script of ``user_script_checks.CASES`` (Hugging Face GPT-2, Lightning ``Trainer``, fused / foreach /
per-parameter / closure optimizers, SGD with momentum, AMP with ``GradScaler``, gradient accumulation, a GAN, a
DataLoader-bound loop, an inference loop, ``torch.compile`` default and ``reduce-overhead``, a CUDA-graph decode
loop), each profiled once with 5 warm-up and 20 timed steps: steps, phases per step, no model kernel labelled
optimizer, no finding the script's code rules out, the profile's own self-checks (busy % against NVML/GPM among
them), and, for the decode loop, one positive step per CUDA graph replay. ``benchmarks/gpu/user_scripts_table.py`` runs the same cases for the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from user_script_checks import CASES, Case, dnnprof_run, graph_launches, load_json, violations

pytestmark = pytest.mark.gpu

WARMUP, STEPS = 5, 20


def _run(case: Case, tmp_path: Path) -> Path:
    if case.missing():
        pytest.skip(case.missing())
    out = tmp_path / "run"
    r = dnnprof_run(case, out, device="cuda", warmup=WARMUP, steps=STEPS, timeout_s=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[-1] == "done"
    return out


#: Measured on an H100 (PyTorch 2.11, 2026-11-27): under ``dnnprof run`` the decode script prints "done", its profile
#: is written at exit (the graph is captured inside the whole-run window), and then its process never ends (a CUPTI +
#: CUDA-graph stall in the teardown); dnnprof's exit watchdog (collect/exit_guard.py) ends it and the run passes on
#: the script's status 0.


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_profile_agrees_with_the_script(case: Case, tmp_path: Path) -> None:
    out = _run(case, tmp_path)
    summary = load_json(out, "summary.json")
    assert summary["gpu"]["has_activity"] and summary["gpu"]["busy_pct"] > 0
    phases = summary["phases"]
    if case.kind == "train":
        assert phases["forward_us"] > 0 and phases["backward_us"] > 0 and phases["optimizer_us"] > 0, phases
        assert phases["optimizer_us"] < phases["forward_us"] + phases["backward_us"], phases
    elif case.kind == "infer":
        assert phases["forward_us"] > 0 and phases["backward_us"] == 0 and phases["optimizer_us"] == 0, phases
    else:  # graph replays launch outside any op: forward or other, never backward or optimizer
        assert phases["backward_us"] == 0 and phases["optimizer_us"] == 0, phases
    assert violations(case, out, steps=STEPS, gpu=True) == []


def test_decode_loop_steps_are_the_graph_replays(tmp_path: Path) -> None:
    """No optimizer, no DataLoader, no markers: the iterations are the CUDA graph replays, each a positive step."""
    case = next(c for c in CASES if c.kind == "decode")
    out = _run(case, tmp_path)
    summary = load_json(out, "summary.json")
    launches = graph_launches(out)
    assert 0 < launches <= 400  # the script replays its graph 400 times
    steps = summary["steps"]
    # the repeating launch pattern (the run found no iterations of its own): the first and last may be partial
    assert launches - 2 <= steps["count"] <= launches, (steps["count"], steps["source"], launches)
    assert all(d > 0 for d in steps["durations_us"]) and all(d > 0 for d in steps["gpu_durations_us"])
