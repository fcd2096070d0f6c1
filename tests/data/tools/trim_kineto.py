"""Cut a real Kineto trace down to a few ProfilerStep windows, for small test fixtures.

Usage: python tests/data/tools/trim_kineto.py IN.json.gz OUT.json.gz --steps 4 5 [--strip-steps] [--absolute]

Keeps the header (deviceProperties, baseTimeNanoseconds, …), metadata events, every host event that starts
inside the kept steps, every GPU event whose launch (by correlation) is kept, and the flows between kept events.
--strip-steps drops the ProfilerStep#N ranges (to test step inference); --absolute rewrites timestamps as
absolute epoch µs and drops baseTimeNanoseconds (the pre-2.3 torch format).
"""

from __future__ import annotations

import argparse
import gzip
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--steps", type=int, nargs="+", required=True)
    ap.add_argument("--strip-steps", action="store_true")
    ap.add_argument("--strip-optimizer", action="store_true")
    ap.add_argument("--absolute", action="store_true")
    a = ap.parse_args()
    doc = json.loads(gzip.open(a.src).read())
    evs = doc["traceEvents"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in evs
               if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
               and int(e["name"].split("#")[1]) in a.steps]
    if not windows:
        raise SystemExit("no such steps")
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)

    def host_kept(e: dict) -> bool:
        return lo <= e.get("ts", -1) < hi

    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
    kept, corr = [], set()
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") not in gpu_cats | {"gpu_user_annotation", "Trace"} and host_kept(e):
            if a.strip_steps and e["name"].startswith("ProfilerStep#"):
                continue
            if a.strip_optimizer and e["name"].startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
                continue
            kept.append(e)
            if "correlation" in e.get("args", {}):
                corr.add(e["args"]["correlation"])
    for e in evs:
        if (e.get("ph") == "X" and e.get("cat") in gpu_cats and e.get("args", {}).get("correlation") in corr) or e.get("ph") == "M" or (e.get("cat") == "fwdbwd" and host_kept(e)) or (e.get("cat") == "ac2g" and e.get("id") in corr) or (e.get("cat") == "gpu_user_annotation" and not a.strip_steps and any(
                w[0] - 1e4 <= e["ts"] < w[1] + 1e5 for w in windows)):
            kept.append(e)
    if a.absolute:
        base_us = doc.pop("baseTimeNanoseconds") / 1000.0
        for e in kept:
            if "ts" in e:
                e["ts"] = round(e["ts"] + base_us, 3)
    doc["traceEvents"] = kept
    doc["traceName"] = "trimmed"
    with gzip.open(a.dst, "wt") as f:
        json.dump(doc, f)
    print(f"{a.dst}: {len(kept)} events")


if __name__ == "__main__":
    main()
