"""Records trace.json.gz: a CPU-only torch.profiler trace of a small MLP training loop in a 1-process gloo group
(so the trace carries distributedInfo). Run: python record.py"""
import gzip
import os
import shutil

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
    for _ in range(5):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
prof.export_chrome_trace("trace.json")
with open("trace.json", "rb") as f, gzip.open("trace.json.gz", "wb") as g:
    shutil.copyfileobj(f, g)
os.remove("trace.json")
dist.destroy_process_group()
