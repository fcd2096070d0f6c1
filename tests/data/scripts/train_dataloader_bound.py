"""A DataLoader-bound training loop: a Dataset whose ``__getitem__`` does slow host work (decoding and augmenting
stand-ins, ~0.05 ms per sample, ~30 ms per batch of 512), ``num_workers=0``, so the GPU waits for every batch;
an MLP, AdamW.

Usage: python train_dataloader_bound.py [--steps N] [--batch-size B] [--item-ms MS] [--device cuda|cpu]

What a correct profile shows: one step per ``optimizer.step()``; forward, backward and optimizer phases all
non-zero; on a GPU the GPU idles most of each step waiting for data: ``dataloader-bound`` fires, GPU busy % is low
and agrees with NVML's utilisation.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    def __init__(self, n: int, d: int, item_ms: float) -> None:
        self.n, self.d, self.item_s = n, d, item_ms / 1e3

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        t0 = time.perf_counter()
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.d, generator=g)
        while time.perf_counter() - t0 < self.item_s:  # "decoding": host work, holds the GIL like real Python code
            x = x * 0.999 + 0.001
        return x, i % 10


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--item-ms", type=float, default=0.05)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    d = 1024
    model = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(SlowImages(args.steps * args.batch_size, d, args.item_ms), batch_size=args.batch_size,
                        shuffle=True, num_workers=0)
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(dev), y.to(dev)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
