"""Mixed precision the classic way: ``torch.autocast`` (fp16 on a GPU, bf16 on the CPU) and a
``torch.amp.GradScaler`` (scale, backward, ``scaler.step(optimizer)``, ``scaler.update()``); small transformer
language model, random tokens, AdamW.

Usage: python train_amp_scaler.py [--steps N] [--device cuda|cpu]

What a correct profile shows: one step per ``scaler.step(optimizer)`` that really stepped (a step skipped for
inf/NaN gradients ends no step); forward, backward and optimizer phases all non-zero, the optimizer a small share
of the step; the GEMMs run in half precision: ``amp-not-used`` must not fire.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    vocab, d, layers, batch, seq = (8192, 512, 4, 16, 256) if dev.type == "cuda" else (500, 64, 2, 8, 32)
    dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
    model = TinyLM(vocab, d, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(dev.type, enabled=dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
        x, y = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast(dev.type, dtype=dtype):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, vocab).float(), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f} scale {scaler.get_scale():.0f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
