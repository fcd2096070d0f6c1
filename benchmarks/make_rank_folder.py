"""Write a folder of N per-rank Kineto traces made from one real trace, for measuring ``dnnprof analyze FOLDER``.

Each rank is the source trace with its ``distributedInfo`` rank and world size rewritten, its timeline shifted by
a random offset (up to ``--shift-us``, the spread of clocks and start times of a real job's ranks) and every GPU
kernel's duration scaled by a random factor around 1 (``--jitter-pct``, its own per rank), so no two ranks are
the same trace and the cross-rank analysis has arrivals to compare. The source should hold collectives (the
default, a DDP rank recorded on two H100s) for the critical path to run.

    python benchmarks/make_rank_folder.py /tmp/ranks64 --ranks 64
    python benchmarks/make_rank_folder.py /tmp/ranks256 --ranks 256 --source tests/data/ddp_h100/balanced/rank0.json.gz
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
from pathlib import Path

DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "ddp_h100" / "balanced" / "rank0.json.gz"


def rank_trace(doc: dict, rank: int, world: int, rng: random.Random, shift_us: float, jitter_pct: float) -> dict:
    """The source trace as rank ``rank`` of ``world``: shifted, kernel durations perturbed."""
    out = copy.copy(doc)
    info = dict(doc.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world)
    if "pg_config" in info:
        info["pg_config"] = [{**pg, "pg_size": world, "ranks": list(range(world))} for pg in info["pg_config"]]
    out["distributedInfo"] = info
    shift = rng.uniform(0.0, shift_us)
    scale = 1.0 + rng.gauss(0.0, jitter_pct / 100.0)
    events = []
    for e in doc["traceEvents"]:
        if "ts" in e:
            e = dict(e)
            e["ts"] = round(float(e["ts"]) + shift, 3)
            if e.get("cat") == "kernel" and "dur" in e:
                e["dur"] = round(float(e["dur"]) * max(scale, 0.5), 3)
        events.append(e)
    out["traceEvents"] = events
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--shift-us", type=float, default=200.0)
    ap.add_argument("--jitter-pct", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with gzip.open(args.source, "rt") if args.source.name.endswith(".gz") else args.source.open() as f:
        doc = json.load(f)
    args.folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    width = len(str(args.ranks - 1))
    for r in range(args.ranks):
        path = args.folder / f"rank{r:0{width}d}.json.gz"
        with gzip.open(path, "wt", compresslevel=1) as f:
            json.dump(rank_trace(doc, r, args.ranks, rng, args.shift_us, args.jitter_pct), f)
    print(f"{args.folder}: {args.ranks} ranks from {args.source.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
