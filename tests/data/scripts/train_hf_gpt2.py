"""A Hugging Face-style training loop: ``GPT2LMHeadModel`` built from a tiny ``GPT2Config`` (no download), random
token ids, ``torch.optim.AdamW``, a linear warm-up schedule, ``loss.backward()``, ``optimizer.step()``,
``scheduler.step()``, ``optimizer.zero_grad()``.

Usage: python train_hf_gpt2.py [--steps N] [--device cuda|cpu] [--fused]

What a correct profile shows: one step per ``optimizer.step()``; forward, backward and optimizer phases all
non-zero, the optimizer a small share of the step; the forward GEMMs (lm_head included) in ``forward`` and none of
them in ``optimizer``. With ``--fused``, ``optimizer-not-fused`` must not fire; without it, it may fire only as
``foreach`` (PyTorch's default AdamW on CUDA).
"""

from __future__ import annotations

import argparse
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    if dev.type == "cuda":
        config = GPT2Config(vocab_size=8192, n_positions=256, n_embd=256, n_layer=4, n_head=4)
        batch, seq = 16, 256
    else:
        config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=2)
        batch, seq = 8, 64
    model = GPT2LMHeadModel(config).to(dev)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01,
                                  **({"fused": True} if args.fused else {}))
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=5, num_training_steps=args.steps)
    for step in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (batch, seq), device=dev)
        outputs = model(input_ids=input_ids, labels=input_ids)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f} lr {scheduler.get_last_lr()[0]:.2e}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
