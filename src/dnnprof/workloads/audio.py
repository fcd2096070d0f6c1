"""Speech data: WAV decoding (stdlib ``wave``), spectrogram features and the speech datasets.

Features follow deepspeech.pytorch: 16 kHz audio, 20 ms Hamming window, 10 ms hop, log(1 + |STFT|) with
161 frequency bins, normalised per utterance. Labels use its 29-symbol alphabet (CTC blank first).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from dnnprof.workloads.errors import DataError

SAMPLE_RATE = 16_000
WINDOW_S = 0.02
HOP_S = 0.01
N_FFT = int(SAMPLE_RATE * WINDOW_S)
HOP = int(SAMPLE_RATE * HOP_S)
N_FREQ = N_FFT // 2 + 1
#: CTC blank, apostrophe, A-Z, space.
ALPHABET = "_'ABCDEFGHIJKLMNOPQRSTUVWXYZ "
N_CLASSES = len(ALPHABET)
#: Characters per second of speech, for synthetic transcripts (conversational English is ~12-15).
CHARS_PER_S = 12


def frames_for(n_samples: int) -> int:
    """Spectrogram frames of ``n_samples`` audio samples (centred STFT)."""
    return n_samples // HOP + 1


def ctc_frames(frames: int) -> int:
    """Frames left after Deep Speech 2's conv front end (stride 2 in time)."""
    return (frames - 1) // 2 + 1


def max_label_len(audio_s: float) -> int:
    """Longest transcript kept for a clip: at most one label per two CTC frames, so CTC stays feasible."""
    return ctc_frames(frames_for(int(audio_s * SAMPLE_RATE))) // 2


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the sample rate of an uncompressed PCM WAV file."""
    try:
        with wave.open(str(path), "rb") as w:
            n_channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except (wave.Error, EOFError) as exc:
        raise DataError(f"{path}: not a PCM WAV file ({exc})") from exc
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise DataError(f"{path}: {8 * width}-bit WAV samples are not supported (use 8, 16 or 32-bit PCM)")
    return x.reshape(-1, n_channels).mean(axis=1), rate


def resample(x: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Linear-interpolation resampling (good enough for features whose cost, not accuracy, matters)."""
    if rate == target or len(x) == 0:
        return x
    n_out = max(1, round(len(x) * target / rate))
    return np.interp(np.linspace(0, len(x) - 1, n_out), np.arange(len(x)), x).astype(np.float32)


def spectrogram(samples: torch.Tensor) -> torch.Tensor:
    """Normalised log-magnitude spectrogram, shape ``[N_FREQ, frames]``."""
    spec = torch.stft(
        samples,
        N_FFT,
        hop_length=HOP,
        win_length=N_FFT,
        window=torch.hamming_window(N_FFT),
        center=True,
        return_complex=True,
    )
    feats = torch.log1p(spec.abs())
    return (feats - feats.mean()) / (feats.std() + 1e-5)


def encode_transcript(text: str) -> torch.Tensor:
    """Label ids of ``text`` in ``ALPHABET`` (case-folded; other characters dropped)."""
    index = {c: i for i, c in enumerate(ALPHABET)}
    return torch.tensor([index[c] for c in text.upper() if c in index and c != "_"], dtype=torch.int64)


def synthetic_sample(gen: torch.Generator, audio_s: float) -> dict[str, torch.Tensor]:
    """One synthetic utterance: features as after normalisation, a random transcript."""
    frames = frames_for(int(audio_s * SAMPLE_RATE))
    n_labels = min(max_label_len(audio_s), max(1, int(CHARS_PER_S * audio_s)))
    return {
        "features": torch.randn(1, N_FREQ, frames, generator=gen),
        "feature_len": torch.tensor(frames),
        "targets": torch.randint(1, N_CLASSES, (n_labels,), generator=gen),
        "target_len": torch.tensor(n_labels),
        "audio_s": torch.tensor(float(audio_s)),
    }


class WavDataset(Dataset):
    """Speech clips from WAV files, decoded and featurised per item, cropped or zero-padded to ``audio_s``.

    A transcript comes from ``<stem>.txt`` beside the WAV when there is one, else from the file name's
    letters. ``audio_s`` in each item is the unpadded duration, which is what throughput counts.
    """

    def __init__(self, files: list[Path], audio_s: float) -> None:
        self.files = files
        self.max_samples = int(audio_s * SAMPLE_RATE)
        self.frames = frames_for(self.max_samples)
        self.max_labels = max_label_len(audio_s)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        path = self.files[index]
        x, rate = read_wav(path)
        x = resample(x, rate)[: self.max_samples]
        n = len(x)
        padded = np.zeros(self.max_samples, np.float32)
        padded[:n] = x
        feats = spectrogram(torch.from_numpy(padded))
        used_frames = min(self.frames, frames_for(n))
        transcript = path.with_suffix(".txt")
        text = transcript.read_text(errors="replace") if transcript.is_file() else path.stem.replace("_", " ")
        labels = encode_transcript(text)[: self.max_labels]
        if len(labels) == 0:
            labels = torch.tensor([ALPHABET.index(" ")])
        targets = torch.zeros(self.max_labels, dtype=torch.int64)
        targets[: len(labels)] = labels
        return {
            "features": feats.unsqueeze(0),
            "feature_len": torch.tensor(used_frames),
            "targets": targets,
            "target_len": torch.tensor(len(labels)),
            "audio_s": torch.tensor(n / SAMPLE_RATE, dtype=torch.float32),
        }
