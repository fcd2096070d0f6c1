"""A Lightning ``Trainer`` script (``lightning`` or, failing that, ``pytorch_lightning``): a small transformer
language model as a ``LightningModule``, AdamW from ``configure_optimizers``, random tokens from a DataLoader,
``accelerator="auto"`` (the GPU when there is one; bf16-mixed precision there).

Usage: python train_lightning_trainer.py [--steps N]

What a correct profile shows: one step per optimizer step (Lightning calls ``optimizer.step(closure)``: forward
and backward run inside the closure, within the optimizer's own ``step`` range, and are still forward and
backward); forward, backward and optimizer phases all non-zero, the optimizer a small share of the step.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning as L
except ImportError:
    import pytorch_lightning as L  # type: ignore[no-redef]


class LitLM(L.LightningModule):
    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        logits = self(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    gpu = torch.cuda.is_available()
    torch.manual_seed(0)
    vocab, d, layers, batch, seq = (8192, 256, 4, 16, 256) if gpu else (500, 64, 2, 8, 32)
    data = TensorDataset(torch.randint(0, vocab, (args.steps * batch, seq + 1)))
    trainer = L.Trainer(max_steps=args.steps, accelerator="auto", devices=1, precision="bf16-mixed" if gpu else 32,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(LitLM(vocab, d, layers), DataLoader(data, batch_size=batch, shuffle=True))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
