"""Hugging Face-style GPT-2 loop: fused AdamW, linear schedule, bf16 autocast, random tokens.

Usage: python hf_fused.py [STEPS] [eager|compile]   (compile: torch.compile(mode="reduce-overhead"))
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
mode = sys.argv[2] if len(sys.argv) > 2 else "eager"
dev = "cuda"
cfg = GPT2Config(n_layer=4, n_head=8, n_embd=512, vocab_size=8192, n_positions=256)
model = GPT2LMHeadModel(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
sched = get_linear_schedule_with_warmup(opt, 10, steps)
fwd = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model
for i in range(steps):
    ids = torch.randint(0, cfg.vocab_size, (16, 256), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = fwd(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if i % 10 == 0:
        print("step", i, out.loss.item(), flush=True)
print("done")
