"""DDP training of a tiny MLP under torchrun (gloo on the CPU) with one planted straggler.

``--slow-rank R --slow-phase forward|backward|data --slow-ms MS``: rank R sleeps MS ms in its model's forward (a
forward hook of the first layer), in its backward (a hook on the first layer's weight gradient) or in its data
loader (the dataset's ``__getitem__`` of the rank's batches, num_workers=0). No dnnprof markers.
"""

import argparse
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-phase", default="forward", choices=("forward", "backward", "data"))
p.add_argument("--slow-ms", type=float, default=30.0)
p.add_argument("--steps", type=int, default=16)
a = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
slow = rank == a.slow_rank
delay = a.slow_ms / 1000.0


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 32 * a.steps

    def __getitem__(self, i: int):
        if slow and a.slow_phase == "data" and i % 32 == 0:
            time.sleep(delay)
        return torch.randn(64), int(i % 10)


model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
if slow and a.slow_phase == "forward":
    model[2].register_forward_hook(lambda m, i, o: time.sleep(delay))
if slow and a.slow_phase == "backward":
    model[0].weight.register_hook(lambda g: time.sleep(delay))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(Data(), batch_size=32, num_workers=0)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"rank {rank} of {dist.get_world_size()} done", flush=True)
dist.destroy_process_group()
