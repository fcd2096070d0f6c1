"""Deep Speech 2: conv front end, stacked bidirectional RNNs, CTC loss (after SeanNaren/deepspeech.pytorch).

torchaudio's ``DeepSpeech`` is Deep Speech 1 (fully connected layers, one RNN), so the model is built here.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from dnnprof.workloads import audio
from dnnprof.workloads.base import Workload
from dnnprof.workloads.data import SYNTHETIC_BATCHES_PER_EPOCH, SyntheticDataset, find_files

_RNNS = {"lstm": nn.LSTM, "gru": nn.GRU}


class SequenceBatchNorm(nn.Module):
    """BatchNorm1d over the features of a ``[T, B, H]`` sequence."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, b, h = x.shape
        return self.norm(x.reshape(t * b, h)).reshape(t, b, h)


class BatchRNN(nn.Module):
    """Optional sequence batch norm, then a bidirectional RNN whose two directions are summed."""

    def __init__(self, input_size: int, hidden: int, rnn_type: str, batch_norm: bool) -> None:
        super().__init__()
        self.norm = SequenceBatchNorm(input_size) if batch_norm else None
        self.rnn = _RNNS[rnn_type](input_size, hidden, bidirectional=True, bias=True)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            x = self.norm(x)
        x, _ = self.rnn(x)
        t, b, _ = x.shape
        return x.view(t, b, 2, self.hidden).sum(dim=2)


class DeepSpeech2(nn.Module):
    """Deep Speech 2 acoustic model.

    Input ``[B, 1, n_freq, T]`` spectrograms; output ``[T', B, n_classes]`` log-probabilities with
    ``T' = ctc_frames(T)``.
    """

    def __init__(
        self, n_freq: int, n_classes: int, conv_channels: int, rnn_type: str, rnn_hidden: int, rnn_layers: int
    ) -> None:
        super().__init__()
        c = conv_channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, c, kernel_size=(41, 11), stride=(2, 2), padding=(20, 5), bias=False),
            nn.BatchNorm2d(c),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(c, c, kernel_size=(21, 11), stride=(2, 1), padding=(10, 5), bias=False),
            nn.BatchNorm2d(c),
            nn.Hardtanh(0, 20, inplace=True),
        )
        freq = (n_freq + 2 * 20 - 41) // 2 + 1
        freq = (freq + 2 * 10 - 21) // 2 + 1
        sizes = [c * freq] + [rnn_hidden] * rnn_layers
        self.rnns = nn.Sequential(
            *(BatchRNN(sizes[i], rnn_hidden, rnn_type, batch_norm=i > 0) for i in range(rnn_layers))
        )
        self.fc = nn.Sequential(SequenceBatchNorm(rnn_hidden), nn.Linear(rnn_hidden, n_classes, bias=False))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.conv(features)  # [B, C, F', T']
        b, c, f, t = x.shape
        x = x.view(b, c * f, t).permute(2, 0, 1).contiguous()  # [T', B, C*F']
        x = self.rnns(x)
        logits = self.fc(x)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # CTC needs fp32 (or fp64) log-probabilities
        return F.log_softmax(logits, dim=-1)


class DeepSpeech2Workload(Workload):
    """Deep Speech 2 on 161-bin spectrograms with CTC; throughput in seconds of audio per second."""

    def build_model(self) -> nn.Module:
        p = self.params
        return DeepSpeech2(
            n_freq=audio.N_FREQ,
            n_classes=audio.N_CLASSES,
            conv_channels=p["conv_channels"],
            rnn_type=p["rnn_type"],
            rnn_hidden=p["rnn_hidden"],
            rnn_layers=p["rnn_layers"],
        )

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.SGD(self.model.parameters(), lr=3e-4, momentum=0.9, nesterov=True, weight_decay=1e-5)
        ]

    def build_synthetic_dataset(self) -> Dataset:
        audio_s = self.params["audio_s"]
        return SyntheticDataset(
            lambda gen: audio.synthetic_sample(gen, audio_s),
            length=self.batch_size * SYNTHETIC_BATCHES_PER_EPOCH,
            seed=self.config.seed,
        )

    def build_real_dataset(self, data_dir: str) -> Dataset:
        return audio.WavDataset(find_files(data_dir, (".wav",), "WAV"), self.params["audio_s"])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        log_probs = self.model(batch["features"])
        out_len = torch.div(batch["feature_len"] - 1, 2, rounding_mode="floor") + 1
        return F.ctc_loss(
            log_probs, batch["targets"], out_len, batch["target_len"], blank=0, zero_infinity=True
        )

    def infer(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scores(batch).argmax(dim=-1)  # greedy CTC decoding, collapsed on the host

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["features"])

    def nominal_items_per_step(self) -> float:
        return self.batch_size * float(self.params["audio_s"])

    def batch_items(self, batch: dict[str, torch.Tensor]) -> float:
        return float(batch["audio_s"].sum())

    @property
    def input_desc(self) -> str:
        frames = audio.frames_for(int(self.params["audio_s"] * audio.SAMPLE_RATE))
        return f"{self.batch_size} x {self.params['audio_s']} s audio = {frames} frames x {audio.N_FREQ} bins"
