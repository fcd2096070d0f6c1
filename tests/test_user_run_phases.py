"""Phases of ``dnnprof run`` on ordinary training scripts, from real H100 run directories re-assembled here.

``tests/data/run_user_h100`` (README there): an HF-style GPT-2 loop with ``AdamW(fused=True)``, a Lightning
``Trainer`` (the optimizer runs forward and backward in a closure inside ``Optimizer.step#``) and a plain loop with
foreach AdamW under fp16 autocast and a ``GradScaler``. The optimizer post-hook that ends each iteration runs inside
``Optimizer.step#``, so every ``ProfilerStep#N`` starts there: once, every forward kernel came out ``optimizer``
and ``optimizer-not-fused`` was the first finding on the fused script.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from dnnprof.analysis.attribution import PHASES, attribute
from dnnprof.analysis.kernel_names import family
from dnnprof.analysis.rules import findings_for
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.assemble import assemble, load_collector

RUNS = Path(__file__).parent / "data" / "run_user_h100"
SCRIPTS = ("hf_fused", "lightning", "cuda_fp16")


@pytest.fixture(scope="module", params=SCRIPTS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    name = request.param
    d = tmp_path_factory.mktemp(name) / name
    shutil.copytree(RUNS / name, d)
    profile, _ = assemble(d, load_collector(d))
    doc = summarize(profile)
    doc["findings"] = findings_for(profile, doc)
    return name, profile, doc


def _kernel_phases(profile: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    att = attribute(profile)  # type: ignore[arg-type]
    k = profile.tables["kernels"]  # type: ignore[attr-defined]
    names = profile.names(k["name_id"]).astype(object)  # type: ignore[attr-defined]
    return att.phase, names, k["dur_ns"]


def test_every_training_script_has_forward_backward_and_optimizer_time(run: tuple) -> None:
    name, _, doc = run
    ph = doc["phases"]
    assert ph["forward_us"] > 0 and ph["backward_us"] > 0 and ph["optimizer_us"] > 0, (name, ph)
    # A forward pass costs less than the backward pass over the same layers, and more than nothing.
    assert 0.2 < ph["forward_us"] / ph["backward_us"] < 1.0, (name, ph)


def test_optimizer_phase_holds_only_optimizer_kernels(run: tuple) -> None:
    name, profile, _ = run
    phase, names, _ = _kernel_phases(profile)
    opt = phase == PHASES.index("optimizer")
    # multi-tensor updates, and GradScaler's scale update (its own kernel)
    fams = {family(n) for n in set(names[opt].tolist()) if "amp_update_scale" not in n}
    assert fams <= {"optimizer"}, (name, fams)
    # and no GEMM, attention or normalisation kernel of the model is filed under the optimizer
    assert not any(family(n) in ("gemm", "attention", "norm") for n in names[opt])


def test_gradscaler_unscale_and_update_are_optimizer_work(run: tuple) -> None:
    name, profile, _ = run
    if name != "cuda_fp16":
        pytest.skip("only the GradScaler run unscales")
    phase, names, _ = _kernel_phases(profile)
    amp = np.array(["amp_update_scale" in n for n in names])
    assert amp.any() and (phase[amp] == PHASES.index("optimizer")).all()


def test_closure_optimizer_keeps_the_forward_layers(run: tuple) -> None:
    """Lightning runs forward and backward inside ``Optimizer.step#``: those kernels keep their modules and phases,
    and only the update itself is the optimizer."""
    name, profile, _ = run
    if name != "lightning":
        pytest.skip("only Lightning steps through a closure")
    att = attribute(profile)
    opt = att.phase == PHASES.index("optimizer")
    assert not any(lay.startswith("Optimizer.step#") for lay in att.layer[~opt])
    assert {lay for lay in att.layer[att.phase == PHASES.index("forward")]} >= {"0 (Linear)", "2 (Linear)"}


def test_no_optimizer_finding_contradicts_the_script(run: tuple) -> None:
    name, _, doc = run
    ids = [f["id"] for f in doc["findings"]]
    if name == "hf_fused":  # AdamW(fused=True): nothing to fuse
        assert "optimizer-not-fused" not in ids
    for f in doc["findings"]:
        if f["id"] == "optimizer-not-fused":  # the foreach AdamW: its offenders are optimizer kernels
            text = repr(f["evidence"]) + repr(f.get("top"))
            assert "nvjet" not in text and "gemm" not in text.lower(), f["evidence"]
            # Its GPU span holds no forward or backward kernel: with a GradScaler the scale update opens each
            # step and the unscale comes after backward; first-to-last would span the whole step.
            ph, n = doc["phases"], doc["steps"]["count"]
            model_us = (ph["forward_us"] + ph["backward_us"]) / n
            assert f["evidence"]["gpu_span_us_per_step"] < doc["gpu"]["window_us"] / n - model_us, f["evidence"]
