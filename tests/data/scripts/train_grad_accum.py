"""Gradient accumulation: the optimizer steps once every 4 micro-batches (a small MLP classifier, random data).

Usage: python train_grad_accum.py [--steps N] [--accum 4] [--device cuda|cpu]
``--steps`` counts optimizer steps; the loop runs ``steps * accum`` micro-batches.

What a correct profile shows: one step per ``optimizer.step()``, not per micro-batch (so each step holds 4
forward and 4 backward passes and lasts about 4 micro-batches); forward, backward and optimizer phases all
non-zero, the optimizer a small share of the step (it runs once for 4 forward/backward passes).
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, d_in: int, width: int, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                                  nn.Linear(width, width), nn.GELU())
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    d_in, width, batch = (1024, 4096, 256) if dev.type == "cuda" else (64, 256, 32)
    model = Classifier(d_in, width, 10).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        for _ in range(args.accum):
            x = torch.randn(batch, d_in, device=dev)
            y = torch.randint(0, 10, (batch,), device=dev)
            loss = loss_fn(model(x), y) / args.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item() * args.accum:.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
