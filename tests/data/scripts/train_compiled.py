"""A ``torch.compile`` training loop: small transformer language model compiled with the default mode or
``mode="reduce-overhead"`` (Inductor's CUDA graphs), AdamW (fused), random tokens.

Usage: python train_compiled.py [--mode default|reduce-overhead] [--steps N] [--device cuda|cpu]

What a correct profile shows: one step per ``optimizer.step()`` (the first steps compile: keep ``--warmup-steps``
past them); forward, backward and optimizer phases all non-zero, the optimizer a small share of the step; the
model runs as Triton kernels (and, with ``reduce-overhead``, CUDA graph replays): ``compile-not-used`` must not
fire, nor ``optimizer-not-fused``.
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
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    vocab, d, layers, batch, seq = (8192, 256, 4, 16, 256) if dev.type == "cuda" else (500, 64, 2, 8, 32)
    model = TinyLM(vocab, d, layers).to(dev)
    compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev.type == "cuda")
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
        x, y = tokens[:, :-1], tokens[:, 1:]
        loss = loss_fn(compiled(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
