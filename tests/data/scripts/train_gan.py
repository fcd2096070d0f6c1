"""Two optimizers: a small GAN (MLP generator and discriminator on random "real" data), each iteration a
discriminator step (``opt_d.step()``) then a generator step (``opt_g.step()``).

Usage: python train_gan.py [--steps N] [--device cuda|cpu]

What a correct profile shows: one step per iteration (the generator's optimizer, which steps last, ends it), so
each step holds both optimizer steps; forward, backward and optimizer phases all non-zero, the optimizer a small
share of the step.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


def mlp(d_in: int, width: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, width), nn.LeakyReLU(0.2), nn.Linear(width, width), nn.LeakyReLU(0.2),
                         nn.Linear(width, d_out))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    z_dim, width, x_dim, batch = (128, 2048, 1024, 256) if dev.type == "cuda" else (16, 128, 64, 32)
    gen = mlp(z_dim, width, x_dim).to(dev)
    disc = mlp(x_dim, width, 1).to(dev)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    ones = torch.ones(batch, 1, device=dev)
    zeros = torch.zeros(batch, 1, device=dev)
    for step in range(args.steps):
        real = torch.randn(batch, x_dim, device=dev) * 0.5 + 1.0
        fake = gen(torch.randn(batch, z_dim, device=dev))
        # Discriminator step.
        loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        # Generator step.
        loss_g = bce(disc(fake), ones)
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        if step % 10 == 0:
            print(f"step {step} loss_d {loss_d.item():.3f} loss_g {loss_g.item():.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
