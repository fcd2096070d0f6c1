"""DDP on 2 and 4 GPUs profiled on every rank: `dnnprof run -- torchrun --nproc-per-node N THIS --worker …`.

GPT-2-124M-like (12 × d768 transformer, bf16 autocast) and ResNet-50-like (torchvision-free bottleneck stack)
models, balanced and with one planted straggler (rank 1 sleeps in forward; rank 1's backward slowed by a 2× larger
micro-batch; rank 1's host sleeps in a backward hook; rank 1's data loader sleeps). The balanced runs also run
once without dnnprof, each rank timing the profiled window's steps both times: dnnprof's overhead per rank. Prints per-rank step time, busy %, NCCL time, exposed vs overlapped
communication and the critical-path verdict as JSON on stdout and into $OUT/ddp_ranks.json, and copies each run
directory, traces trimmed to ≤ 2 MB, under $OUT/runs/ as fixtures.

    OUT=out PYTHONPATH=src python benchmarks/gpu/ddp_ranks.py [--gpus 2,4] [--steps 6] [--planted-on 2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    slow = rank == a.slow_rank
    if a.model == "gpt2":
        layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, norm_first=True)
        model = nn.Sequential(nn.Embedding(50257, 768), nn.TransformerEncoder(layer, 12), nn.Linear(768, 50257))
        batch = 8 * (2 if slow and a.slow_phase == "backward" else 1)

        def data() -> tuple:
            x = torch.randint(0, 50257, (batch, 512))
            return x, x
    else:
        def block(c: int) -> nn.Module:
            return nn.Sequential(nn.Conv2d(c, c // 4, 1), nn.BatchNorm2d(c // 4), nn.ReLU(),
                                 nn.Conv2d(c // 4, c // 4, 3, padding=1), nn.BatchNorm2d(c // 4), nn.ReLU(),
                                 nn.Conv2d(c // 4, c, 1), nn.BatchNorm2d(c))
        model = nn.Sequential(nn.Conv2d(3, 256, 7, stride=4, padding=3), *[block(256) for _ in range(8)],
                              nn.Conv2d(256, 1024, 3, stride=2, padding=1), *[block(1024) for _ in range(8)],
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))
        batch = 64 * (2 if slow and a.slow_phase == "backward" else 1)

        def data() -> tuple:
            return torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
    model = model.cuda()
    if slow and a.slow_phase == "forward":
        model[1].register_forward_hook(lambda m, i, o: time.sleep(a.slow_ms / 1000))
    if slow and a.slow_phase == "backward_sleep":  # the host stalls inside backward: later kernels launch late
        model[1].register_full_backward_hook(lambda m, gi, go: time.sleep(a.slow_ms / 1000))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            for _ in range(a.steps):
                if slow and a.slow_phase == "data":
                    time.sleep(a.slow_ms / 1000)  # the planted slow data loader
                yield data()

    times_dir = os.environ.get("DDP_TIMES")
    marks: list[float] = []
    for it, (x, y) in enumerate(torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=0)):
        if times_dir and a.window_start <= it <= a.window_start + a.window_steps:
            # The same sync before each step of the window with and without dnnprof: each step's time, whose
            # median leaves out the profiler's one-off start and stop at the window's edges.
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            if it == a.window_start + a.window_steps:
                steps = sorted((b - c) * 1000 for b, c in zip(marks[1:], marks[:-1], strict=True))
                Path(times_dir, f"rank{rank}.json").write_text(json.dumps(
                    {"rank": rank, "ms_per_step": steps[len(steps) // 2], "steps_ms": steps}))
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", torch.bfloat16):
            out = ddp(x)
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dist.destroy_process_group()


def trim(run: Path, dest: Path) -> None:
    """Copy a run directory without its assembled profile (re-made from the traces by ``dnnprof analyze``); every
    trace is kept, since a rank without its timing or attribution trace cannot be analysed again."""
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("profile"))


def _rank_times(d: Path) -> dict[int, float]:
    return {int(json.loads(f.read_text())["rank"]): json.loads(f.read_text())["ms_per_step"]
            for f in sorted(d.glob("rank*.json"))}


def one(out: Path, model: str, gpus: int, steps: int, slow_phase: str | None, slow_ms: float,
        baseline: bool = False) -> dict:
    """One profiled run; with ``baseline`` the same job first without dnnprof, each rank timing the profiled
    window's steps in both (dnnprof's overhead per rank)."""
    name = f"{model}_{gpus}gpu_{slow_phase or 'balanced'}"
    run = out / "runs_full" / name
    worker_args = ["--worker", "--model", model, "--steps", str(steps + 8), "--window-start", "3",
                   "--window-steps", str(steps)]
    if slow_phase:
        worker_args += ["--slow-rank", "1", "--slow-phase", slow_phase, "--slow-ms", str(slow_ms)]
    job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus),
           str(Path(__file__).resolve()), *worker_args]
    plain = out / "times" / f"{name}_plain"
    prof = out / "times" / f"{name}_dnnprof"
    for d in (plain, prof):
        d.mkdir(parents=True, exist_ok=True)
    if baseline:
        subprocess.run(job, capture_output=True, text=True, timeout=180, check=False,
                       env={**os.environ, "DDP_TIMES": str(plain)})
    cmd = [sys.executable, "-m", "dnnprof", "run", "-q", "--warmup-steps", "3", "--steps", str(steps), "--out",
           str(run), "--", *job]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "DDP_TIMES": str(prof)})
    row: dict = {"name": name, "model": model, "gpus": gpus, "planted": slow_phase, "rc": proc.returncode,
                 "wall_s": round(time.time() - t0, 1)}
    base, with_p = _rank_times(plain), _rank_times(prof)
    if base and with_p:
        row["overhead_per_rank"] = {r: {"plain_ms_per_step": round(base[r], 2),
                                        "dnnprof_ms_per_step": round(with_p[r], 2),
                                        "ratio": round(with_p[r] / base[r], 3)} for r in sorted(base) if r in with_p}
    if not (run / "summary.json").is_file():
        row["error"] = proc.stderr[-2000:]
        return row
    s = json.loads((run / "summary.json").read_text())
    cp = s.get("critical_path") or {}
    comm = {r["rank"]: r for r in cp.get("per_rank", [])}
    row["per_rank"] = [{**r, **{k: comm.get(r["rank"], {}).get(k) for k in
                                ("wait_us_per_step", "overlapped_comm_us_per_step", "exposed_comm_us_per_step")}}
                       for r in (s.get("ranks") or {}).get("per_rank", [])]
    row["verdict"] = cp.get("verdict")
    row["steps"] = [{k: x.get(k) for k in ("step", "rank", "phase", "wait_us")} for x in cp.get("steps", [])]
    row["findings"] = [f["id"] for f in s.get("findings", [])]
    row["overhead"] = s.get("overhead", {}).get("dilation")
    trim(run, out / "runs" / name)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--model", default="gpt2")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-phase", default="forward")
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--gpus", default="2,4")
    p.add_argument("--window-start", type=int, default=3)
    p.add_argument("--window-steps", type=int, default=6)
    p.add_argument("--planted-on", default="2", help="GPU counts that also run the planted stragglers")
    p.add_argument("--phases", default="forward,backward,backward_sleep,data")
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    import torch

    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    have = torch.cuda.device_count()
    rows: list[dict] = []
    doc = {"gpu": torch.cuda.get_device_name(0) if have else None, "gpus_available": have,
           "torch": torch.__version__, "runs": rows}
    name = f"ddp_ranks_{a.gpus.replace(',', '_')}.json"
    for gpus in [int(g) for g in a.gpus.split(",") if int(g) <= have]:
        plan = [(m, None) for m in ("gpt2", "resnet50")]
        if str(gpus) in a.planted_on.split(","):
            plan += [("gpt2", phase) for phase in a.phases.split(",")]
        for model, phase in plan:
            rows.append(one(out, model, gpus, a.steps, phase, a.slow_ms, baseline=phase is None))
            (out / name).write_text(json.dumps(doc, indent=1))  # each run kept, should a later one hang
    shutil.rmtree(out / "runs_full", ignore_errors=True)
    (out / name).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
