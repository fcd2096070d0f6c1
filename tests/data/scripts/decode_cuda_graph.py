"""An LLM-style decode loop that replays a CUDA graph (GPU only): a small decoder-only transformer with a static
KV cache; one greedy decode step (embed the current token, attend over the cache, write this position's keys and
values, pick the next token, advance the position) is captured once with ``torch.cuda.graph`` and replayed for
every generated token, as LLM servers do. No optimizer, no DataLoader, no markers.

Usage: python decode_cuda_graph.py [--tokens N] [--batch B]

Prints ``replays N`` (graph replays after capture) at the end.

What a correct profile shows: the iterations are the graph replays: steps positive, as many as the replays in
the captured window, each about one replay long; forward only (no backward, no optimizer phase, no optimizer
finding); the model runs as CUDA graph replays, so ``compile-not-used`` must not fire.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int, max_len: int, batch: int) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.register_buffer("k_cache", torch.zeros(batch, heads, max_len, self.dh))
        self.register_buffer("v_cache", torch.zeros(batch, heads, max_len, self.dh))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(b, 1, 3, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        self.k_cache.index_copy_(2, pos, k)  # this position's keys and values, written in place
        self.v_cache.index_copy_(2, pos, v)
        att = (q @ self.k_cache.transpose(-1, -2)) / math.sqrt(self.dh) + mask  # (b, heads, 1, max_len)
        y = (att.softmax(-1) @ self.v_cache).transpose(1, 2).reshape(b, 1, -1)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, max_len: int, batch: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, max_len, batch) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(max_len))

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One decode step: token (b, 1) at position pos (a 1-element tensor) -> logits (b, vocab)."""
        mask = torch.where(self.positions <= pos, 0.0, float("-inf"))
        x = self.tok(token) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x, pos, mask)
        return self.lm_head(self.norm(x))[:, 0]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=400, help="tokens to generate (graph replays)")
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("decode_cuda_graph.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    max_len = args.tokens + 16
    model = Decoder(vocab=32000, d=512, heads=8, layers=6, max_len=max_len, batch=args.batch).to(dev).eval()
    token = torch.randint(0, 32000, (args.batch, 1), device=dev)  # static input: the graph reads it
    pos = torch.zeros(1, dtype=torch.long, device=dev)  # static position: the graph advances it

    def decode_step() -> torch.Tensor:
        logits = model(token, pos)
        token.copy_(logits.argmax(-1, keepdim=True))
        pos.add_(1)
        return logits

    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (cuBLAS workspaces, allocator)
            for _ in range(3):
                decode_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = decode_step()
        pos.zero_()  # the warm-up and the capture advanced it; generation starts at position 0
        torch.cuda.synchronize()
        generated = []
        for i in range(args.tokens):
            graph.replay()
            if i % 50 == 49:
                generated.append(token[:, 0].clone())
                print(f"token {i + 1} position {int(pos.item())}", flush=True)
        torch.cuda.synchronize()
    print(f"replays {args.tokens}", flush=True)
    print(f"last logits max {static_logits.max().item():.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
