"""An inference loop with no optimizer and no markers: dnnprof must fall back to a whole-run profile."""

from __future__ import annotations

import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
with torch.inference_mode():
    for i in range(5):
        out = model(torch.randn(8, 32))
        print(f"batch {i} mean {out.mean().item():.4f}", flush=True)
