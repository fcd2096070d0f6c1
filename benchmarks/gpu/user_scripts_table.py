"""Every user script of tests/data/scripts under ``dnnprof run`` on one GPU: the table of issue 14's "Measured".

Run on the GPU machine from the repository root (dnnprof need not be installed; ``src`` goes on PYTHONPATH):
    python benchmarks/gpu/user_scripts_table.py --out DIR                 # all cases, ~6-8 min on an H100
    python benchmarks/gpu/user_scripts_table.py --out DIR --only gan,hf-gpt2
    python benchmarks/gpu/user_scripts_table.py --out DIR --device cpu    # the CPU cases (harness check)

Each case (``tests/user_script_checks.py``: script, arguments, what the script's code says a profile must show)
runs once as ``python -m dnnprof run --warmup-steps 5 --steps 20 --out RUN -- python SCRIPT ...`` in a scratch
folder. Per case: steps and their median, forward / backward / optimizer / other share of kernel time (of leaf
host-op time on the CPU), findings with their estimated gains, GPU busy % beside NVML utilisation and GPM SM
active % over the timed steps, dilation (the timed steps against the unprofiled steps of the same process,
``overhead.dilation``), the run's wall time, and the ways the profile contradicts the script
(``violations``; 0 means none). A case that fails or times out keeps its row with the error.

Writes DIR/user_scripts_table.md (the table, also printed) and DIR/user_scripts.json (every row, violation and
run summary), nothing else.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from user_script_checks import CASES, Case, dnnprof_run, load_json, step_phases, violations  # noqa: E402

PHASES = ("forward", "backward", "optimizer", "other")


def _metric(summary: dict[str, Any], name: str) -> float | None:
    m = ((summary.get("samples") or {}).get("metrics") or {}).get(name) or {}
    return m.get("mean") if m.get("n") else None


def phase_pcts(summary: dict[str, Any], run: Path, gpu: bool) -> dict[str, float]:
    """Share of each phase: of kernel time on a GPU, of leaf host-op time on the CPU (``step_phases``)."""
    if gpu:
        ns = {ph: float(summary["phases"].get(f"{ph}_us", 0.0)) for ph in PHASES}
    else:
        per_step, _, _ = step_phases(run)
        ns = {ph: float(sum(s[ph] for s in per_step.values())) for ph in PHASES}
    total = sum(ns.values()) or 1.0
    return {ph: round(100.0 * v / total, 1) for ph, v in ns.items()}


def run_case(case: Case, scratch: Path, device: str, warmup: int, steps: int, timeout_s: float) -> dict[str, Any]:
    out = scratch / case.name / "run"
    out.parent.mkdir(parents=True)
    row: dict[str, Any] = {"case": case.name, "command": " ".join([case.script, *case.args]), "status": "ok"}
    t0 = time.monotonic()
    try:
        r = dnnprof_run(case, out, device=device, warmup=warmup, steps=steps, timeout_s=timeout_s, cwd=out.parent)
    except subprocess.TimeoutExpired:
        row.update(status="timeout", error=f"timed out after {timeout_s:.0f} s", wall_s=round(time.monotonic() - t0))
        return row
    row["wall_s"] = round(time.monotonic() - t0, 1)
    if not out.is_dir() and out.with_name(out.name + ".incomplete").is_dir():
        out = out.with_name(out.name + ".incomplete")  # the partial profile of a run that ended early
    if r.returncode != 0 or not (out / "summary.json").is_file():
        row.update(status=f"exit {r.returncode}", error=(r.stderr or r.stdout)[-2000:])
        if not (out / "summary.json").is_file():
            return row
    try:
        summary, meta = load_json(out, "summary.json"), load_json(out, "meta.json")
        gpu = bool(summary["gpu"]["has_activity"])
        st = summary["steps"]
        row.update(
            steps=st["count"], step_source=st["source"],
            step_median_ms=round(st["median_us"] / 1e3, 3) if st.get("median_us") else None,
            phases_pct=phase_pcts(summary, out, gpu),
            findings=[{"id": f["id"], "severity": f.get("severity"), "est_gain_pct": f.get("est_gain_pct")}
                      for f in summary.get("findings", [])],
            busy_pct=summary["gpu"]["busy_pct"] if gpu else None,
            nvml_util_pct=_metric(summary, "gpu_util_pct"), gpm_sm_active_pct=_metric(summary, "sm_active_pct"),
            dilation=(summary.get("overhead") or {}).get("dilation"),
            matched_kernels_pct=((meta.get("capture") or {}).get("attribution") or {}).get("matched_kernels_pct"),
            environment={k: (meta.get("environment") or {}).get(k)
                         for k in ("gpu", "torch", "driver", "cuda_runtime")},
            violations=violations(case, out, steps=steps, gpu=gpu),
            summary=summary,
        )
    except (KeyError, ValueError, OSError) as e:  # a summary that does not have what the table reads
        row.update(status="unreadable", error=f"{type(e).__name__}: {e}")
    return row


def _fmt(v: Any, nd: int = 1) -> str:
    return "–" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "",
             "| script | steps | step ms (median) | fwd / bwd / opt / other % | findings (est. gain) | busy % | "
             "NVML util % | GPM SM active % | dilation | wall s | contradictions |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "steps" not in r:
            err = " ".join(str(r.get("error", "")).split())[-160:]
            lines.append(f"| {r['command']} | **{r['status']}** | | | {err} | | | | | {_fmt(r.get('wall_s'))} | |")
            continue
        ph = r["phases_pct"]
        finds = ", ".join(f"{f['id']} ({_fmt(f['est_gain_pct'], 0)}%)" for f in r["findings"]) or "none"
        bad = r["violations"]
        contra = "none" if not bad else f"**{len(bad)}**: {bad[0][:80]}" + ("; …" if len(bad) > 1 else "")
        status = "" if r["status"] == "ok" else f" ({r['status']})"
        lines.append(
            f"| {r['command']}{status} | {r['steps']} ({r['step_source']}) | {_fmt(r['step_median_ms'], 2)} | "
            f"{' / '.join(_fmt(ph[p]) for p in PHASES)} | {finds} | {_fmt(r['busy_pct'])} | "
            f"{_fmt(r['nvml_util_pct'])} | {_fmt(r['gpm_sm_active_pct'])} | {_fmt(r['dilation'], 3)} | "
            f"{_fmt(r['wall_s'])} | {contra} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the table and the JSON (created)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only", default="", help="comma-separated case names (default: all for the device)")
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=150.0, help="per case")
    ap.add_argument("--budget-s", type=float, default=450.0,
                    help="for all cases: the case running then is stopped, the ones after it skipped")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if args.device == "cuda" or c.cpu]
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - {c.name for c in CASES})
        if unknown:
            ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(c.name for c in CASES)}")
        cases = [c for c in cases if c.name in names]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="user-scripts-"))
    try:
        for case in cases:
            left = args.budget_s - (time.monotonic() - t0)
            if case.missing():
                rows.append({"case": case.name, "command": " ".join([case.script, *case.args]),
                             "status": "skipped", "error": case.missing()})
                continue
            if left < 10:
                rows.append({"case": case.name, "command": " ".join([case.script, *case.args]),
                             "status": "skipped", "error": f"time budget of {args.budget_s:.0f} s spent"})
                continue
            row = run_case(case, scratch, args.device, args.warmup_steps, args.steps, min(args.timeout_s, left))
            rows.append(row)
            print(f"{case.name}: {row['status']}, {row.get('wall_s')} s, "
                  f"{len(row.get('violations') or [])} contradictions", file=sys.stderr, flush=True)
            shutil.rmtree(scratch / case.name, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    env = next((r["environment"] for r in rows if r.get("environment")), {})
    gpu = env.get("gpu") or {}
    header = (f"`dnnprof run --warmup-steps {args.warmup_steps} --steps {args.steps}` on each user script; "
              f"device {gpu.get('name', args.device) if isinstance(gpu, dict) else gpu}, torch {env.get('torch')}, "
              f"driver {env.get('driver')}; total {time.monotonic() - t0:.0f} s on "
              f"{time.strftime('%Y-%m-%d', time.gmtime())}")
    table = markdown(rows, header)
    (args.out / "user_scripts_table.md").write_text(table)
    doc = {"format": "dnnprof.user_scripts_table/1", "device": args.device, "warmup_steps": args.warmup_steps,
           "steps": args.steps, "environment": env, "rows": rows}
    (args.out / "user_scripts.json").write_text(json.dumps(doc, indent=1, default=str))
    print(table)
    return 0 if all(r["status"] == "ok" and not r.get("violations") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
