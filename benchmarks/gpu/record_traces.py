"""Record small real Kineto traces on a GPU for dnnprof's test fixtures.

Run on the GPU machine:  OUT=out python benchmarks/gpu/record_traces.py
Writes $OUT/<scenario>.json.gz and prints a table (steps, kernels, GPU busy %, file size).

Scenarios (each 2-3 profiled steps after warm-up, sized to keep traces small):
  cnn_train_fp32      torchvision resnet18, batch 32 x 3x224x224, fp32, SGD momentum
  cnn_infer_bf16      resnet18 inference under bf16 autocast, batch 64
  transformer_train_bf16  nn.TransformerEncoder (6 x d512, 8 heads), batch 16 x 256 tokens, bf16 autocast,
                      AdamW(fused=True), inputs created on the GPU
  transformer_infer_fp16  the same model in fp16, inference
  lstm_train_fp32     2-layer LSTM (hidden 1024), batch 32 x 100 steps, fp32, Adam
  lstm_infer_fp32     the same, inference
  transformer_train_modules  transformer training with a record_function range around every nn.Module forward,
                      named `dnnprof.module:<fqn>|<Class>` (the range dnnprof's collector emits)
  transformer_train_with_modules  torch.profiler(with_modules=True, with_stack=True): torch's own module events
  cnn_infer_nomarkers resnet18 inference, 5 iterations, no prof.step() and no optimizer (step inference test)
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

OUT = Path(os.environ.get("OUT", "out"))
DEV = "cuda"


def _save(prof: profile, name: str) -> Path:
    raw = OUT / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    gz = OUT / f"{name}.json.gz"
    with raw.open("rb") as f, gzip.open(gz, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    return gz


def _loop(name: str, step: Callable[[], None], active: int = 2, warmup: int = 3, **kw: object) -> Path:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    saved: list[Path] = []
    # repeat=1 and saving from on_trace_ready: after the active window the profiler does not start a new, empty
    # cycle whose results an export at exit would see.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
                 on_trace_ready=lambda p: saved.append(_save(p, name)), **kw) as prof:
        for _ in range(active + 1):
            step()
            prof.step()
    torch.cuda.synchronize()
    return saved[0]


def _resnet() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(num_classes=1000)


def cnn_train_fp32() -> Path:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = _resnet().to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device=DEV)
    y = torch.randint(0, 1000, (32,), device=DEV)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

    return _loop("cnn_train_fp32", step)


def cnn_infer_bf16() -> Path:
    m = _resnet().to(DEV).eval()
    x = torch.randn(64, 3, 224, 224, device=DEV)

    @torch.inference_mode()
    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(x)

    return _loop("cnn_infer_bf16", step, active=3)


def _transformer() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True, dropout=0.1)
    return nn.Sequential(nn.Embedding(8192, 512), nn.TransformerEncoder(layer, num_layers=6), nn.Linear(512, 8192))


def _transformer_train(name: str, **kw: object) -> Path:
    m = _transformer().to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, 8192, (16, 256), device=DEV)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = m(x)
            loss = nn.functional.cross_entropy(logits.view(-1, 8192), x.view(-1))
        loss.backward()
        opt.step()

    return _loop(name, step, **kw)


def transformer_train_bf16() -> Path:
    return _transformer_train("transformer_train_bf16")


def transformer_infer_fp16() -> Path:
    m = _transformer().to(DEV).half().eval()
    x = torch.randint(0, 8192, (16, 256), device=DEV)

    @torch.inference_mode()
    def step() -> None:
        m(x)

    return _loop("transformer_infer_fp16", step, active=3)


def _lstm() -> tuple[nn.Module, torch.Tensor]:
    m = nn.LSTM(input_size=256, hidden_size=1024, num_layers=2, batch_first=True).to(DEV)
    return m, torch.randn(32, 100, 256, device=DEV)


def lstm_train_fp32() -> Path:
    m, x = _lstm()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out, _ = m(x)
        out.pow(2).mean().backward()
        opt.step()

    return _loop("lstm_train_fp32", step)


def lstm_infer_fp32() -> Path:
    m, x = _lstm()
    m.eval()

    @torch.inference_mode()
    def step() -> None:
        m(x)

    return _loop("lstm_infer_fp32", step, active=3)


def transformer_train_modules() -> Path:
    """Module ranges exactly as dnnprof's collector names them."""
    names: dict[int, str] = {}
    ranges: dict[int, list[record_function]] = {}

    def pre(mod: nn.Module, _inp: object) -> None:
        r = record_function(f"dnnprof.module:{names.get(id(mod), type(mod).__name__)}|{type(mod).__name__}")
        r.__enter__()
        ranges.setdefault(id(mod), []).append(r)

    def post(mod: nn.Module, _inp: object, _out: object) -> None:
        ranges[id(mod)].pop().__exit__(None, None, None)

    h1 = nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = nn.modules.module.register_module_forward_hook(post)
    try:
        m = _transformer()
        for n, sub in m.named_modules():
            names[id(sub)] = n or type(m).__name__
        m = m.to(DEV)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
        x = torch.randint(0, 8192, (16, 256), device=DEV)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(m(x).view(-1, 8192), x.view(-1))
            loss.backward()
            opt.step()

        return _loop("transformer_train_modules", step)
    finally:
        h1.remove()
        h2.remove()


def transformer_train_with_modules() -> Path:
    return _transformer_train("transformer_train_with_modules", active=1, with_modules=True, with_stack=True)


def cnn_infer_nomarkers() -> Path:
    m = _resnet().to(DEV).eval()
    x = torch.randn(16, 3, 224, 224, device=DEV)
    with torch.inference_mode():
        for _ in range(3):
            m(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                m(x)
            torch.cuda.synchronize()
    return _save(prof, "cnn_infer_nomarkers")


SCENARIOS = [cnn_train_fp32, cnn_infer_bf16, transformer_train_bf16, transformer_infer_fp16, lstm_train_fp32,
             lstm_infer_fp32, transformer_train_modules, transformer_train_with_modules, cnn_infer_nomarkers]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    for fn in SCENARIOS:
        t0 = time.time()
        try:
            path = fn()
        except Exception as e:  # noqa: BLE001 - one failing scenario must not lose the others
            rows.append((fn.__name__, f"FAILED: {type(e).__name__}: {e}", "", "", ""))
            continue
        line = (fn.__name__, f"{path.stat().st_size / 1e3:.0f} kB", f"{time.time() - t0:.1f} s", "", "")
        try:
            from dnnprof.analysis.summary import summarize
            from dnnprof.ingest.kineto import read_kineto

            doc = summarize(read_kineto(path))
            line = (*line[:3], f"{doc['steps']['count']} steps ({doc['steps']['source']})",
                    f"busy {doc['gpu']['busy_pct']}%, {len(doc['kernels'])} kernels, attr {doc['attribution']}")
        except ImportError:
            pass
        rows.append(line)
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()} torch {torch.__version__}")
    for r in rows:
        print(" | ".join(str(x) for x in r))


if __name__ == "__main__":
    main()
