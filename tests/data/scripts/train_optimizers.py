"""A plain training loop (small transformer language model, random tokens) with the optimizer a user picks.

Usage: python train_optimizers.py [--optimizer adamw-foreach|adamw-fused|adamw-for-loop|sgd-momentum]
                                  [--closure] [--steps N] [--device cuda|cpu]

  adamw-foreach   torch.optim.AdamW(params) with PyTorch's default implementation (foreach on CUDA)
  adamw-fused     torch.optim.AdamW(params, fused=True)
  adamw-for-loop  torch.optim.AdamW(params, foreach=False): one set of kernels per parameter
  sgd-momentum    torch.optim.SGD(params, momentum=0.9) (default implementation: foreach on CUDA)
  --closure       ``optimizer.step(closure)``, the closure running forward and backward, as Lightning drives it

What a correct profile shows: one step per ``optimizer.step()``; forward, backward and optimizer phases all
non-zero, the optimizer a small share of the step (forward + backward dominate); the optimizer's kernels are its
own (no GEMM among them). With ``--closure`` forward and backward run inside the optimizer's ``step`` and are
still forward and backward. ``optimizer-not-fused`` never fires for ``adamw-fused``; when it fires for the others
it names their mode (``per_parameter`` for ``adamw-for-loop``, ``foreach`` otherwise).
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


def make_optimizer(kind: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if kind == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-3, fused=True)
    if kind == "adamw-for-loop":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if kind == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-3)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--optimizer", default="adamw-foreach",
                   choices=["adamw-foreach", "adamw-fused", "adamw-for-loop", "sgd-momentum"])
    p.add_argument("--closure", action="store_true", help="optimizer.step(closure)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    # Small on the CPU so a test takes seconds; on a GPU big enough that the kernels, not the launches, show.
    vocab, d, layers, batch, seq = (2000, 256, 4, 32, 256) if dev.type == "cuda" else (500, 64, 2, 8, 32)
    model = TinyLM(vocab, d, layers).to(dev)
    opt = make_optimizer(args.optimizer, list(model.parameters()))
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
        x, y = tokens[:, :-1], tokens[:, 1:]

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x).reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            return loss

        if args.closure:
            loss = opt.step(closure)
        else:
            loss = loss_fn(model(x).reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
