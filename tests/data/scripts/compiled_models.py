"""Small models under ``torch.compile``, trained or run for inference: a GPT-style decoder (pre-norm blocks,
causal attention, tied-free LM head) or a ResNet-style CNN (conv-bn-relu blocks with residuals).

Usage: python compiled_models.py [--model gpt|cnn|gpt2|resnet50] [--train | --infer]
                                 [--mode default|reduce-overhead|eager]
                                 [--steps N] [--device cpu|cuda] [--size tiny|small] [--graph-break]

Training steps are optimizer steps; inference steps are ``record_function("infer_step")`` ranges (profile with
``--step-marker infer_step``). ``gpt2`` is Hugging Face's ``GPT2LMHeadModel`` (124M, from its config, no download;
needs transformers) and ``resnet50`` torchvision's (needs torchvision), as people run them. What a correct profile shows: every generated kernel (``cpp_fused_*`` on the CPU,
``triton_*`` on a GPU) and every aten call of the compiled graphs on a module layer (``blocks.0.attn (Attention)``,
``layer1.0.conv1 (Conv2d)``), not on ``Torch-Compiled Region``; training has forward, backward and optimizer
phases, inference forward only.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, ctx: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.graph_break = False  # --graph-break: Dynamo splits the forward after the embeddings
        self.break_ops = 0  # --break-ops N: N small ops that Dynamo may not compile run eagerly at that break

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        if self.graph_break:
            torch._dynamo.graph_break()
        if self.break_ops:
            x = _eager_at_break(x, self.break_ops)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


@torch._dynamo.disable
def _eager_at_break(x: torch.Tensor, n: int) -> torch.Tensor:
    """Work Dynamo leaves to Python (a call it is told not to trace): it breaks the graph and runs eagerly."""
    for _ in range(n):
        x = x * 1.0 + 0.0
    return x


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class CNN(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for i in range(blocks):
            layers.append(ResBlock(c, c * 2 if i % 2 else c, 2 if i % 2 else 1))
            c = c * 2 if i % 2 else c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def build(name: str, size: str, dev: torch.device) -> tuple[nn.Module, callable, callable]:
    if name == "gpt":
        vocab, d, heads, layers, ctx, batch = (50304, 768, 12, 12, 512, 8) if size == "small" else \
            (256, 32, 2, 2, 16, 4)
        model = GPT(vocab, d, heads, layers, ctx)

        def data() -> tuple[torch.Tensor, torch.Tensor]:
            t = torch.randint(0, vocab, (batch, ctx + 1), device=dev)
            return t[:, :-1], t[:, 1:]

        def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    elif name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(use_cache=False) if size == "small" else \
            GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2, use_cache=False,
                       bos_token_id=0, eos_token_id=0)
        model = GPT2LMHeadModel(cfg)
        seq, batch = (512, 8) if size == "small" else (16, 4)

        def data() -> tuple[torch.Tensor, torch.Tensor]:
            t = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=dev)
            return t[:, :-1], t[:, 1:]

        def loss(out: object, y: torch.Tensor) -> torch.Tensor:
            logits = out.logits
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    elif name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(weights=None)
        hw, batch = (224, 32) if size == "small" else (64, 2)

        def data() -> tuple[torch.Tensor, torch.Tensor]:
            return torch.randn(batch, 3, hw, hw, device=dev), torch.randint(0, 1000, (batch,), device=dev)

        loss = F.cross_entropy
    else:
        width, blocks, hw, batch = (64, 8, 224, 32) if size == "small" else (8, 2, 16, 4)
        model = CNN(width, blocks, 10)

        def data() -> tuple[torch.Tensor, torch.Tensor]:
            return torch.randn(batch, 3, hw, hw, device=dev), torch.randint(0, 10, (batch,), device=dev)

        loss = F.cross_entropy
    return model.to(dev), data, loss


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt", choices=["gpt", "cnn", "gpt2", "resnet50"])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--train", dest="train", action="store_true", default=True)
    g.add_argument("--infer", dest="train", action="store_false")
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs",
                                                         "eager"])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--graph-break", action="store_true", help="GPT: a graph break after the embeddings")
    p.add_argument("--break-ops", type=int, default=0, help="GPT: N eager ops in a function Dynamo may not trace")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", default="small" if torch.cuda.is_available() else "tiny", choices=["tiny", "small"])
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model, data, loss_fn = build(args.model, args.size, dev)
    if args.model in ("gpt", "cnn"):
        model.graph_break = args.graph_break
    if args.model == "gpt":
        model.break_ops = args.break_ops
    run = model if args.mode == "eager" else torch.compile(model, mode=None if args.mode == "default" else args.mode)
    if args.train:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for step in range(args.steps):
            x, y = data()
            loss = loss_fn(run(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step % 5 == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
    else:
        model.eval()
        with torch.inference_mode():
            for _ in range(args.steps):
                with torch.autograd.profiler.record_function("infer_step"):
                    out = run(data()[0])
                if dev.type == "cuda":
                    torch.cuda.synchronize()
        print(f"out {tuple(getattr(out, 'logits', out).shape)}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
