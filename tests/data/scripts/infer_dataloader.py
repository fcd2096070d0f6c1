"""An inference script over a DataLoader, with no optimizer and no markers: each batch starts an iteration.

Usage: python infer_dataloader.py [BATCH_SIZE] (default 8; 40 batches)."""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
loader = DataLoader(TensorDataset(torch.randn(40 * batch, 32)), batch_size=batch)
with torch.inference_mode():
    for i, (x,) in enumerate(loader):
        out = model(x)
        if i % 10 == 0:
            print(f"batch {i} mean {out.mean().item():.4f}", flush=True)
