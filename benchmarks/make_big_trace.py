"""Build a big Kineto trace by repeating a real trace's run back to back (shifted times and ids).

Usage:
    python benchmarks/make_big_trace.py SOURCE.json.gz OUT.json --copies 24      # ~890 MB from DeepSpeech
    python benchmarks/make_big_trace.py SOURCE.json.gz OUT.json --min-bytes 5e9  # as many copies as 5 GB needs

Copy k has every timestamp moved past the end of copy k-1 (plus a 1 ms gap), every correlation id, External id,
flow id and autograd sequence number moved past the previous copy's largest, and ``ProfilerStep#N`` renumbered,
so the result reads like one long run: steps, launches, kernels and flows link within each copy only. The
document fields (deviceProperties, baseTimeNanoseconds, …) are the source's. Written as plain JSON, one event per
line, the way Kineto writes it (``.gz`` output is gzipped).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import msgspec

_ARG_IDS = ("correlation", "External id", "Sequence number")


def _span(events: list[dict[str, Any]]) -> tuple[float, float]:
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    return min(ts), max(ends)


def _max_id(events: list[dict[str, Any]]) -> int:
    m = 0
    for e in events:
        if isinstance(e.get("id"), int):
            m = max(m, e["id"])
        a = e.get("args")
        if isinstance(a, dict):
            for k in _ARG_IDS:
                if isinstance(a.get(k), int):
                    m = max(m, a[k])
    return m


def _shifted(events: list[dict[str, Any]], k: int, dt: float, did: int, steps: int) -> list[dict[str, Any]]:
    out = []
    for e in events:
        e = dict(e)
        if e.get("ph") == "M":  # process/thread names: once, in copy 0
            if k:
                continue
            out.append(e)
            continue
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + k * dt, 3)
        if isinstance(e.get("id"), int):
            e["id"] += k * did
        a = e.get("args")
        if isinstance(a, dict):
            a = e["args"] = dict(a)
            for key in _ARG_IDS:
                if isinstance(a.get(key), int) and a[key] >= 0:
                    a[key] += k * did
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name.rsplit('#', 1)[1]) + k * steps}"
        out.append(e)
    return out


def build(source: Path, out: Path, copies: int | None, min_bytes: float | None) -> tuple[int, int]:
    """Write the big trace; returns (copies, bytes of JSON written)."""
    doc = json.loads(gzip.open(source).read() if source.suffix == ".gz" else source.read_bytes())
    events = doc.pop("traceEvents")
    t0, t1 = _span(events)
    dt = (t1 - t0) + 1000.0
    did = _max_id(events) + 1
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    head = msgspec.json.encode(doc)[:-1] + b',"traceEvents":[\n'
    enc = msgspec.json.Encoder()
    written = 0
    k = 0
    opener = gzip.open if out.suffix == ".gz" else open
    with opener(out, "wb") as f:
        f.write(head)
        written += len(head)
        while (copies is not None and k < copies) or (min_bytes is not None and written < min_bytes):
            body = b",\n".join(enc.encode(e) for e in _shifted(events, k, dt, did, steps))
            if k:
                body = b",\n" + body
            f.write(body)
            written += len(body)
            k += 1
        f.write(b"\n]}\n")
        written += 4
    return k, written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=None)
    ap.add_argument("--min-bytes", type=float, default=None)
    a = ap.parse_args()
    if a.copies is None and a.min_bytes is None:
        ap.error("give --copies or --min-bytes")
    k, n = build(a.source, a.out, a.copies, a.min_bytes)
    print(f"{a.out}: {k} copies, {n / 1e6:.0f} MB of JSON")


if __name__ == "__main__":
    main()
