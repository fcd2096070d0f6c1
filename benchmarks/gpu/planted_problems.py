"""Record small Kineto traces with one performance problem planted in each, plus clean controls.

Every trace is what ``dnnprof analyze`` is tested on: each scenario names the findings that must fire and the ones
that must stay quiet (``expect`` / ``forbid``). The run settings the trace cannot show (``cudnn.benchmark``,
allocator peaks, TF32) are recorded two ways:

* inside the trace: ``prof.add_metadata_json("dnnprof_run", json.dumps({...}))`` → a top-level ``dnnprof_run``
  object in the JSON (scenario, expect, forbid, cudnn_benchmark, allow_tf32, memory{device_total_bytes,
  peak_reserved_bytes, peak_allocated_bytes}, torch, device);
* next to it: ``<scenario>.meta.json`` with the same object; and ``cudnn_benchmark`` in the file name
  (``…cudnn-benchmark-on…`` / ``…cudnn-benchmark-off…``) for tools that read neither.

Run on one GPU (H100, PyTorch ≥ 2.4; cupy optional for the low-occupancy kernel):

    OUT=out python benchmarks/gpu/planted_problems.py            # all scenarios, ~2-3 minutes
    OUT=out python benchmarks/gpu/planted_problems.py --only item_sync,clean_bf16_transformer
    python benchmarks/gpu/planted_problems.py --device cpu --only tiny_mlp   # smoke test of the script itself

Writes ``$OUT/<scenario>.json.gz`` and ``$OUT/<scenario>.meta.json``, and prints a table last: scenario, trace
size, steps, mean step time, what must fire / stay quiet, and — when ``dnnprof`` imports (``PYTHONPATH=src``) —
what actually fired.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

WAIT, WARMUP, ACTIVE = 1, 2, 4
#: Findings that a clean bf16 transformer training run must never produce (issue 6, "no crying wolf").
CLEAN_FORBID = ("amp-not-used", "host-sync", "pageable-memcpy", "launch-bound", "dataloader-bound", "fp64-used",
                "gpu-idle")


@dataclass
class Scenario:
    name: str
    fn: Callable[[Run], None]
    expect: tuple[str, ...]
    forbid: tuple[str, ...] = ()
    note: str = ""


@dataclass
class Run:
    """One recording: the device, where traces go, and what the scenario sets."""

    device: torch.device
    out: Path
    scenario: Scenario
    meta: dict[str, Any] = field(default_factory=dict)
    step_s: list[float] = field(default_factory=list)
    trace: Path | None = None
    with_stack: bool = False

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def profile_loop(self, step: Callable[[int], None], steps: int | None = None, file_tag: str = "") -> None:
        """Run ``step(i)`` under torch.profiler with a wait/warm-up/active schedule and write the trace."""
        n = steps or (WAIT + WARMUP + ACTIVE)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self.meta.update(_base_meta(self))
        name = self.scenario.name + file_tag
        raw = self.out / f"{name}.json"
        sched = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
        first = WAIT + WARMUP
        t_active = 0.0
        with torch.profiler.profile(activities=acts, schedule=sched, with_stack=self.with_stack,
                                    on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for i in range(n):
                if i == first:
                    t_active = time.perf_counter()
                step(i)
                if i == first - 1 and self.cuda:
                    # Drain the queue at the end of the last warm-up step (not recorded): a sync inside the
                    # recorded steps would itself be a planted host-sync.
                    self.sync()
                    torch.cuda.reset_peak_memory_stats(self.device)
                if i == n - 1:
                    self.meta["memory"] = _memory(self)
                    prof.add_metadata_json("dnnprof_run", json.dumps(self.meta))
                prof.step()
        self.sync()  # after the profiler stopped
        self.step_s = [(time.perf_counter() - t_active) / (n - first)] * (n - first)
        self.trace = _gzip(raw)
        (self.out / f"{name}.meta.json").write_text(json.dumps(self.meta, indent=1))

    def profile_once(self, fn: Callable[[], None]) -> None:
        """Profile one call of ``fn`` without steps (for the no-steps scenario)."""
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self.meta.update(_base_meta(self))
        raw = self.out / f"{self.scenario.name}.json"
        fn()  # warm up (cuBLAS handles, cuDNN plans) outside the trace
        self.sync()
        with torch.profiler.profile(activities=acts) as prof:
            t0 = time.perf_counter()
            fn()
            self.sync()
            self.step_s.append(time.perf_counter() - t0)
            self.meta["memory"] = _memory(self)
            prof.add_metadata_json("dnnprof_run", json.dumps(self.meta))
        prof.export_chrome_trace(str(raw))
        self.trace = _gzip(raw)
        (self.out / f"{self.scenario.name}.meta.json").write_text(json.dumps(self.meta, indent=1))


def _base_meta(run: Run) -> dict[str, Any]:
    s = run.scenario
    return {"scenario": s.name, "expect": list(s.expect), "forbid": list(s.forbid), "note": s.note,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32), "torch": torch.__version__,
            "device": torch.cuda.get_device_name(run.device) if run.cuda else "cpu"}


def _memory(run: Run) -> dict[str, Any] | None:
    if not run.cuda:
        return None
    return {"device_total_bytes": int(torch.cuda.get_device_properties(run.device).total_memory),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(run.device)),
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(run.device))}


def _gzip(raw: Path) -> Path:
    gz = raw.with_suffix(".json.gz")
    with raw.open("rb") as f, gzip.open(gz, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    return gz


# --- models ------------------------------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-norm transformer block with SDPA (flash) attention."""

    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 32768, d: int = 1024, heads: int = 16, layers: int = 4, ctx: int = 1024) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, 4 * d) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def mlp(width: int, depth: int, din: int | None = None, dout: int | None = None) -> nn.Sequential:
    dims = [din or width] + [width] * (depth - 1) + [dout or width]
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class ConvNet(nn.Module):
    def __init__(self, classes: int = 100) -> None:
        super().__init__()
        chans = [3, 64, 128, 128, 256, 256]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(chans)):
            layers += [nn.Conv2d(a, b, 3, padding=1, stride=2 if i % 2 else 1), nn.BatchNorm2d(b), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(chans[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


def _lm_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
             dtype: torch.dtype | None, device: torch.device) -> None:
    with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _fit(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
         dtype: torch.dtype | None, device: torch.device) -> None:
    with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = F.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _bf16(run: Run) -> torch.dtype:
    return torch.bfloat16


def _scale(run: Run, gpu: int, cpu: int) -> int:
    return gpu if run.cuda else cpu


# --- scenarios ---------------------------------------------------------------------------------------------------
def clean_bf16_transformer(run: Run, batch: int | None = None, seq: int | None = None, tag: str = "") -> None:
    """Control: bf16 autocast, fused AdamW, inputs resident on the GPU, cudnn.benchmark on, dims multiples of 64."""
    torch.backends.cudnn.benchmark = True
    dev = run.device
    model = GPT(d=_scale(run, 1024, 64), heads=_scale(run, 16, 4), layers=_scale(run, 4, 2),
                vocab=_scale(run, 32768, 512)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    b, t = batch or _scale(run, 32, 2), seq or _scale(run, 512, 32)
    x = torch.randint(model.head.out_features, (b, t), device=dev)
    y = torch.randint(model.head.out_features, (b, t), device=dev)
    run.profile_loop(lambda i: _lm_step(model, opt, x, y, _bf16(run), dev), file_tag=tag)


def amp_not_used(run: Run) -> None:
    """fp32 GEMMs with TF32 off: matrix math on the FMA pipes."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        dev = run.device
        w = _scale(run, 4096, 64)
        model = mlp(w, 6).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
        x = torch.randn(_scale(run, 4096, 32), w, device=dev)
        run.profile_loop(lambda i: _fit(model, opt, x, x, None, dev))
    finally:
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default


def fp16_odd_dims(run: Run) -> None:
    """Pure fp16 GEMMs whose dimensions are not multiples of 8 (unaligned or non-tensor-core kernels)."""
    dev = run.device
    dt = torch.float16 if run.cuda else torch.bfloat16
    dims = [_scale(run, 4095, 63), _scale(run, 4097, 65), _scale(run, 4093, 61), _scale(run, 4099, 67)]
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).to(dev, dt)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(_scale(run, 4095, 31), dims[0], device=dev, dtype=dt)
    y = torch.randn(x.shape[0], dims[-1], device=dev, dtype=torch.float32)
    run.profile_loop(lambda i: _fit(model, opt, x, y, None, dev))


def fp64_model(run: Run) -> None:
    """A model and inputs in float64 (NumPy's default dtype)."""
    dev = run.device
    w = _scale(run, 2048, 64)
    model = mlp(w, 4).to(dev, torch.float64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(_scale(run, 2048, 32), w, device=dev, dtype=torch.float64)
    run.profile_loop(lambda i: _fit(model, opt, x, x.float(), None, dev))


class SlowImages(torch.utils.data.Dataset):
    def __init__(self, n: int, hw: int, delay_s: float) -> None:
        self.n, self.hw, self.delay_s = n, hw, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.delay_s)  # decoding/augmentation work on the main process
        return torch.randn(3, self.hw, self.hw), i % 10


def slow_dataloader(run: Run) -> None:
    """DataLoader with a slow __getitem__ and num_workers=0: the GPU waits for every batch."""
    dev = run.device
    model = ConvNet(10).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
    loader = torch.utils.data.DataLoader(SlowImages(10_000, _scale(run, 64, 16), 0.0005), batch_size=32, num_workers=0,
                                         pin_memory=run.cuda)
    batches = iter(loader)  # next() records enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__

    def step(i: int) -> None:
        x, y = next(batches)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=_bf16(run)):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run.profile_loop(step)


def item_sync(run: Run) -> None:
    """A .item() check after every layer: the host waits for the GPU, then the GPU waits for the host."""
    dev = run.device
    run.with_stack = True  # source lines in the evidence
    w = _scale(run, 4096, 64)
    model = mlp(w, 12).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
    x = torch.randn(_scale(run, 4096, 32), w, device=dev)

    def step(i: int) -> None:
        with torch.autocast(dev.type, dtype=_bf16(run)):
            h = x
            for layer in model:
                h = layer(h)
                if isinstance(layer, nn.Linear) and h.abs().amax().item() > 1e30:  # the planted sync
                    raise FloatingPointError("activation blew up")
            loss = F.mse_loss(h.float(), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run.profile_loop(step)


def pageable_h2d(run: Run) -> None:
    """Each step copies a fresh image batch from pageable host memory."""
    dev = run.device
    model = ConvNet(10).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
    hw, b = _scale(run, 224, 16), _scale(run, 64, 4)
    batches = [torch.randn(b, 3, hw, hw) for _ in range(2)]  # not pinned
    y = torch.randint(10, (b,), device=dev)

    def step(i: int) -> None:
        x = batches[i % 2].to(dev, non_blocking=True)  # pageable: synchronous despite non_blocking
        with torch.autocast(dev.type, dtype=_bf16(run)):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run.profile_loop(step)


def tiny_mlp(run: Run) -> None:
    """A tiny MLP: every kernel is a few µs, the host cannot launch fast enough."""
    dev = run.device
    model = mlp(64, 16).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 64, device=dev)
    run.profile_loop(lambda i: _fit(model, opt, x, x, None, dev))


def per_param_optimizer(run: Run) -> None:
    """AdamW(foreach=False) over 96 parameters: hundreds of tiny optimizer kernels per step."""
    dev = run.device
    model = mlp(_scale(run, 1024, 32), 48).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False, fused=False)
    x = torch.randn(_scale(run, 2048, 16), model[0].in_features, device=dev)
    run.profile_loop(lambda i: _fit(model, opt, x, x, _bf16(run), dev))


def _convnet_run(run: Run, benchmark: bool) -> None:
    torch.backends.cudnn.benchmark = benchmark
    dev = run.device
    model = ConvNet(100).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
    hw = _scale(run, 128, 16)
    x = torch.randn(_scale(run, 64, 4), 3, hw, hw, device=dev)
    y = torch.randint(100, (x.shape[0],), device=dev)

    def step(i: int) -> None:
        with torch.autocast(dev.type, dtype=_bf16(run)):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run.profile_loop(step, file_tag="_cudnn-benchmark-on" if benchmark else "_cudnn-benchmark-off")


def conv_benchmark_off(run: Run) -> None:
    """A conv net with torch.backends.cudnn.benchmark = False."""
    _convnet_run(run, False)


def conv_benchmark_on(run: Run) -> None:
    """Control: the same conv net with benchmark mode on."""
    _convnet_run(run, True)


def tiny_batch(run: Run) -> None:
    """The control transformer at batch 1 × 128 tokens: grids smaller than the GPU, memory mostly empty."""
    clean_bf16_transformer(run, batch=1, seq=_scale(run, 128, 16))


def variable_shapes(run: Run) -> None:
    """Sequence length changes every step: step times vary (unstable-steps)."""
    torch.backends.cudnn.benchmark = True
    dev = run.device
    model = GPT(d=_scale(run, 1024, 64), heads=_scale(run, 16, 4), layers=_scale(run, 4, 2),
                vocab=_scale(run, 32768, 512)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    lens = [_scale(run, s, s // 16) for s in (128, 1024, 256, 768, 128, 1024, 512)]
    data = [(torch.randint(model.head.out_features, (16, t), device=dev),
             torch.randint(model.head.out_features, (16, t), device=dev)) for t in lens]
    run.profile_loop(lambda i: _lm_step(model, opt, *data[i % len(data)], _bf16(run), dev))


def memory_near_limit(run: Run) -> None:
    """A ballast allocation fills the device to ~95%; a small model trains in what is left."""
    if not run.cuda:
        return tiny_mlp(run)
    free, _ = torch.cuda.mem_get_info(run.device)
    ballast = torch.empty(int(free - 5 * 2**30), dtype=torch.uint8, device=run.device)
    try:
        clean_bf16_transformer(run, batch=2, seq=256)
    finally:
        del ballast
        torch.cuda.empty_cache()
    return None


def no_steps(run: Run) -> None:
    """One inference pass of a few different layers, no prof.step(), no optimizer: nothing marks an iteration."""
    dev = run.device
    w = _scale(run, 2048, 64)
    conv = nn.Conv2d(3, 32, 3).to(dev)
    lin = nn.Linear(w, w).to(dev)
    img = torch.randn(8, 3, 64, 64, device=dev)
    x = torch.randn(w, w, device=dev)

    @torch.inference_mode()
    def once() -> None:
        with torch.autocast(dev.type, dtype=_bf16(run)):
            a = conv(img).relu().mean()
            b = torch.softmax(lin(x), dim=-1).sum()
            (a + b).float()

    run.profile_once(once)


_LOW_OCC_SRC = r"""
extern "C" __global__ void lowocc_stencil(const float* x, float* y, long n) {
    extern __shared__ float tile[];            // ~200 KB per block: one block per SM
    long base = (long)blockIdx.x * 8192;
    for (int r = 0; r < 8; ++r) {
        for (int j = threadIdx.x; j < 8192; j += blockDim.x) {
            long i = base + j;
            tile[j] = (i < n) ? x[i] : 0.f;
        }
        __syncthreads();
        for (int j = threadIdx.x; j < 8192; j += blockDim.x) {
            long i = base + j;
            float s = tile[j] + tile[(j + 1) % 8192] + tile[(j + 8191) % 8192];
            if (i < n) y[i] = 0.5f * y[i] + s / 3.f;
        }
        __syncthreads();
    }
}
"""


def low_occupancy(run: Run) -> None:
    """A custom kernel with 200 KB of shared memory and 64 threads per block (1 block per SM: ~3% occupancy)."""
    if not run.cuda:
        return tiny_mlp(run)
    import cupy  # present on the GPU machine; the scenario is skipped without it
    import numpy

    kern = cupy.RawKernel(_LOW_OCC_SRC, "lowocc_stencil")
    smem = 8192 * 4 * 6  # 192 KiB of dynamic shared memory (only 8192 floats are touched)
    kern.max_dynamic_shared_size_bytes = smem
    n = 1 << 24
    x = torch.randn(n, device=run.device)
    y = torch.zeros(n, device=run.device)
    model = mlp(1024, 4).to(run.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    h = torch.randn(2048, 1024, device=run.device)
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(run.device).cuda_stream)

    def step(i: int) -> None:
        with stream:
            kern(((n + 8191) // 8192,), (64,), (cupy.asarray(x), cupy.asarray(y), numpy.int64(n)), shared_mem=smem)
        _fit(model, opt, h, h, _bf16(run), run.device)

    run.profile_loop(step)
    return None


def compiled_mlp(run: Run) -> None:
    """Control for compile-not-used: a torch.compile'd model (Triton kernels in the trace)."""
    dev = run.device
    model = mlp(_scale(run, 2048, 64), 6).to(dev)
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=run.cuda)
    x = torch.randn(_scale(run, 4096, 32), model[0].in_features, device=dev)
    for _ in range(3):  # compile outside the trace
        _fit(cmodel, opt, x, x, _bf16(run), dev)
    run.profile_loop(lambda i: _fit(cmodel, opt, x, x, _bf16(run), dev))


SCENARIOS = [
    Scenario("clean_bf16_transformer", clean_bf16_transformer, (), (*CLEAN_FORBID, "tensor-cores-unused"),
             "the control: must not cry wolf"),
    Scenario("amp_not_used", amp_not_used, ("amp-not-used",), ("fp64-used", "tensor-cores-unused")),
    Scenario("fp16_odd_dims", fp16_odd_dims, ("tensor-cores-unused",), ("amp-not-used", "fp64-used")),
    Scenario("fp64_model", fp64_model, ("fp64-used",), ("tensor-cores-unused",)),
    Scenario("slow_dataloader", slow_dataloader, ("dataloader-bound", "gpu-idle"), ("fp64-used",)),
    Scenario("item_sync", item_sync, ("host-sync",), ("dataloader-bound", "pageable-memcpy", "amp-not-used")),
    Scenario("pageable_h2d", pageable_h2d, ("pageable-memcpy",), ("dataloader-bound", "amp-not-used")),
    Scenario("tiny_mlp", tiny_mlp, ("launch-bound", "gpu-idle"), ("host-sync", "dataloader-bound")),
    Scenario("per_param_optimizer", per_param_optimizer, ("optimizer-not-fused",), ("fp64-used",)),
    Scenario("conv_benchmark_off", conv_benchmark_off, ("cudnn-benchmark-off",), ("fp64-used",)),
    Scenario("conv_benchmark_on", conv_benchmark_on, (), ("cudnn-benchmark-off",), "control for benchmark-off"),
    Scenario("tiny_batch", tiny_batch, ("memory-underused", "small-grid"), ("amp-not-used", "fp64-used")),
    Scenario("variable_shapes", variable_shapes, ("unstable-steps",), ("amp-not-used",)),
    Scenario("memory_near_limit", memory_near_limit, ("memory-near-limit",), ("memory-underused",)),
    Scenario("no_steps", no_steps, ("no-steps",), ()),
    Scenario("low_occupancy", low_occupancy, ("low-occupancy",), ("fp64-used",), "needs cupy"),
    Scenario("compiled_mlp", compiled_mlp, (), ("compile-not-used",), "control for compile-not-used"),
]


def _fired(trace: Path, meta: dict[str, Any]) -> list[str] | None:
    """Finding ids dnnprof reports for a trace, or None when dnnprof is not importable here."""
    src = Path(__file__).resolve().parents[2] / "src"
    if src.is_dir() and str(src) not in sys.path:
        sys.path.insert(0, str(src))
    try:
        from dnnprof.analysis.rules import findings_for
        from dnnprof.analysis.summary import summarize
        from dnnprof.ingest.kineto import read_kineto
    except ImportError:
        return None
    try:
        profile = read_kineto(trace)
    except ValueError as e:
        print(f"{trace}: dnnprof could not read it: {e}")
        return None
    doc = summarize(profile)
    doc["meta"] = meta  # what a run directory would carry (memory, cudnn_benchmark)
    if meta.get("memory"):
        doc["memory"] = meta["memory"]
    return [f["id"] for f in findings_for(profile, doc)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device if a.device != "cuda" or torch.cuda.is_available() else "cpu")
    wanted = {s for s in a.only.split(",") if s}
    unknown = wanted - {s.name for s in SCENARIOS}
    if unknown:
        raise SystemExit(f"unknown scenarios: {sorted(unknown)}; known: {[s.name for s in SCENARIOS]}")
    rows = []
    t_all = time.perf_counter()
    for sc in SCENARIOS:
        if wanted and sc.name not in wanted:
            continue
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        run = Run(dev, out, sc)
        t0 = time.perf_counter()
        status = "ok"
        try:
            sc.fn(run)
        except Exception as e:  # noqa: BLE001 - one broken scenario must not lose the others; it is reported
            status = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        fired = _fired(run.trace, run.meta) if run.trace else None
        verdict = "-"
        if fired is not None:
            missing = [f for f in sc.expect if f not in fired]
            wolf = [f for f in sc.forbid if f in fired]
            verdict = "PASS" if not missing and not wolf else f"FAIL missing={missing} wolf={wolf}"
        size = run.trace.stat().st_size // 1024 if run.trace else 0
        mean_ms = 1000 * sum(run.step_s) / len(run.step_s) if run.step_s else float("nan")
        rows.append((sc.name, run.trace.name if run.trace else "-", size, len(run.step_s), mean_ms,
                     ",".join(sc.expect) or "(none)", ",".join(fired) if fired is not None else "(dnnprof n/a)",
                     verdict if status == "ok" else status, time.perf_counter() - t0))
    print(f"\nplanted problems on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}, "
          f"torch {torch.__version__}, {time.perf_counter() - t_all:.0f} s total, traces in {out}/")
    head = ("scenario", "trace", "KiB", "steps", "step ms", "must fire", "fired", "verdict", "s")
    print(" | ".join(head))
    for r in rows:
        print(f"{r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[5]} | {r[6]} | {r[7]} | {r[8]:.0f}")


if __name__ == "__main__":
    main()
