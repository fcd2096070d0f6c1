"""The ``serving`` section: prefill/decode iterations and the time per output token, on a real CUDA-graph decode
loop (tests/data/graph_replay_h100), on a real CPU generate run of ``gpt2-tiny`` recorded here, and absent on
training and batch-inference traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import CPU_MLP, GPT2, load_raw
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.kineto import read_kineto

DATA = Path(__file__).parent / "data"
REPLAYS = DATA / "graph_replay_h100" / "trace.json.gz"


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is absent")


def test_graph_replay_loop_is_a_decode_loop() -> None:
    _need(REPLAYS)
    s = summarize(read_kineto(REPLAYS))["serving"]
    assert s["source"] == "graph_replay" and s["measured_on"] == "gpu"
    assert s["prefill"] is None  # one captured decode step, replayed: no prefill in the window
    d = s["decode"]
    assert d["iterations"] == 24 and d["kernels_per_iteration"] == 115
    # Reference from the raw JSON: each replay's kernels share its correlation id; a decode iteration runs from its
    # first kernel to the next replay's first kernel (the last one to its own last kernel end).
    ks = [e for e in load_raw(REPLAYS)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    by: dict[int, list[tuple[float, float]]] = {}
    for e in ks:
        by.setdefault(e["args"]["correlation"], []).append((e["ts"], e["ts"] + e["dur"]))
    firsts = sorted(min(a for a, _ in v) for v in by.values())
    last_end = max(b for v in by.values() for _, b in v)
    periods_us = np.diff([*firsts, last_end])
    assert s["time_per_output_token_ms"] == pytest.approx(float(np.median(periods_us)) / 1e3, abs=2e-3)
    b = s["time_per_output_token_breakdown_ms"]
    assert sum(b.values()) == pytest.approx(s["time_per_output_token_ms"], abs=1e-3)
    assert b["communication_ms"] == 0 and b["compute_ms"] > 0.9 * s["time_per_output_token_ms"]
    assert s["decode_tokens_per_s"] == pytest.approx(1000 / s["time_per_output_token_ms"], rel=1e-3)


@pytest.mark.parametrize("path", [GPT2, CPU_MLP, DATA / "h100_recorded" / "cnn_infer_bf16.json.gz",
                                  DATA / "h100_recorded" / "cnn_infer_nomarkers.json.gz",
                                  DATA / "compiled_h100" / "gpt_ro_train" / "trace" / "timing.json.gz",
                                  DATA / "compiled_h100" / "gpt_ro_infer" / "trace" / "timing.json.gz"],
                         ids=lambda p: "/".join(Path(p).parts[-3:]))
def test_no_serving_section_on_training_or_batch_inference(path: Path) -> None:
    _need(path)
    assert "serving" not in summarize(read_kineto(path))


@pytest.fixture(scope="module")
def generate_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dnnprof.workloads import build

    out = tmp_path_factory.mktemp("gen") / "trace.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with build("gpt2-tiny", mode="generate", device="cpu", batch_size=2) as wl:
            wl.step()  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(2):
                    wl.step()
                    prof.step()
            assert wl.items_processed == 3 * 2 * 16  # tokens generated: 3 sequences of 16 per batch item
    finally:
        torch.set_num_threads(threads)
    prof.export_chrome_trace(str(out))
    return out


def test_cpu_generate_run_splits_prefill_and_decode(generate_trace: Path) -> None:
    doc = summarize(read_kineto(generate_trace))
    s = doc["serving"]
    assert s["source"] == "annotation" and s["measured_on"] == "host"
    assert s["prefill"]["iterations"] == 2 and s["decode"]["iterations"] == 2 * 15
    assert s["time_per_output_token_breakdown_ms"] is None  # no GPU: no compute/idle split
    ev = json.loads(Path(generate_trace).read_text())["traceEvents"]
    ann = sorted((e for e in ev if e.get("cat") == "user_annotation" and e.get("name") in ("prefill", "decode")),
                 key=lambda e: e["ts"])
    # A decode followed by a decode lasts until the next one starts; the others their own range.
    dur = [(b["ts"] - a["ts"]) if a["name"] == b["name"] == "decode" else a["dur"]
           for a, b in zip(ann, [*ann[1:], {"name": ""}], strict=True)]
    decode = [d for d, a in zip(dur, ann, strict=True) if a["name"] == "decode"]
    prefill = [d for d, a in zip(dur, ann, strict=True) if a["name"] == "prefill"]
    assert s["time_per_output_token_ms"] == pytest.approx(float(np.median(decode)) / 1e3, abs=2e-3)
    assert s["prefill"]["median_ms"] == pytest.approx(float(np.median(prefill)) / 1e3, abs=2e-3)


def test_generate_mode_matches_a_full_recompute() -> None:
    """The static-cache loop generates what greedy decoding without a cache does, and again on a second call."""
    pytest.importorskip("transformers")
    import torch

    from dnnprof.workloads import build

    with build("gpt2-tiny", mode="generate", device="cpu", batch_size=2) as wl:
        batch = wl.to_device(next(iter(wl.loader)))
        with torch.inference_mode():
            a = wl.generate(batch)
            b = wl.generate(batch)
            seq, ref = batch["input_ids"][:, :16], []
            for _ in range(16):
                t = wl.model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
                ref.append(t)
                seq = torch.cat([seq, t], 1)
    assert a.shape == (2, 16) and torch.equal(a, b) and torch.equal(a, torch.cat(ref, 1))


def test_generate_is_refused_where_the_workload_has_no_such_mode() -> None:
    from dnnprof.workloads import InvalidConfig, build

    with pytest.raises(InvalidConfig, match=r"unknown mode 'generate'; valid choices: train, infer$"):
        build("resnet50-tiny", mode="generate", device="cpu")


