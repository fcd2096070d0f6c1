"""Tests of the workload suite: registry, knobs, every -tiny workload on CPU, real-file data, memory helpers.

Tests needing transformers (gpt2, bert) or Pillow (image folders) skip when those are missing; CI should
install both (``pip install transformers pillow``) so they run. ``-m gpu`` runs every full-size workload on CUDA.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from dnnprof.workloads import (
    INSTALL_HINT,
    PRECISIONS,
    UNITS,
    DataError,
    InvalidConfig,
    MissingDependency,
    UnknownWorkload,
    UnsupportedConfig,
    WorkloadConfig,
    get_spec,
    knob_rows,
    registry_rows,
    workload_names,
)

torch = pytest.importorskip("torch")

TINY = workload_names(include_tiny=True)[1::2]
FULL = workload_names(include_tiny=False)
NEEDS_TRANSFORMERS = {"gpt2", "gpt2-tiny", "bert", "bert-tiny"}


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP threads waiting
    for each other made their steps 10-30x slower; restore the setting for other test modules."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except (ImportError, RuntimeError, OSError):  # a torchvision built for another torch raises RuntimeError
        return False
    return True


def _skip_without_requirements(name: str) -> None:
    for module in get_spec(name).requires:
        if not _importable(module):
            pytest.skip(f"{name} needs {module}")


def _build(name: str, **knobs):
    from dnnprof.workloads import build

    _skip_without_requirements(name)
    return build(name, **{"device": "cpu", **knobs})


def _param_checksum(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


# ----- registry and knobs (no torch needed) ---------------------------------------------------------------
def test_listing_the_registry_does_not_import_torch():
    code = (
        "import sys; from dnnprof.workloads import registry_rows, knob_rows; registry_rows(); knob_rows(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_workload_has_a_tiny_twin_and_complete_rows():
    rows = {r["name"]: r for r in registry_rows()}
    assert set(FULL) == {
        "deepspeech2",
        "gpt2",
        "resnet50",
        "inception_v3",
        "transformer",
        "seq2seq",
        "bert",
        "dcgan",
    }
    for name in FULL:
        assert f"{name}-tiny" in rows
    for row in rows.values():
        assert row["unit"] in UNITS
        # generate (prefill + decode with a KV cache) is a causal language model's
        assert row["modes"] == ("train,infer,generate" if row["name"].startswith("gpt2") else "train,infer")
        assert row["precisions"].split(",") == list(PRECISIONS)
        assert int(row["batch_size"]) >= 1
    assert rows["deepspeech2"]["unit"] == "audio_s/s"
    assert rows["gpt2"]["unit"] == rows["bert"]["unit"] == "tokens/s"
    assert rows["resnet50"]["requires"] == "torchvision"
    assert rows["resnet50-tiny"]["requires"] == ""
    assert [r["name"] for r in registry_rows(include_tiny=False)] == FULL


def test_knob_rows_cover_every_knob():
    assert [r["knob"] for r in knob_rows()] == WorkloadConfig.knobs()
    assert "amp-bf16" in next(r for r in knob_rows() if r["knob"] == "precision")["choices"]


def test_unknown_workload_lists_valid_names():
    with pytest.raises(UnknownWorkload, match=r"valid workloads: .*gpt2-tiny"):
        get_spec("gtp2")


@pytest.mark.parametrize(
    ("knobs", "match"),
    [
        ({"batchsize": 4}, "unknown workload knob.*batchsize.*valid knobs: batch_size, precision"),
        (
            {"precision": "fp8"},
            "unknown precision 'fp8'; valid choices: fp64, fp32, tf32, fp16, bf16, amp-fp16",
        ),
        ({"mode": "eval"}, "unknown mode 'eval'; valid choices: train, infer"),
        ({"device": "tpu"}, "valid choices: cuda, cpu"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"num_workers": -1}, "num_workers must be an integer >= 0"),
        ({"device": "cpu", "pin_memory": True}, "pin_memory=True needs device 'cuda'"),
        ({"data_dir": "no/such/dir"}, "no/such/dir: data_dir is not a directory"),
    ],
)
def test_bad_knobs_name_the_valid_choices(knobs, match):
    from dnnprof.workloads import build

    with pytest.raises(InvalidConfig, match=match):
        build("dcgan-tiny", **knobs)


def test_config_defaults_resolve_per_device():
    spec = get_spec("gpt2")
    cpu = WorkloadConfig(device="cpu").resolve(spec)
    assert (cpu.batch_size, cpu.num_workers, cpu.pin_memory) == (8, 0, False)
    cuda = WorkloadConfig.from_dict({"batch_size": 3}).resolve(spec)
    assert (cuda.batch_size, cuda.num_workers, cuda.pin_memory) == (3, 2, True)


@pytest.mark.parametrize("precision", ["fp16", "amp-fp16", "tf32"])
def test_precisions_a_cpu_cannot_run_are_unsupported(precision):
    with pytest.raises(UnsupportedConfig, match=f"precision '{precision}' is not supported on CPU"):
        _build("dcgan-tiny", precision=precision)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_unsupported():
    with pytest.raises(UnsupportedConfig, match="no CUDA GPU; use device 'cpu'"):
        _build("dcgan-tiny", device="cuda")


def test_missing_and_broken_packages_say_what_to_install(tmp_path, monkeypatch):
    from dnnprof.workloads.deps import require

    with pytest.raises(
        MissingDependency,
        match="needs the optional package 'no_such_pkg_x'.*" + INSTALL_HINT.replace("[", r"\["),
    ):
        require("no_such_pkg_x", purpose="test")
    (tmp_path / "broken_pkg_x.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ImportError, match="installed but fails to import \\(RuntimeError: operator torchvision::nms"
    ):
        require("broken_pkg_x", purpose="test")


# ----- every tiny workload trains and infers on CPU ---------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_tiny_workload_trains_and_infers_on_cpu(name):
    with _build(name, mode="train", precision="fp32") as wl:
        assert not torch.backends.cuda.matmul.allow_tf32
        before = _param_checksum(wl.model)
        for _ in range(2):
            wl.step()
        assert wl.steps_done == 2
        assert wl.items_processed == pytest.approx(2 * wl.items_per_step)
        assert math.isfinite(float(wl.last_loss))
        assert _param_checksum(wl.model) != before, "the optimizer did not change the weights"
        mem = wl.memory_breakdown()
        param_bytes = sum(p.nbytes for p in wl.model.parameters())
        assert mem.gradients_bytes == param_bytes
        assert mem.weights_bytes >= param_bytes
        assert mem.optimizer_state_bytes >= param_bytes  # momentum or Adam moments
        json.dumps(wl.describe())
    with _build(name, mode="infer", precision="fp32") as wl:
        assert wl.optimizers == [] and not wl.model.training
        before = _param_checksum(wl.model)
        for _ in range(2):
            wl.step()
        assert wl.items_processed == pytest.approx(2 * wl.items_per_step)
        assert _param_checksum(wl.model) == before
        assert wl.memory_breakdown().gradients_bytes == 0


def test_units_per_step_follow_the_domain():
    with _build("deepspeech2-tiny", batch_size=3, mode="infer") as wl:
        assert wl.items_per_step == 3 * get_spec("deepspeech2-tiny").params["audio_s"]
    with _build("transformer-tiny", batch_size=3, mode="infer") as wl:
        assert wl.items_per_step == 3


@pytest.mark.parametrize(
    ("precision", "dtype"), [("fp64", "float64"), ("bf16", "bfloat16"), ("amp-bf16", "float32")]
)
def test_precision_sets_weight_dtype_and_autocast(precision, dtype):
    with _build("dcgan-tiny", precision=precision) as wl:
        assert {p.dtype for p in wl.model.parameters()} == {getattr(torch, dtype)}
        assert (wl.plan.autocast_dtype is not None) == precision.startswith("amp")
        wl.step()
        assert math.isfinite(float(wl.last_loss))


def test_same_seed_same_model_and_data():
    losses = []
    for seed in (7, 7, 8):
        with _build("dcgan-tiny", seed=seed) as wl:
            torch.manual_seed(0)  # the noise drawn inside the step
            wl.step()
            losses.append(float(wl.last_loss))
    assert losses[0] == losses[1] != losses[2]


def test_step_marks_phases_for_the_profiler():
    from torch.profiler import ProfilerActivity, profile

    with _build("dcgan-tiny") as wl:
        wl.step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wl.step()
    names = {e.name for e in prof.events()}
    assert {"dnnprof/data", "dnnprof/forward", "dnnprof/backward", "dnnprof/optimizer"} <= names


def test_dataloader_workers_feed_the_step():
    with _build("dcgan-tiny", num_workers=1) as wl:
        assert wl.loader.num_workers == 1
        for _ in range(3):
            wl.step()
        assert math.isfinite(float(wl.last_loss))


def test_cycling_iterator_starts_new_epochs():
    from torch.utils.data import DataLoader

    from dnnprof.workloads.data import CyclingIterator

    it = CyclingIterator(DataLoader(list(range(4)), batch_size=2))
    assert [it.next().tolist() for _ in range(5)] == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]]
    assert it.epochs == 2


# ----- real files through data_dir -------------------------------------------------------------------------
def _write_wav(path: Path, seconds: float, rate: int) -> None:
    n = int(seconds * rate)
    samples = (torch.sin(torch.arange(n) * 2 * math.pi * 440 / rate) * 12000).to(torch.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(torch.stack([samples, samples], 1).numpy().tobytes())


def test_speech_from_wav_files_counts_real_audio_seconds(tmp_path):
    durations = [0.5, 0.25, 2.0, 0.75]  # the 2 s clip is cropped to the workload's 1 s
    for i, seconds in enumerate(durations):
        _write_wav(tmp_path / f"clip{i}.wav", seconds, rate=8000)  # resampled to 16 kHz
    (tmp_path / "clip0.txt").write_text("hello world")
    with _build("deepspeech2-tiny", data_dir=str(tmp_path), batch_size=4) as wl:
        wl.step()
        assert math.isfinite(float(wl.last_loss))
        assert wl.items_processed == pytest.approx(0.5 + 0.25 + 1.0 + 0.75, abs=1e-3)
    item = wl.loader.dataset[0]
    assert item["features"].shape == (1, 161, 101)
    assert item["targets"][: int(item["target_len"])].tolist() == [
        "_'ABCDEFGHIJKLMNOPQRSTUVWXYZ ".index(c) for c in "HELLO WORLD"
    ]


def test_bad_wav_and_empty_folders_raise_data_errors(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path}: no WAV files found"):
        _build("deepspeech2-tiny", data_dir=str(tmp_path))
    (tmp_path / "bad.wav").write_bytes(b"not a wav")
    with (
        pytest.raises(DataError, match=r"bad\.wav: not a PCM WAV file"),
        _build("deepspeech2-tiny", data_dir=str(tmp_path)) as wl,
    ):
        wl.step()


@pytest.mark.parametrize("name", ["resnet50-tiny", "inception_v3-tiny", "dcgan-tiny"])
def test_vision_from_image_folders(tmp_path, name):
    image = pytest.importorskip("PIL.Image")
    for label, color in enumerate(["red", "blue"]):
        folder = tmp_path / f"class{label}"
        folder.mkdir()
        for i, size in enumerate([(40, 30), (20, 50), (64, 64)]):
            image.new("RGB", size, color).save(folder / f"{i}.png" if i else folder / f"{i}.jpg")
    with _build(name, data_dir=str(tmp_path), batch_size=4) as wl:
        wl.step()
        wl.step()
        assert math.isfinite(float(wl.last_loss))
    size = get_spec(name).params["image_size"]
    assert wl.loader.dataset[0]["image"].shape == (3, size, size)
    if name != "dcgan-tiny":  # labels are folder indices
        assert [int(wl.loader.dataset[i]["label"]) for i in range(6)] == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("name", ["gpt2-tiny", "bert-tiny", "transformer-tiny", "seq2seq-tiny"])
def test_text_models_from_txt_files(tmp_path, name):
    (tmp_path / "a.txt").write_text("the quick brown fox\tle renard brun rapide\n" * 5)
    (tmp_path / "b.txt").write_text("jumps over the lazy dog\n")
    with _build(name, data_dir=str(tmp_path), batch_size=2) as wl:
        wl.step()
        wl.step()
        assert math.isfinite(float(wl.last_loss))
    text = wl.loader.dataset.base
    text = getattr(text, "base", text)  # BERT masks on top of the token blocks
    first = next(iter(text[0].values()))
    assert bytes(int(t) - 4 for t in first[:9]) == b"the quick"


def test_text_blocks_and_pairs_are_byte_tokens(tmp_path):
    from dnnprof.workloads.data import BOS, BYTE_OFFSET, EOS, PAD, TextBlockDataset, TextPairDataset

    (tmp_path / "a.txt").write_bytes(b"abc\tXY\nhello\n")
    blocks = TextBlockDataset([tmp_path / "a.txt"], block_len=4)
    assert blocks[0]["input_ids"].tolist() == [c + BYTE_OFFSET for c in b"abc\t"]
    pairs = TextPairDataset([tmp_path / "a.txt"], src_len=4, tgt_len=4)
    assert pairs[0]["src"].tolist() == [*(c + BYTE_OFFSET for c in b"abc"), PAD]
    assert pairs[0]["tgt"].tolist() == [BOS, *(c + BYTE_OFFSET for c in b"XY"), EOS, PAD]
    assert pairs[1]["src"].tolist() == [c + BYTE_OFFSET for c in b"hell"]  # copy task, truncated


# ----- memory helpers --------------------------------------------------------------------------------------
def test_memory_breakdown_counts_each_tensor_once():
    from torch import nn

    from dnnprof.workloads.memory import MemoryBreakdown, memory_breakdown

    embed = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = embed.weight  # tied, as in GPT-2
    model = nn.Sequential(embed, nn.BatchNorm1d(4), head)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    params = (40 + 4 + 4) * 4
    buffers = (4 + 4) * 4 + 8  # running mean/var (fp32) + num_batches_tracked (int64)
    assert memory_breakdown([model], [opt]) == MemoryBreakdown(params + buffers, 0, 0)
    model(torch.tensor([[1, 2]]).flatten()).sum().backward()
    opt.step()
    mem = memory_breakdown([model], [opt])
    assert (mem.gradients_bytes, mem.optimizer_state_bytes) == (params, params)
    assert mem.activations_other_bytes(mem.static_bytes + 100) == 100
    assert mem.as_dict(peak_allocated_bytes=0)["activations_other_bytes"] == 0


def test_tf32_switches_are_restored_on_close():
    from dnnprof.workloads.precision import set_tf32

    restore = set_tf32(True)
    try:
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        with _build("dcgan-tiny", precision="fp32"):
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        restore()


# ----- GPU: every full-size workload, both modes --------------------------------------------------------
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


def _run_on_cuda(name: str, mode: str, precision: str, **knobs) -> None:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with _build(name, device="cuda", mode=mode, precision=precision, **knobs) as wl:
        assert wl.device.type == "cuda"
        for _ in range(2):
            wl.step()
        wl.synchronize()
        assert wl.items_processed == pytest.approx(2 * wl.items_per_step, rel=1e-6)
        mem = wl.memory_breakdown()
        peak = torch.cuda.max_memory_allocated()
        assert 0 < mem.static_bytes <= peak
        if mode == "train":
            loss = float(wl.last_loss)
            assert math.isfinite(loss) or precision in ("fp16", "bf16"), f"{name} {precision}: loss {loss}"
            assert mem.gradients_bytes > 0
            # GradScaler skips the optimizer while its first scales overflow, so Adam may have no state yet.
            assert mem.optimizer_state_bytes > 0 or precision == "amp-fp16"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp-bf16"])
@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("name", FULL)
def test_full_size_workload_on_cuda(name, mode, precision):
    _run_on_cuda(name, mode, precision)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("name", TINY)
def test_tiny_workload_every_precision_on_cuda(name, mode, precision):
    _run_on_cuda(name, mode, precision, num_workers=1)
