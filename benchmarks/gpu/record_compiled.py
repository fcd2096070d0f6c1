"""Record compiled and CUDA-graph runs on a GPU under ``dnnprof run`` and keep trimmed fixtures.

Run from the repository root on a GPU host (torch with triton):
    PYTHONPATH=src python benchmarks/gpu/record_compiled.py [--out $OUT] [--only NAME,…]

For each case: ``python -m dnnprof.cli.main run`` on ``tests/data/scripts/compiled_models.py`` (Hugging Face GPT-2
124M, 8 × 512 tokens, and torchvision ResNet-50, 32 × 224², fp32; eager / torch.compile default /
mode="reduce-overhead"; train and inference; ``--only gpt_eager_train,…`` for the small hand-written models) and on
``decode_cuda_graph.py`` (a decode loop replaying a CUDA graph); the run directory's small files and the traces,
gzipped, go to ``<out>/<name>/`` when they fit ``MAX_FIXTURE_BYTES``. Prints one JSON document: per case the
share of GPU kernel time on module layers, the phases, the steps, compile records and the wall time.
Budget: about 30–60 s a case on an H100 (each case has its own timeout); ``--only`` splits the work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "data" / "scripts"
MAX_FIXTURE_BYTES = 2 * 1024 * 1024
CASE_TIMEOUT_S = 150
MODELS = SCRIPTS / "compiled_models.py"

#: name -> (script args, dnnprof run options)
CASES: dict[str, tuple[list[str], list[str]]] = {}
for _model in ("gpt2", "resnet50", "gpt", "cnn"):
    for _mode in ("eager", "default", "reduce-overhead"):
        for _train in (True, False):
            _tag = {"eager": "eager", "default": "compile", "reduce-overhead": "ro"}[_mode]
            CASES[f"{_model}_{_tag}_{'train' if _train else 'infer'}"] = (
                [str(MODELS), "--model", _model, "--train" if _train else "--infer", "--mode", _mode, "--steps", "14"],
                [] if _train else ["--step-marker", "infer_step"])
CASES["decode_cuda_graph"] = ([str(SCRIPTS / "decode_cuda_graph.py"), "--tokens", "200"], [])
#: What ``--only`` means without a list: the models the issue names (Hugging Face GPT-2, torchvision ResNet-50)
#: and the decode loop; ``gpt``/``cnn`` are the small hand-written models of the CPU tests.
DEFAULT = [n for n in CASES if n.startswith(("gpt2_", "resnet50_"))] + ["decode_cuda_graph"]


def gpu_share(run: Path) -> dict[str, object]:
    """Module-level share of kernel time, phases and steps of a run directory."""
    import numpy as np

    from dnnprof.analysis.attribution import PHASES, attribute
    from dnnprof.model.profile import Profile

    profile = Profile.load(run / "profile")
    k = profile.tables["kernels"]
    a = attribute(profile, "kernels")
    dur = k["dur_ns"].astype(np.float64)
    total = float(dur.sum()) or 1.0
    op_names = set(profile.names(profile.tables["ops"]["name_id"]).astype(str).tolist())
    module = np.fromiter((bool(x) and x not in op_names for x in a.layer), bool, a.layer.size)
    model = a.phase != PHASES.index("optimizer")
    top: dict[str, float] = {}
    for lab, t in zip(a.layer, dur, strict=True):
        top[lab] = top.get(lab, 0.0) + float(t)
    return {"kernels": int(dur.size), "module_share_pct": round(100 * float(dur[module].sum()) / total, 1),
            "module_share_model_pct": round(100 * float(dur[module & model].sum()) / (float(dur[model].sum()) or 1), 1),
            "phase_pct": {p: round(100 * float(dur[a.phase == i].sum()) / total, 1) for i, p in enumerate(PHASES)},
            "steps": int(profile.tables["steps"]["number"].size),
            "step_dur_us": [round(float(x) / 1000, 1) for x in profile.tables["steps"]["dur_ns"][:20]],
            "top_layers_pct": sorted(((n, round(100 * v / total, 1)) for n, v in top.items()), key=lambda x: -x[1])[:6],
            "compiled": {x: y for x, y in (profile.meta.get("compiled") or {}).items()
                         if x in ("status", "note", "graphs", "graph_calls", "ops_matched", "ops_unmatched", "dynamo")}}


def keep_fixture(run: Path, dest: Path) -> dict[str, object]:
    """The run's small files and gzipped traces (not the Parquet profile) into ``dest`` when they fit."""
    dest.mkdir(parents=True, exist_ok=True)
    size = 0
    for p in sorted(run.rglob("*")):
        if not p.is_file() or p.parent.name == "profile" or p.suffix == ".parquet":
            continue
        rel = p.relative_to(run)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest / rel)
        size += p.stat().st_size
    if size > MAX_FIXTURE_BYTES:
        shutil.rmtree(dest)
        return {"kept": False, "bytes": size, "why": f"over {MAX_FIXTURE_BYTES} bytes"}
    return {"kept": True, "bytes": size}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-fixtures"))
    p.add_argument("--only", default="", help="comma-separated case names")
    args = p.parse_args()
    out = Path(args.out)
    work = out / "_runs"
    names = [n for n in CASES if n in (args.only.split(",") if args.only else DEFAULT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    table: dict[str, object] = {}
    for name in names:
        script, opts = CASES[name]
        run = work / name
        cmd = [sys.executable, "-m", "dnnprof.cli.main", "run", "-q", "--warmup-steps", "5", "--steps", "5",
               "--no-nvml", *opts, "--out", str(run), "--", sys.executable, *script]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S, check=False)
            row: dict[str, object] = {"rc": r.returncode, "stderr_tail": r.stderr[-600:]}
        except subprocess.TimeoutExpired:
            row = {"rc": None, "timeout_s": CASE_TIMEOUT_S}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        if (run / "profile" / "profile.json").is_file():
            try:
                row.update(gpu_share(run))
            except Exception as e:  # noqa: BLE001 - a table row says what failed, the other cases go on
                row["analysis_error"] = f"{type(e).__name__}: {e}"
            row["fixture"] = keep_fixture(run, out / name)
        table[name] = row
        print(f"{name}: {json.dumps({k: row.get(k) for k in ('rc', 'wall_s', 'module_share_pct', 'steps')})}",
              file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
