"""A plain training loop with no dnnprof markers: MLP on random data, SGD, DataLoader.

Usage: python train_plain.py [--steps N] [--batch-size B] [--workers W] [--fail-at STEP] [--exit-code C]
                             [--sleep S]
Prints one line per step ("step <i> loss <x>") and "argv <...>" first, so tests can check output and argv.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=-1)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of host work per step")
    args = p.parse_args()
    print("argv", " ".join(sys.argv[1:]), flush=True)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.steps * args.batch_size, 32), torch.randint(0, 4, (args.steps * args.batch_size,)))
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.workers)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):
        if i == args.fail_at:
            raise RuntimeError(f"deliberate failure at step {i}")
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if args.sleep:
            time.sleep(args.sleep)
        print(f"step {i} loss {loss.item():.4f}", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
