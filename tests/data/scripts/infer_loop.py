"""An inference loop: a small convolutional classifier in ``eval()`` under ``torch.inference_mode()`` over a
DataLoader of random images; no optimizer, no markers.

Usage: python infer_loop.py [--batches N] [--batch-size B] [--device cuda|cpu]

What a correct profile shows: one step per DataLoader batch (source ``dataloader``); only the forward phase (no
backward, no optimizer: a backward or optimizer phase, or any optimizer finding, contradicts the script).
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def convnet(width: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1), nn.BatchNorm2d(4 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 10),
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=0, help="default: 64 on a GPU, 8 on the CPU")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    width, size = (64, 64) if dev.type == "cuda" else (8, 32)
    batch = args.batch_size or (64 if dev.type == "cuda" else 8)
    model = convnet(width).to(dev).eval()
    data = TensorDataset(torch.randn(args.batches * batch, 3, size, size))
    loader = DataLoader(data, batch_size=batch, pin_memory=dev.type == "cuda")
    predicted = torch.zeros(10, dtype=torch.long, device=dev)
    with torch.inference_mode():
        for i, (images,) in enumerate(loader):
            logits = model(images.to(dev, non_blocking=True))
            predicted += torch.bincount(logits.argmax(1), minlength=10)
            if i % 20 == 0:
                print(f"batch {i}", flush=True)
    print("predicted classes", predicted.tolist(), flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
