"""Record real per-rank Kineto traces of a DistributedDataParallel training step on several GPUs (NCCL).

Run on a machine with 2+ GPUs, under torchrun:
    OUT=out torchrun --standalone --nproc-per-node 2 benchmarks/gpu/record_ddp_traces.py
    OUT=out torchrun --standalone --nproc-per-node 2 benchmarks/gpu/record_ddp_traces.py --slow-rank 1 --slow-ms 15

Workload: ``nn.TransformerEncoder`` (4 layers, d_model 512, 8 heads, batch 16 x 256 tokens), bf16 autocast,
AdamW(fused=True), wrapped in DDP (NCCL all-reduce of gradient buckets overlapping the backward pass). torch.profiler
with CPU + CUDA activities records 3 steps after 3 warm-up steps on every rank (``ProfilerStep#N`` markers) and writes
``$OUT/<name>_rank<r>.json.gz``. ``--slow-rank R --slow-ms M`` makes rank R spend M ms of host time before its
backward pass each step (a data-loading or logging stall), so the other ranks wait in their all-reduce: a straggler,
recorded for real. Prints, per rank: step time (host, median), kernels, NCCL kernel time per step.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 4), nn.Linear(512, 1000)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    x = torch.randn(16, 256, 512, device="cuda")
    y = torch.randint(0, 1000, (16, 256), device="cuda")
    slow = args.slow_ms / 1000 if rank == args.slow_rank else 0.0
    ends: list[float] = []

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(ddp(x).flatten(0, 1), y.flatten())
        if slow:
            time.sleep(slow)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        ends.append(time.perf_counter())

    for _ in range(5):
        step()
    name = args.name or ("ddp_straggler" if slow or args.slow_rank >= 0 else "ddp")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=3, active=3, repeat=1)) as prof:
        for _ in range(6):
            step()
            prof.step()
    raw = out / f"{name}_rank{rank}.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as f, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    events = json.loads(gzip.open(f"{raw}.gz").read())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    nccl = sum(e["dur"] for e in kernels if "nccl" in e["name"].lower())
    durs = [b - a for a, b in zip(ends[-4:-1], ends[-3:], strict=False)]
    print(f"[{name}] rank {rank}/{world}: step {1e3 * statistics.median(durs):.2f} ms (host), {len(kernels)} kernels, "
          f"NCCL {nccl / 3 / 1e3:.2f} ms/step, {Path(f'{raw}.gz').stat().st_size / 1e3:.0f} kB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
