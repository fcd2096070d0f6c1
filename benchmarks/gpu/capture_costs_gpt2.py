"""What each part of dnnprof's capture costs, measured one part at a time in one process.

Run on the GPU machine (dnnprof from this checkout on PYTHONPATH, transformers present):
    OUT=out python benchmarks/gpu/capture_costs_gpt2.py          # ~1 min on an H100
    python benchmarks/gpu/capture_costs_gpt2.py --smoke            # CPU check of this harness, measures nothing

Workload: the one of ``overhead_gpt2.py`` (GPT-2 124M, batch 8 x 512, bf16 autocast, fused AdamW, ``loss.item()``
every step). Each configuration is switched on, runs 3 warm-up steps and ``--steps`` measured steps, and is
switched off; two plain steps follow (the first one pays any teardown, reported as ``after_ms``). The list runs
``--rounds`` times; each row reports the median step of every round. Parts measured: torch.profiler with CUDA
activity only and with CPU ops, record_shapes / with_stack / profile_memory / with_modules, dnnprof's module
ranges, the NVML/GPM sampler thread, the host stack sampler thread and the boundary work of an optimizer post-hook.
Writes $OUT/capture_costs.json and prints a table last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TEARDOWN_CUPTI", "1")  # as dnnprof sets it, before torch is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def build(smoke: bool) -> Callable[[], None]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    dev = "cpu" if smoke else "cuda"
    cfg = GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=1000, n_positions=64) if smoke else GPT2Config()
    batch, seq = (2, 32) if smoke else (8, 512)
    model = GPT2LMHeadModel(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=not smoke)
    data = torch.randint(0, cfg.vocab_size, (4, batch, seq), device=dev)
    state = {"i": 0}

    def step() -> None:
        x = data[state["i"] % 4]
        state["i"] += 1
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    return step


@contextlib.contextmanager
def profiler(cpu: bool = False, cuda: bool = True, **kw: Any) -> Iterator[None]:
    import torch

    pa = torch.profiler.ProfilerActivity
    acts = ([pa.CPU] if cpu else []) + ([pa.CUDA] if cuda and torch.cuda.is_available() else [])
    acts = acts or [pa.CPU]  # --smoke on a machine without CUDA
    prof = torch.profiler.profile(activities=acts, **kw)
    prof.start()
    try:
        yield
    finally:
        t = time.perf_counter()
        prof.stop()
        STOP_S.append(time.perf_counter() - t)


STOP_S: list[float] = []


@contextlib.contextmanager
def module_ranges() -> Iterator[None]:
    import torch

    from dnnprof.collect.modranges import ModuleRanges

    r = ModuleRanges(torch)
    r.install()
    try:
        yield
    finally:
        r.remove()


@contextlib.contextmanager
def stack_sampler(period_s: float = 0.01) -> Iterator[None]:
    from dnnprof.collect.stacks import StackSampler

    s = StackSampler(period_s=period_s)
    s.start()
    try:
        yield
    finally:
        s.stop()


@contextlib.contextmanager
def nvml_sampler(period_s: float = 0.02) -> Iterator[None]:
    import torch

    from dnnprof.collect.nvml import Nvml
    from dnnprof.collect.sampler import NvmlSampler

    nvml = Nvml()
    devs = []
    if torch.cuda.is_available() and nvml.open():
        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        h = nvml.handle(index=None if os.environ.get("CUDA_VISIBLE_DEVICES") else 0, uuid=str(uuid) if uuid else None)
        if h is not None:
            devs.append((0, h))
    s = NvmlSampler(nvml, devs, period_s=period_s)
    s.start()
    try:
        yield
    finally:
        s.stop()
        INFO.setdefault("nvml", s.status())


INFO: dict[str, Any] = {}


@contextlib.contextmanager
def boundary_hook() -> Iterator[None]:
    """An optimizer post-hook doing dnnprof's per-boundary work (clock reads, allocator peaks)."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from dnnprof.collect.memory import StepMemory

    mem = StepMemory(torch, 0) if torch.cuda.is_available() else None

    def hook(opt: Any, args: Any, kwargs: Any) -> None:
        time.time_ns()
        if mem is not None:
            mem.read_and_reset()
        time.time_ns()

    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    h = register_optimizer_step_post_hook(disable(hook) if disable else hook)
    try:
        yield
    finally:
        h.remove()


def stack(*cms: Callable[[], Any]) -> Callable[[], Any]:
    @contextlib.contextmanager
    def cm() -> Iterator[None]:
        with contextlib.ExitStack() as es:
            for c in cms:
                es.enter_context(c())
            yield

    return cm


def configs() -> list[tuple[str, Callable[[], Any]]]:
    nothing = contextlib.nullcontext
    cuda = lambda: profiler()  # noqa: E731
    return [
        ("none", nothing),
        ("cuda_only", cuda),
        ("none_2", nothing),
        ("hook", boundary_hook),
        ("stack_sampler_10ms", stack_sampler),
        ("nvml_20ms", nvml_sampler),
        ("nvml_50ms", lambda: nvml_sampler(0.05)),
        ("cuda+hook+stacks+nvml", stack(cuda, boundary_hook, stack_sampler, nvml_sampler)),
        ("cuda+hook+nvml", stack(cuda, boundary_hook, nvml_sampler)),
        ("cpu+cuda", lambda: profiler(cpu=True)),
        ("cpu+cuda+ranges", stack(lambda: profiler(cpu=True), module_ranges)),
        ("cpu+cuda+shapes", lambda: profiler(cpu=True, record_shapes=True)),
        ("cpu+cuda+memory", lambda: profiler(cpu=True, profile_memory=True)),
        ("cpu+cuda+stack", lambda: profiler(cpu=True, with_stack=True)),
        ("cpu+cuda+with_modules", lambda: profiler(cpu=True, with_modules=True)),
        ("shapes+memory+ranges", stack(lambda: profiler(cpu=True, record_shapes=True, profile_memory=True),
                                       module_ranges)),
        ("full_now", stack(lambda: profiler(cpu=True, record_shapes=True, profile_memory=True, with_stack=True),
                           module_ranges, stack_sampler, nvml_sampler)),
        ("shapes+memory+stack+with_modules", lambda: profiler(cpu=True, record_shapes=True, profile_memory=True,
                                                               with_stack=True, with_modules=True)),
        ("none_3", nothing),
    ]


def run(step: Callable[[], None], cm: Callable[[], Any], n: int) -> dict[str, Any]:
    times = []
    STOP_S.clear()
    with cm():
        for _ in range(3):
            step()
        last = time.perf_counter_ns()
        for _ in range(n):
            step()
            now = time.perf_counter_ns()
            times.append(now - last)
            last = now
    t = time.perf_counter_ns()
    step()
    after = time.perf_counter_ns() - t
    step()
    return {"median_ms": statistics.median(times) / 1e6, "min_ms": min(times) / 1e6, "after_ms": after / 1e6,
            "stop_s": round(sum(STOP_S), 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--only", default="", help="comma-separated config names")
    a = p.parse_args()
    import torch

    step = build(a.smoke)
    for _ in range(5):
        step()
    cfgs = [c for c in configs() if not a.only or c[0] in a.only.split(",")]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in cfgs}
    for _ in range(a.rounds):
        for name, cm in cfgs:
            rows[name].append(run(step, cm, 3 if a.smoke else a.steps))
    base = statistics.median([r["median_ms"] for n in ("none", "none_2", "none_3") for r in rows.get(n, [])])
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    doc = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "teardown_cupti": os.environ.get("TEARDOWN_CUPTI"), "base_ms": base, "rows": rows, "info": INFO}
    (out / "capture_costs.json").write_text(json.dumps(doc, indent=1, default=str))
    print(f"\n{doc['gpu']} torch {doc['torch']}; base {base:.2f} ms/step (median of the 'none' rows)")
    print(f"{'config':<36}" + "".join(f"{'r' + str(i) + ' ms':>9}{'x':>7}" for i in range(a.rounds))
          + f"{'after ms':>10}{'stop s':>8}")
    for name, rs in rows.items():
        cells = "".join(f"{r['median_ms']:9.2f}{r['median_ms'] / base:7.3f}" for r in rs)
        print(f"{name:<36}{cells}{rs[-1]['after_ms']:10.1f}{rs[-1]['stop_s']:8.2f}")


if __name__ == "__main__":
    main()
