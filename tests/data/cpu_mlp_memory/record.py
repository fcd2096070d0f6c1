"""Records trace.json.gz: a CPU-only torch.profiler trace of a small MLP training loop with memory events, shapes,
stacks and modules (what ``dnnprof run --full`` records). Run: python record.py"""
import gzip
import os
import shutil

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, profile_memory=True,
                            record_shapes=True, with_stack=True, with_modules=True) as prof:
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
