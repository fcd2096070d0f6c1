"""A plain CUDA training loop with no dnnprof markers: small transformer, AMP, DataLoader workers.

Usage: python train_cuda.py [--steps N] [--amp bf16|fp16|off] [--compile] [--workers W] [--infer]
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=g)


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "off"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--infer", action="store_true")
    args = p.parse_args()
    dev = torch.device("cuda")
    model = TinyLM().to(dev)
    step_model = torch.compile(model) if args.compile else model
    loader = DataLoader(Tokens(args.steps * 16, 128, 1000), batch_size=16, num_workers=args.workers,
                        pin_memory=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
    for i, batch in enumerate(loader):
        batch = batch.to(dev, non_blocking=True)
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            if args.infer:
                with torch.inference_mode():
                    step_model(x)
                continue
            logits = step_model(x)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if i % 10 == 0:
            print(f"step {i} loss {loss.item():.3f}", flush=True)
    torch.cuda.synchronize()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
