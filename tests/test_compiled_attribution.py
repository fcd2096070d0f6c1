"""torch.compile's generated kernels attributed to nn.Module layers (collect.compiled → ingest.compiled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnprof.collect.compiled import module_path, node_modules, node_source
from dnnprof.ingest.compiled import layer_label

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "data" / "scripts" / "compiled_models.py"


@pytest.mark.parametrize(("key", "fqn"), [
    ("L['self'].encoder.layers[0].linear1", "encoder.layers.0.linear1"),
    ("L['self']._modules['blocks']._modules['3'].attn", "blocks.3.attn"),
    ("L['mod'].head", "head"),
    ("L__self___stem_0", "_stem_0".strip("_")),
    ("L['self']", ""),
])
def test_module_path(key: str, fqn: str) -> None:
    assert module_path(key) == fqn


def test_node_modules_reads_forward_stack_of_backward_nodes() -> None:
    meta = {"fwd_nn_module_stack": {"1": ("L['self'].a", "torch.nn.modules.linear.Linear"),
                                    "2": ("L['self'].a.b", int)}}
    assert node_modules(meta) == [("a", "Linear"), ("a.b", "int")]
    assert node_source({"stack_trace": 'File "/x/site-packages/torch/nn/m.py", line 3, in f\n'
                                       'File "/u/train.py", line 12, in forward\n'}) == "/u/train.py:12 (forward)"


def test_layer_label_one_module_shared_and_root() -> None:
    lin = [["blocks", "ModuleList"], ["blocks.0", "Block"], ["blocks.0.mlp.0", "Linear"]]
    act = [["blocks", "ModuleList"], ["blocks.0", "Block"], ["blocks.0.mlp.1", "GELU"]]
    assert layer_label([lin, lin], "GPT") == ("blocks.0.mlp.0 (Linear)", [])
    assert layer_label([lin, act], "GPT") == ("blocks.0 (Block)", ["blocks.0.mlp.0 (Linear)", "blocks.0.mlp.1 (GELU)"])
    assert layer_label([lin, []], "GPT") == ("blocks.0.mlp.0 (Linear)", [])  # autograd glue without a stack
    assert layer_label([[], []], "GPT") == ("GPT", [])
    head = [["head", "Linear"]]
    assert layer_label([lin, head], "GPT")[0] == "GPT"  # nothing in common: the compiled root


@pytest.mark.slow
def test_compiled_cnn_inference_on_modules(tmp_path: Path) -> None:
    """Under dnnprof run the compiled CNN's C++ kernels and aten calls land on module layers (≥ 95 % of op self
    time), not on ``Torch-Compiled Region``; dnnprof records its graph."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "dnnprof.cli.main", "run", "-q", "--warmup-steps", "2", "--steps", "3",
                        "--step-marker", "infer_step", "--out", str(out), "--", sys.executable, str(SCRIPT),
                        "--model", "cnn", "--infer", "--steps", "6", "--device", "cpu", "--size", "tiny"],
                       env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((out / "compiled_kernels.json").read_text())
    if rec["status"] == "unavailable":
        pytest.skip(rec["note"])
    assert rec["roots"] == ["CNN"] and rec["graphs"] and rec["dynamo"]["graph_breaks"] == 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compiled_share import share

    s = share(out)
    # Inside the compiled graphs everything is on a module; overall, eager ops around them (the inputs' randn, whose
    # self time the machine's load can stretch) are op-level by right, so the overall share is checked loosely.
    assert s["compiled_module_share_pct"] >= 95.0 and s["module_share_pct"] >= 50.0, s
    assert s["phase_pct"]["forward"] == 100.0
    assert s["compiled"]["ops_unmatched"] == 0 and s["compiled"]["ops_matched"] > 0


@pytest.mark.slow
def test_compiled_cnn_training_kernels_keep_their_own_modules(tmp_path: Path) -> None:
    """A ``convolution_backward`` fallback lists among its origins the batch-norm/ReLU backward nodes whose results
    it consumes (and the block and the root around them); its record is its own convolution's module, so the cuDNN
    gradient kernels land on that ``Conv2d`` and not on the common parent or the compiled root. And the backward's
    shared constants (one ``full`` of 0 for every ReLU's ``threshold_backward``, made where the first ReLU was) do
    not pull every fused kernel of the backward up to the common parent of the first and the last block."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "dnnprof.cli.main", "run", "-q", "--warmup-steps", "2", "--steps", "2",
                        "--out", str(out), "--", sys.executable, str(SCRIPT), "--model", "cnn", "--train",
                        "--steps", "6", "--device", "cpu", "--size", "tiny"],
                       env=env, capture_output=True, text=True, timeout=400, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((out / "compiled_kernels.json").read_text())
    if rec["status"] == "unavailable":
        pytest.skip(rec["note"])
    # dnnprof's hooks never reach the compiled graphs: no graph break, no recompilation (the run's first forward,
    # before any optimizer step, is the compiled model's first call, which Dynamo traces).
    assert rec["dynamo"]["graph_breaks"] == 0 and rec["dynamo"]["recompiled_ids"] == [], rec["dynamo"]
    conv_bw = [k for k in rec["kernels"] if k["extern"] and "convolution_backward" in k["name"]]
    assert len(conv_bw) == 6, [k["name"] for k in rec["kernels"] if k["extern"]]  # stem + 2 per block + 1 downsample
    for k in conv_bw:
        assert len(k["module_stacks"]) == 1 and k["module_stacks"][0][-1][1] == "Conv2d", k
    block0 = [k for k in rec["kernels"] if not k["extern"] and rec["graphs"][k["graph"]]["backward"]
              and any(st and st[-1][0] == "layers.0.conv1" for st in k["module_stacks"])]
    assert block0, rec["kernels"]
    for k in block0:  # the gradient of block 0's first conv/bn/relu is block 0's own work
        assert not any(st and st[-1][0].startswith("layers.1") for st in k["module_stacks"]), k


@pytest.mark.slow
def test_a_compiled_function_around_an_eager_model_gets_no_module_ranges(tmp_path: Path) -> None:
    """``torch.compile(fn)`` where ``fn`` calls a plain module, in a script with no iterations: the whole-run window
    opens inside the compiled call, so it records no module ranges (they would be traced into the graph or, removed
    later, force a recompile); an eager script's whole-run window has them (test_cli_run)."""
    script = tmp_path / "infer_fn.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()\n"
        "@torch.compile\ndef infer(x):\n    return model(x).softmax(-1)\n"
        "with torch.inference_mode():\n    for i in range(6):\n        out = infer(torch.randn(8, 32))\n"
        "print('done', tuple(out.shape))\n")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "dnnprof.cli.main", "run", "-q", "--out", str(out), "--",
                        sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0 and "done (8, 4)" in r.stdout, r.stderr[-2000:]
    (window,) = json.loads((out / "collector.json").read_text())["windows"]
    assert window["kind"] == "whole_run" and window["module_ranges"] is False, window
    rec = json.loads((out / "compiled_kernels.json").read_text())
    if rec["status"] != "unavailable":
        # the one break is dnnprof's first-forward hook (torch.compiler.disable), which then removes itself
        assert rec["dynamo"]["graph_breaks"] <= 1 and rec["dynamo"]["recompiled_ids"] == [], rec["dynamo"]
