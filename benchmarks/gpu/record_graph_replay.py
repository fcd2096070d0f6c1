"""Record a real CUDA-graph replay trace: the decode loop of ``tests/data/scripts/decode_cuda_graph.py`` (one graph
replay per generated token, as LLM servers run) under a plain ``torch.profiler.profile`` with no step markers, as
a serving job's trace comes. The result is a test fixture (``tests/data/graph_replay_h100``).

Usage (GPU machine, repository root): python benchmarks/gpu/record_graph_replay.py OUT.json.gz [--replays 24]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--replays", type=int, default=24)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("decode", ROOT / "tests/data/scripts/decode_cuda_graph.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    max_len = 256
    model = mod.Decoder(vocab=32000, d=512, heads=8, layers=6, max_len=max_len, batch=args.batch).to(dev).eval()
    token = torch.randint(0, 32000, (args.batch, 1), device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)

    def decode_step() -> torch.Tensor:
        logits = model(token, pos)
        token.copy_(logits.argmax(-1, keepdim=True))
        pos.add_(1)
        return logits

    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                decode_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            decode_step()
        pos.zero_()
        for _ in range(8):  # warm replays
            graph.replay()
        torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(args.replays):
                graph.replay()
            torch.cuda.synchronize()
    prof.export_chrome_trace(args.out)
    print(f"recorded {args.replays} replays to {args.out}; torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
