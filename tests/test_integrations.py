"""The Lightning profiler and the Hugging Face callback on the CPU: a tiny model, a few steps, a normal run
directory whose steps are the framework's iterations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def meta_of(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def test_lightning_profiler_writes_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    L = pytest.importorskip("lightning")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from dnnprof.integrations.lightning import DnnprofProfiler

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def training_step(self, batch: list, i: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    prof = DnnprofProfiler(warmup_steps=2, steps=3, out=tmp_path / "run")
    trainer = L.Trainer(max_steps=7, accelerator="cpu", devices=1, profiler=prof, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path))
    trainer.fit(Tiny(), DataLoader(data, batch_size=8))
    assert prof.path == tmp_path / "run"
    assert f"dnnprof: run directory (complete): {prof.path}" in capsys.readouterr().err
    meta = meta_of(prof.path)
    assert meta["status"] == "complete" and meta["capture"]["step_source"] == "explicit"
    summary = json.loads((prof.path / "summary.json").read_text())
    assert summary["steps"]["count"] == 3 and summary["throughput"]["items_per_step"] == 8


def test_lightning_profiler_bad_setting_fails_where_built() -> None:
    pytest.importorskip("lightning")
    from dnnprof.integrations.lightning import DnnprofProfiler

    with pytest.raises(ValueError, match="--steps must be at least 1"):
        DnnprofProfiler(steps=0)


def test_hf_callback_writes_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from dnnprof.integrations.hf import DnnprofCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict:
            ids = torch.randint(0, 100, (16,))
            return {"input_ids": ids, "labels": ids}

    cb = DnnprofCallback(warmup_steps=2, steps=3, out=tmp_path / "run")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=7,
                                          per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                          report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                                          disable_tqdm=True)
    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    assert cb.path == tmp_path / "run"
    assert f"dnnprof: run directory (complete): {cb.path}" in capsys.readouterr().err
    meta = meta_of(cb.path)
    assert meta["status"] == "complete" and meta["capture"]["step_source"] == "explicit"
    summary = json.loads((cb.path / "summary.json").read_text())
    # One step per optimizer update, carrying batch size x accumulation samples.
    assert summary["steps"]["count"] == 3 and summary["throughput"]["items_per_step"] == 4
