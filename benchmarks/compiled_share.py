"""Share of a CPU-only run's op self time attributed at module level, and per phase.

Usage: python benchmarks/compiled_share.py RUN_DIR [RUN_DIR …]  → one JSON line per run.

A CPU profile has no kernels: the work is the ops' self time (Inductor's C++ kernels are ranges of their own under
``cpp.enable_kernel_profile``). dnnprof's own ranges, step markers and the profiler's clock probe are left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from dnnprof.analysis.attribution import PHASES, attribute, inherit
from dnnprof.model.profile import Profile


def self_time_ns(profile: Profile) -> np.ndarray:
    ops = profile.tables["ops"]
    dur = ops["dur_ns"].astype(np.int64)
    parent = ops["parent_row"].astype(np.int64)
    child = np.zeros(dur.size, dtype=np.int64)
    has = parent >= 0
    np.add.at(child, parent[has], dur[has])
    return np.maximum(dur - child, 0)


def share(run_dir: Path) -> dict[str, object]:
    profile = Profile.load(run_dir / "profile")
    ops = profile.tables["ops"]
    names = profile.names(ops["name_id"]).astype(str)
    a = attribute(profile, "ops")
    own = np.char.startswith(names, "dnnprof.") | np.char.startswith(names, "ProfilerStep#")
    keep = ~own & (ops["step"] >= 0) if "step" in ops else ~own
    self_ns = self_time_ns(profile) * keep
    total = float(self_ns.sum()) or 1.0
    op_names = set(names.tolist())  # an op-level layer is an op's name; a module layer is "fqn (Class)"
    module = np.fromiter((bool(x) and x not in op_names for x in a.layer), bool, a.layer.size)
    top: dict[str, float] = {}
    for lab, t in zip(a.layer[module], self_ns[module], strict=True):
        top[lab] = top.get(lab, 0.0) + float(t)
    region = np.char.startswith(names, "Torch-Compiled Region") | np.char.startswith(names, "## Call CompiledFxGraph")
    inside = (inherit(np.where(region, np.arange(names.size), -1), ops["parent_row"]) >= 0) & ~region  # not the
    # calls' own wrapper time
    compiled_ns = float(self_ns[inside].sum()) or 1.0
    return {"run": run_dir.name, "module_share_pct": round(100 * float(self_ns[module].sum()) / total, 1),
            # inside the compiled graphs only: what the compile-time records decide, free of eager ops around them
            # (the inputs' randn, whose time the machine's load can stretch)
            "compiled_module_share_pct": round(100 * float(self_ns[module & inside].sum()) / compiled_ns, 1),
            "phase_pct": {p: round(100 * float(self_ns[a.phase == i].sum()) / total, 1) for i, p in enumerate(PHASES)},
            "steps": int(profile.tables["steps"]["number"].size),
            "top_layers": sorted(((k, round(100 * v / total, 1)) for k, v in top.items()), key=lambda x: -x[1])[:5],
            "compiled": {k: v for k, v in (profile.meta.get("compiled") or {}).items()
                         if k in ("status", "graphs", "ops_matched", "ops_unmatched", "dynamo")}}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(json.dumps(share(Path(arg))))
