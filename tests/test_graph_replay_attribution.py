"""CUDA-graph replays attributed to the layers they were captured from (ingest.graph_replays), on real H100 runs
of a GPT-style model under torch.compile (tests/data/compiled_h100, see its README).

Before: 0.0 % of the GPU time of reduce-overhead inference and 0.8 % of reduce-overhead training on module layers
(every replayed kernel on the step marker or ``Torch-Compiled Region``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dnnprof.analysis.attribution import PHASES, attribute
from dnnprof.ingest.assemble import assemble, load_collector
from dnnprof.ingest.graph_replays import apply_graph_replays
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile

DATA = Path(__file__).parent / "data"
RUNS = DATA / "compiled_h100"


def gpu_shares(profile: Profile) -> dict[str, Any]:
    """Share of the timed steps' kernel time on module layers (all of it, and without the optimizer), per phase
    and per layer."""
    k = profile.tables["kernels"]
    a = attribute(profile, "kernels")
    timed = k["step"] >= 0
    dur = np.where(timed, k["dur_ns"], 0).astype(np.float64)
    total = dur.sum()
    op_names = set(profile.names(profile.tables["ops"]["name_id"]).astype(str).tolist())
    module = np.fromiter((bool(x) and x not in op_names for x in a.layer), bool, a.layer.size)
    model = a.phase != PHASES.index("optimizer")
    layers: dict[str, float] = {}
    for lab, t in zip(a.layer[timed], dur[timed], strict=True):
        layers[lab] = layers.get(lab, 0.0) + 100 * t / total
    return {"module_pct": 100 * dur[module].sum() / total,
            "model_module_pct": 100 * dur[module & model].sum() / dur[model].sum(),
            "phase_pct": {p: 100 * dur[a.phase == i].sum() / total for i, p in enumerate(PHASES)},
            "layers_pct": layers, "steps": profile.tables["steps"]["number"].tolist()}


def _assembled(tmp_path_factory: pytest.TempPathFactory,
               names: tuple[str, ...]) -> dict[str, tuple[Profile, dict[str, Any]]]:
    """Each recorded run of ``compiled_h100`` assembled from a copy, with its shares."""
    out = {}
    for name in names:
        run = tmp_path_factory.mktemp(name) / "run"
        shutil.copytree(RUNS / name, run)
        profile, _ = assemble(run, load_collector(run))
        out[name] = (profile, gpu_shares(profile))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Profile, dict[str, Any]]]:
    return _assembled(tmp_path_factory, ("gpt_compile_infer", "gpt_ro_infer", "gpt_ro_train"))


def test_reduce_overhead_inference_replays_on_module_layers(runs: dict) -> None:
    profile, s = runs["gpt_ro_infer"]
    assert s["steps"] == [6, 7, 8, 9]
    assert s["module_pct"] > 99.9  # the input (randint, copy) is eager, outside the model
    assert s["phase_pct"]["forward"] == pytest.approx(100.0)
    replays = profile.meta["compiled"]["graph_replays"]
    assert replays["replays"] == 2 and replays["unmatched"] == 0  # the attribution window's two steps
    lay = s["layers_pct"]
    assert 24 < lay["head (Linear)"] < 26  # the LM head's GEMM, one per step
    # every block has its own GEMMs and attention: the replay is spread over the 12 blocks, not piled on one
    for b in range(12):
        assert 1.5 < lay[f"blocks.{b}.mlp.2 (Linear)"] < 2.0
        assert lay[f"blocks.{b}.attn (Attention)"] > 0.5


def test_reduce_overhead_training_replays_forward_and_backward(runs: dict) -> None:
    """Forward and backward graphs replay per step; what is left off module layers is eager code outside the
    model: AdamW (optimizer) and the loss the script computes after the model (op level)."""
    profile, s = runs["gpt_ro_train"]
    assert s["module_pct"] > 90.5
    assert s["model_module_pct"] > 96.5
    p = s["phase_pct"]
    assert 30 < p["forward"] < 34 and 60 < p["backward"] < 65 and 5 < p["optimizer"] < 7
    lay = s["layers_pct"]
    assert 2.5 < lay["aten::cross_entropy_loss"] < 3.5 and lay["Optimizer.step#AdamW.step"] > 5
    assert "Torch-Compiled Region: 0/0" not in lay
    replays = profile.meta["compiled"]["graph_replays"]
    assert replays["replays"] == 4 and replays["unmatched"] == 0
    assert replays["exact"] / replays["items"] > 0.8


def test_compiled_graph_calls_take_each_call_sites_record(runs: dict) -> None:
    """A generated kernel the graph calls in every block (the fused GELU) takes the record of its own call, and
    the attention call (recorded by its overload, ``…efficient_attention.default``) its Attention module: before,
    every GELU was block 0's and attention sat on the compiled root (9.5 %)."""
    profile, s = runs["gpt_compile_infer"]
    assert s["module_pct"] > 99.9  # the input (randint, copy) is eager, outside the model
    lay = s["layers_pct"]
    assert lay["GPT"] < 2.0  # only kernels fused across blocks (a block's residual add with the next's LayerNorm)
    a = attribute(profile, "kernels")
    names = profile.names(profile.tables["kernels"]["name_id"]).astype(str)
    timed = profile.tables["kernels"]["step"] >= 0
    gelu = timed & (names == "triton_poi_fused_addmm_gelu_view_2")
    assert sorted(set(a.layer[gelu])) == sorted(f"blocks.{b}.mlp (Sequential)" for b in range(12))
    attn = timed & np.char.startswith(names, "fmha_")
    assert set(a.layer[attn]) == {f"blocks.{b}.attn (Attention)" for b in range(12)}


def test_replays_of_an_uncompiled_graph_are_left_alone() -> None:
    """A hand-captured decode graph (tests/data/graph_replay_h100) shares no generated kernel with the records of
    a compiled model: its replays keep the launching op's attribution."""
    profile = read_kineto(DATA / "graph_replay_h100" / "trace.json.gz")
    doc = json.loads((RUNS / "gpt_ro_infer" / "compiled_kernels.json").read_text())
    info = apply_graph_replays(profile, doc)
    assert info["replays"] >= 24 and info["unmatched"] == info["items"] > 0
    assert (profile.tables["kernels"]["module_id"] == -1).all()


def test_compiled_runs_are_not_told_to_compile(runs: dict) -> None:
    """compile-not-used stays quiet on compile-default and reduce-overhead runs; without breaks or recompilations
    compile-graph-breaks does too."""
    from dnnprof.analysis.rules import findings_for
    from dnnprof.analysis.summary import summarize

    for profile, _ in runs.values():
        ids = [f["id"] for f in findings_for(profile, summarize(profile))]
        assert "compile-not-used" not in ids and "compile-graph-breaks" not in ids


GRAPH_BREAK_RUN = DATA / "compiled_cpu_graph_break"


def test_graph_break_finding_needs_a_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real CPU run with one forced graph break (torch._dynamo.graph_break()): the break is named from Dynamo's
    counters and measured from the nested compiled regions; it costs < 1 % of the step here, so the finding is
    quiet, and fires with its evidence once the threshold is below what it costs."""
    from dnnprof.analysis.rules import compiled
    from dnnprof.cli.sources import analysed

    run = tmp_path / "run"
    shutil.copytree(GRAPH_BREAK_RUN, run)
    a, doc = analysed(run, 0)
    assert "compile-graph-breaks" not in [f["id"] for f in doc["findings"]]
    from dnnprof.analysis.rules.context import Context

    monkeypatch.setattr(compiled, "GRAPH_BREAK_MIN_PCT", 0.0001)
    f = compiled.compile_graph_breaks(Context(a, doc))
    assert f is not None and f.evidence["graph_breaks"] == 1 and f.evidence["compiled_regions"] == 4
    assert list(f.evidence["graph_break_reasons"]) == ["Call to `torch._dynamo.graph_break()`"]
    assert 0 < f.evidence["pct_of_step"] < 1.0
    assert f.top and f.top[0]["name"].startswith("Torch-Compiled Region")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Profile, dict[str, Any]]]:
    """The models people run: Hugging Face GPT-2 124M trained and torchvision ResNet-50 served, both under
    ``torch.compile(mode="reduce-overhead")`` (CUDA-graph replays), recorded on an H100."""
    return _assembled(tmp_path_factory, ("gpt2_ro_train", "resnet50_ro_infer"))


def test_hugging_face_gpt2_training_replays_on_its_modules(models: dict) -> None:
    profile, s = models["gpt2_ro_train"]
    assert s["steps"] == [6, 7, 8, 9]
    assert s["module_pct"] > 92.5 and s["model_module_pct"] > 96.5  # AdamW and the script's loss are outside
    p = s["phase_pct"]
    assert 30 < p["forward"] < 34 and 61 < p["backward"] < 66 and 4 < p["optimizer"] < 5
    assert profile.meta["compiled"]["graph_replays"]["unmatched"] == 0
    lay = s["layers_pct"]
    assert 13 < lay["lm_head (Linear)"] < 15.5
    assert all(lay.get(f"transformer.h.{b}.mlp.c_fc (Conv1D)", 0) > 1.0 for b in range(12))
    assert lay["GPT2LMHeadModel"] < 9  # the root: work no submodule alone holds


def test_torchvision_resnet50_serving_replays_on_its_blocks(models: dict) -> None:
    profile, s = models["resnet50_ro_infer"]
    assert s["steps"] == [5, 6, 7, 8, 9]
    assert s["module_pct"] > 99.4 and s["phase_pct"]["forward"] == pytest.approx(100.0)
    r = profile.meta["compiled"]["graph_replays"]
    assert r["replays"] == 2 and r["unmatched"] == 0
    lay = s["layers_pct"]
    assert lay["conv1 (Conv2d)"] > 7 and lay["ResNet"] < 7
    def block(name: str) -> float:  # the block's own fused kernels and its convolutions'
        return sum(v for k, v in lay.items() if k.startswith((f"{name} ", f"{name}.")))

    for stage, blocks in (("layer1", 3), ("layer2", 4), ("layer3", 6), ("layer4", 3)):
        assert all(block(f"{stage}.{b}") > 2.0 for b in range(blocks)), stage
        assert all(lay.get(f"{stage}.{b}.conv2 (Conv2d)", 0) > 0.9 for b in range(blocks)), stage
