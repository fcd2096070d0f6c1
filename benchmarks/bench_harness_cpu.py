"""What ``dnnprof bench``'s timed loop adds over a plain loop, on the CPU, for a small model whose call costs
little (so per-iteration harness work would show).

Times the same eager model (an 8-layer MLP, batch 8, one thread) by ``dnnprof.bench.trial.run_trial`` and by a
plain loop (inference mode entered once, ``perf_counter`` around each call), alternating, ``ROUNDS`` times each;
prints the medians of the per-round p50 latencies and the overhead in percent.

Run: ``PYTHONPATH=src python benchmarks/bench_harness_cpu.py`` (~20 s). Set ``PYTHONPATH`` to another checkout's
``src`` to measure its harness.
"""

from __future__ import annotations

import statistics
import time

import torch

from dnnprof.bench.sources import Source
from dnnprof.bench.trial import Settings, run_trial

ROUNDS, ITERATIONS, WARMUP = 7, 2000, 100
BATCH, WIDTH, LAYERS = 8, 256, 8


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


def plain(m: torch.nn.Module, x: torch.Tensor) -> float:
    times = []
    with torch.inference_mode():
        for i in range(WARMUP + ITERATIONS):
            t0 = time.perf_counter()
            m(x)
            if i >= WARMUP:
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def harness(m: torch.nn.Module, x: torch.Tensor) -> float:
    source = Source(name="mlp", kind="script", device="cpu", precision="fp32", make_inputs=lambda b: (x,), model=m)
    trial, _ = run_trial(source, "eager", BATCH, Settings(warmup=WARMUP, iterations=ITERATIONS), None, None)
    assert trial.status == "ok", trial.reason
    return statistics.median(trial.latency_ms)


def main() -> None:
    torch.set_num_threads(1)
    m, x = model(), torch.randn(BATCH, WIDTH)
    p, h = [], []
    for _ in range(ROUNDS):
        p.append(plain(m, x))
        h.append(harness(m, x))
    pm, hm = statistics.median(p), statistics.median(h)
    print(f"plain loop p50 {pm * 1e3:.1f} us; dnnprof bench p50 {hm * 1e3:.1f} us; "
          f"overhead {(hm / pm - 1) * 100:+.2f} % (medians of {ROUNDS} rounds of {ITERATIONS} iterations)")


if __name__ == "__main__":
    main()
