"""``dnnprof run`` on ordinary user scripts, on the CPU: the profile must agree with what each script does.

The scripts (tests/data/scripts) carry no dnnprof markers; each docstring says what a correct profile shows, and
``user_script_checks.CASES`` says it as data. Here: the scripts that make sense on a CPU (a plain AdamW loop, the
same loop driven through ``optimizer.step(closure)``, gradient accumulation, a GAN, an inference loop over a
DataLoader, the Hugging Face GPT-2 loop when transformers is installed), each run once with 2 warm-up and 3 timed
steps. Phases on the CPU are the host's leaf ops put through the kernels' attribution (see
``user_script_checks``); the GPU twin is ``test_user_scripts_gpu.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from user_script_checks import (
    BY_NAME,
    CASES,
    Case,
    dnnprof_run,
    load_json,
    ranges_per_step,
    step_phases,
    violations,
)

WARMUP, STEPS = 2, 3
CPU_CASES = [c for c in CASES if c.cpu]


@pytest.fixture(scope="module")
def run_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Case], Path]:
    """The run directory of a case, each script profiled once per module."""
    done: dict[str, Path] = {}

    def get(case: Case) -> Path:
        if case.missing():
            pytest.skip(case.missing())
        if case.name not in done:
            out = tmp_path_factory.mktemp(case.name) / "run"
            r = dnnprof_run(case, out, device="cpu", warmup=WARMUP, steps=STEPS, timeout_s=300)
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stdout.splitlines()[-1] == "done"
            done[case.name] = out
        return done[case.name]

    return get


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_profile_agrees_with_the_script(case: Case, run_of: Callable[[Case], Path]) -> None:
    assert violations(case, run_of(case), steps=STEPS, gpu=False) == []


def test_grad_accumulation_step_is_one_optimizer_step_of_four_micro_batches(run_of: Callable[[Case], Path]) -> None:
    """One step per ``optimizer.step()``: 3 steps, each with 4 forward passes of the model and 1 optimizer step."""
    out = run_of(BY_NAME["grad-accum-4"])
    summary = load_json(out, "summary.json")
    assert summary["steps"]["count"] == STEPS and summary["steps"]["source"] == "optimizer"
    assert ranges_per_step(out, "Optimizer.step#") == [1] * STEPS
    assert ranges_per_step(out, "", exact="dnnprof.module:Classifier|Classifier") == [4] * STEPS
    per_step, _, where = step_phases(out)
    assert where == "cpu" and len(per_step) == STEPS
    # Every step does the work of 4 micro-batches: its forward and backward phases are not empty ...
    assert all(ph["forward"] > 0 and ph["backward"] > 0 for ph in per_step.values()), per_step
    assert summary["throughput"]["steps"] == STEPS


def test_inference_has_no_backward_and_no_optimizer(run_of: Callable[[Case], Path]) -> None:
    out = run_of(BY_NAME["inference"])
    summary = load_json(out, "summary.json")
    assert summary["steps"]["source"] == "dataloader" and summary["steps"]["count"] == STEPS
    per_step, mislabelled, _ = step_phases(out)
    assert per_step and all(ph["forward"] > 0 for ph in per_step.values())
    assert all(ph["backward"] == 0 and ph["optimizer"] == 0 for ph in per_step.values()), per_step
    assert not mislabelled
    assert not [f["id"] for f in summary["findings"] if f["id"].startswith("optimizer")]
