"""Data pipelines shared by the workloads: synthetic datasets, text files, the DataLoader and its cycling.

Synthetic data is a small pool of ready-made samples served round-robin, so a synthetic step costs only the
DataLoader's own work (indexing, collation, pinning, copy). Real files (``data_dir``) are decoded per sample
in ``__getitem__``, so their decoding cost shows up in the profile as it would in a real job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from dnnprof.workloads.errors import DataError

Sample = dict[str, torch.Tensor]

#: Distinct synthetic samples generated up front; items beyond repeat them.
POOL_SIZE = 16
#: Batches in one pass over a synthetic dataset before the DataLoader starts a new epoch.
SYNTHETIC_BATCHES_PER_EPOCH = 64

# Byte-level tokenisation: ids 0-3 are special, byte b is id b + BYTE_OFFSET. Fits any vocab of >= 260.
PAD, BOS, EOS, MASK = 0, 1, 2, 3
BYTE_OFFSET = 4
BYTE_VOCAB = 256 + BYTE_OFFSET


class SyntheticDataset(Dataset):
    """``length`` items served from a pool of ``POOL_SIZE`` samples made by ``make_sample(generator)``."""

    def __init__(self, make_sample: Callable[[torch.Generator], Sample], length: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.pool = [make_sample(gen) for _ in range(POOL_SIZE)]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Sample:
        return self.pool[index % len(self.pool)]


def find_files(data_dir: str, suffixes: tuple[str, ...], what: str) -> list[Path]:
    """Files under ``data_dir`` (recursively) whose suffix is in ``suffixes``, sorted.

    Raises:
        DataError: none found; the message names the folder and the suffixes looked for.
    """
    root = Path(data_dir)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    if not files:
        raise DataError(f"{data_dir}: no {what} files found (looked for {', '.join(suffixes)})")
    return files


def encode_bytes(data: bytes) -> torch.Tensor:
    """Byte-level token ids (int64) of ``data``."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64) + BYTE_OFFSET


class TextBlockDataset(Dataset):
    """Fixed-length blocks of byte tokens from ``.txt`` files, for language modelling.

    The files are read once (as a tokenised corpus would be memory-mapped); each item slices a block. A corpus
    shorter than one block is repeated to fill it.
    """

    def __init__(self, files: list[Path], block_len: int) -> None:
        text = b"\n".join(f.read_bytes() for f in files)
        if not text.strip():
            raise DataError(f"{files[0].parent}: the .txt files hold no text")
        if len(text) < block_len:
            text = text * (block_len // len(text) + 1)
        self.data = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        self.block_len = block_len
        self.n_blocks = len(text) // block_len

    def __len__(self) -> int:
        return self.n_blocks

    def __getitem__(self, index: int) -> Sample:
        start = (index % self.n_blocks) * self.block_len
        block = self.data[start : start + self.block_len].to(torch.int64) + BYTE_OFFSET
        return {"input_ids": block}


class TextPairDataset(Dataset):
    """Sentence pairs from ``.txt`` lines for translation: ``source<TAB>target``, or a line copied to itself.

    Items are ``src`` (padded to ``src_len``) and ``tgt`` (``BOS`` + target + ``EOS``, padded to
    ``tgt_len + 1``, so the decoder input and shifted output each have ``tgt_len`` tokens).
    """

    def __init__(self, files: list[Path], src_len: int, tgt_len: int) -> None:
        lines = [ln for f in files for ln in f.read_bytes().splitlines() if ln.strip()]
        if not lines:
            raise DataError(f"{files[0].parent}: the .txt files hold no non-empty lines")
        self.pairs = [_split_pair(ln) for ln in lines]
        self.src_len = src_len
        self.tgt_len = tgt_len

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Sample:
        src, tgt = self.pairs[index % len(self.pairs)]
        src_ids = _pad(encode_bytes(src)[: self.src_len], self.src_len)
        body = encode_bytes(tgt)[: self.tgt_len - 1]
        tgt_ids = torch.cat([torch.tensor([BOS]), body, torch.tensor([EOS])])
        return {"src": src_ids, "tgt": _pad(tgt_ids, self.tgt_len + 1)}


def _split_pair(line: bytes) -> tuple[bytes, bytes]:
    src, _, tgt = line.partition(b"\t")
    src, tgt = src.strip(), tgt.strip()
    return (src or tgt, tgt or src)


def _pad(ids: torch.Tensor, length: int) -> torch.Tensor:
    out = torch.full((length,), PAD, dtype=torch.int64)
    out[: len(ids)] = ids
    return out


class AtLeast(Dataset):
    """``base`` stretched to at least ``minimum`` items by wrapping around, so a small folder fills a batch."""

    def __init__(self, base: Dataset, minimum: int) -> None:
        self.base = base
        self.n = len(base)  # type: ignore[arg-type]
        self.length = max(self.n, minimum)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Sample:
        return self.base[index % self.n]


def make_loader(
    dataset: Dataset, *, batch_size: int, num_workers: int, pin_memory: bool, shuffle: bool, seed: int
) -> DataLoader:
    """A DataLoader that always yields full batches (static shapes) and keeps its workers between epochs."""
    dataset = AtLeast(dataset, batch_size)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=True,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        generator=torch.Generator().manual_seed(seed) if shuffle else None,
    )


class CyclingIterator:
    """Endless batches from a DataLoader: a new epoch starts whenever one ends."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self._it: Iterator[Sample] | None = None
        self.epochs = 0

    def next(self) -> Sample:
        """The next batch, starting a new epoch when the current one is exhausted."""
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self.epochs += 1
            self._it = iter(self.loader)
            return next(self._it)

    def close(self) -> None:
        """Drop the iterator so worker processes shut down."""
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
