"""Host-op nesting at scale: time against how the events spread over threads.

Usage:
    python benchmarks/bench_nesting.py grid [--events 20000 200000 1000000] [--threads 1 64 4096 every]
    python benchmarks/bench_nesting.py spread SOURCE.json.gz OUT.json.gz --threads 64 [--copies 3]
    python benchmarks/bench_nesting.py analyze TRACE [TRACE ...]

``grid``: ``nest`` and ``innermost_enclosing`` (one query per op, at its start) on a table of host ops built from
the real GPT-2 H200 training trace (``../shared/traces``), repeated until it has the number of events asked; its
top-level op trees are dealt round robin over N threads (``every``: each op alone on its own thread, nothing
nests). Time is the best of three runs. Prints a Markdown table.

``spread``: writes a Kineto trace (repeated ``--copies`` times as ``make_big_trace.py`` does) whose host events
(ops, annotations, runtime and driver calls) move, one top-level tree at a time, to N threads of their process
(``every``: each host event on its own thread); GPU events stay as they are.

``analyze``: wall time of ``dnnprof analyze TRACE --json FILE -q`` in a fresh process, per trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT.parent / "shared" / "traces" / "gpt2_124m_bf16_train_h200.json.gz"
_HOST = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")


def _roots(starts: list[float], ends: list[float]) -> list[int]:
    """Index of the top-level range each range (sorted by start, longer first) sits in."""
    root, open_end, top = [], -float("inf"), -1
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if s >= open_end:
            top, open_end = i, e
        else:
            open_end = max(open_end, e)
        root.append(top)
    return root


def spread_events(events: list[dict[str, Any]], threads: int | None) -> None:
    """Move host events, one top-level tree at a time, onto ``threads`` threads of their process (None: each
    event on its own thread)."""
    lanes: dict[Any, list[int]] = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") in _HOST and isinstance(e.get("ts"), (int, float)):
            lanes.setdefault((e.get("pid"), e.get("tid")), []).append(i)
    serial = 0
    for (_, tid), rows in lanes.items():
        rows.sort(key=lambda i: (events[i]["ts"], -events[i].get("dur", 0)))
        if threads is None:
            for i in rows:
                serial += 1
                events[i]["tid"] = 10_000_000 + serial
            continue
        starts = [events[i]["ts"] for i in rows]
        root = _roots(starts, [s + events[i].get("dur", 0) for s, i in zip(starts, rows, strict=True)])
        tops = {r: k for k, r in enumerate(dict.fromkeys(root))}
        base = tid if isinstance(tid, int) else 0
        for i, r in zip(rows, root, strict=True):
            events[i]["tid"] = base * 100_000 + tops[r] % threads


def _ops_of(path: Path) -> dict[str, np.ndarray]:
    from dnnprof.ingest.kineto import read_kineto

    ops = read_kineto(path).tables["ops"]
    return {k: np.asarray(ops[k]) for k in ("tid", "start_ns", "dur_ns", "parent_row")}


def grid_table(base: dict[str, np.ndarray], events: int, threads: int | None) -> dict[str, np.ndarray]:
    """``events`` host ops: ``base`` repeated back to back, top-level trees dealt over ``threads`` threads."""
    from dnnprof.model.schema import empty_table

    n0 = base["start_ns"].size
    reps = -(-events // n0)
    span = int((base["start_ns"] + base["dur_ns"]).max() - base["start_ns"].min()) + 1_000_000
    start = (base["start_ns"][None, :] + span * np.arange(reps)[:, None]).ravel()[:events]
    dur = np.tile(base["dur_ns"], reps)[:events]
    # top-level tree of every op (root ancestor), numbered over the repeats
    root = np.arange(n0)
    parent = base["parent_row"]
    while True:
        up = parent[root]
        if (up < 0).all():
            break
        root = np.where(up >= 0, up, root)
    tree = (root[None, :] + n0 * np.arange(reps)[:, None]).ravel()[:events]
    t = empty_table("ops", events)
    t["start_ns"][:] = start
    t["dur_ns"][:] = dur
    t["tid"][:] = np.arange(events) if threads is None else np.tile(base["tid"], reps)[:events] * 100_000 + tree % threads
    return t


def _best(f: Any, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def grid(events: list[int], threads: list[str]) -> None:
    from dnnprof.ingest.nesting import innermost_enclosing, nest

    base = _ops_of(GPT2)
    print("| events | threads | nest (s) | innermost_enclosing (s) |")
    print("|---|---|---|---|")
    for n in events:
        for th in threads:
            t = grid_table(base, n, None if th == "every" else int(th))
            n_threads = np.unique(t["tid"]).size
            a = _best(lambda t=t: nest(t))
            b = _best(lambda t=t: innermost_enclosing(t, t["tid"], t["start_ns"]))
            print(f"| {n:,} | {n_threads:,} | {a:.3f} | {b:.3f} |", flush=True)


def spread(source: Path, out: Path, threads: str, copies: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from make_big_trace import build

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.json"
        build(source, big, copies, None)
        doc = json.loads(big.read_bytes())
    spread_events(doc["traceEvents"], None if threads == "every" else int(threads))
    with (gzip.open(out, "wt") if out.suffix == ".gz" else open(out, "w")) as f:
        json.dump(doc, f)
    print(f"{out}: {len(doc['traceEvents']):,} events")


def analyze(traces: list[Path]) -> None:
    print("| trace | analyze (s) |")
    print("|---|---|")
    for p in traces:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dnnprof", "analyze", str(p), "--json", str(Path(tmp) / "a.json"),
                            "-q"], check=True, stdout=subprocess.DEVNULL)
            print(f"| {p.name} | {time.perf_counter() - t:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--events", type=int, nargs="+", default=[20_000, 200_000, 1_000_000])
    g.add_argument("--threads", nargs="+", default=["1", "64", "4096", "every"])
    s = sub.add_parser("spread")
    s.add_argument("source", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--threads", default="64")
    s.add_argument("--copies", type=int, default=1)
    a = sub.add_parser("analyze")
    a.add_argument("traces", type=Path, nargs="+")
    args = ap.parse_args()
    if args.cmd == "grid":
        grid(args.events, args.threads)
    elif args.cmd == "spread":
        spread(args.source, args.out, args.threads, args.copies)
    else:
        analyze(args.traces)


if __name__ == "__main__":
    main()
