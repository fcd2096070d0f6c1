"""Nsight Compute results: ``dnnprof counters RUN`` and ``dnnprof analyze ncu.csv`` (an ncu file on its own)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.render.safe_text import clean

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "dnnprof.counters/1"


def ncu_summary(path: Path) -> dict[str, Any]:
    """Per-kernel table of an ncu CSV/report: launches grouped by kernel name, time-weighted, longest first."""
    import numpy as np

    from dnnprof.analysis.bounds import aggregate_bounds, compute_bounds
    from dnnprof.analysis.kernel_names import family, short_name, uses_tensor_cores
    from dnnprof.ingest.ncu_csv import NcuFormatError, read_ncu

    try:
        table = read_ncu(path)
    except NcuFormatError as e:
        raise UserError(str(e)) from None
    if not len(table):
        raise UserError(f"{path}: the Nsight Compute file holds no profiled kernel")
    b = compute_bounds(table.metrics)
    names = np.asarray([str(n) for n in table.kernel_name], dtype=object)
    total = float(np.nansum(b.duration_ns)) or 1.0
    kernels = []
    for g in aggregate_bounds(b, names):
        kernels.append({
            "name": g.key, "short_name": short_name(g.key), "family": family(g.key),
            "tensor_core": uses_tensor_cores(g.key), "launches": g.launches,
            "total_us": round(g.duration_ns / 1000.0, 3), "pct": round(100.0 * g.duration_ns / total, 3),
            "sm_throughput_pct": _r(g.sm_throughput_pct), "memory_throughput_pct": _r(g.memory_throughput_pct),
            "achieved_occupancy_pct": _r(g.achieved_occupancy_pct), "waves_per_sm": _r(g.waves_per_sm),
            "dram_bytes": _r(g.dram_bytes / g.launches, 0) if g.launches else None,
            "flops": _r(g.flops / g.launches, 0) if g.launches else None,
            "arithmetic_intensity": _r(g.arithmetic_intensity, 3),
            "achieved_flops_per_s": _r(g.flops_per_s, 0), "bound": g.bound or None,
        })
    bounds: dict[str, float] = {}
    for k in kernels:
        key = k["bound"] or "unclassified"
        bounds[key] = bounds.get(key, 0.0) + k["pct"]
    return {"schema": SCHEMA, "source": {"path": str(path), "format": "ncu"}, "launches": len(table),
            "kernels": kernels, "bound_share_pct": {k: round(v, 2) for k, v in sorted(bounds.items())},
            "throughput_source": b.throughput_source,
            "roofline": _roofline(table.metrics, names, _device_name(table.text))}


def _device_name(text: dict[str, np.ndarray]) -> str:
    """The GPU ncu profiled on (``device__attribute_display_name``), "" when the file does not say."""
    col = text.get("device__attribute_display_name")
    names = sorted({str(x) for x in col if str(x).strip()}) if col is not None else []
    return names[0] if len(names) == 1 else ""


def _roofline(metrics: dict[str, np.ndarray], names: np.ndarray, device: str) -> dict[str, Any]:
    from dnnprof.analysis.roofline import metrics_roofline
    from dnnprof.model.gpu_specs import lookup_gpu

    return metrics_roofline(metrics, names, lookup_gpu(device) if device else None, device).to_dict()


def _r(x: float, digits: int = 2) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def report_ncu_file(path: Path, json_out: Path | None, top: int, quiet: bool, html: Path | None = None) -> None:
    """Print (and optionally write as JSON and as an HTML page with the roofline) the per-kernel counters table
    of an ncu CSV/report."""
    doc = ncu_summary(path)
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        write_json(doc, json_out)
    if html is not None:
        from dnnprof.model.outputs import write_text_atomic
        from dnnprof.render.html_report import render_counters_html

        write_text_atomic(html, render_counters_html(doc, top=max(top, 30)), option="--html")
    if not quiet and str(json_out) != "-":
        from dnnprof.render.counters_table import render_counters

        render_counters(doc, top=top)


def counters(
    run: Path = typer.Argument(..., help="A dnnprof run directory (from `dnnprof run` or `dnnprof profile`).",
                               show_default=False),
    json_out: Path | None = opt.json_out("updated dnnprof.summary/1"),
    top: int = opt.top(15),
) -> None:
    """Nsight Compute counters for an existing run: re-run its command under ncu for one steady step (only the
    kernel signatures that cover most of the GPU time), join them onto every kernel, update the run."""
    import json
    import os
    import sys

    from dnnprof.analysis.counters_join import join_counters
    from dnnprof.cli.sources import run_extras
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.model.profile import Profile, ProfileError
    from dnnprof.render.json_out import write_json
    from dnnprof.runs.counters_pass import counters_pass
    from dnnprof.runs.report import report
    from dnnprof.runs.session import child_env

    meta_path = run / "meta.json"
    if not meta_path.is_file() or not (run / "profile").is_dir():
        raise UserError(f"{run}: not a dnnprof run directory (no meta.json and profile/)")
    if json_out is not None and str(json_out) != "-":
        from dnnprof.model.outputs import OutputError, check_output_file

        try:  # not over a file of the run (its meta.json, summary.json) nor a folder
            check_output_file(json_out, option="--json", inputs=[run])
        except OutputError as e:
            raise UserError(str(e)) from None
    meta = json.loads(meta_path.read_text())
    if not meta.get("complete"):
        raise UserError(f"{run}: the run is incomplete ({meta.get('reason') or meta.get('status')}); counters need a "
                        "complete run")
    try:
        profile = Profile.load(run / "profile")
        config = CollectorConfig.load(run)
    except (ProfileError, OSError, ValueError) as e:
        raise UserError(f"{run}: {e}") from None
    timed = [int(s) for s in (meta.get("capture") or {}).get("timed_steps") or []]
    step = timed[len(timed) // 2] if timed else None

    def join(p: object, table: object) -> object:
        return join_counters(p, table, steps=[step] if step is not None else None)  # type: ignore[arg-type]

    cwd = meta.get("cwd") or os.getcwd()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = counters_pass(run, list(meta["command"]), config, profile, timed, child_env, join,
                               say=lambda m: print(f"dnnprof: counters: {clean(m)}", file=sys.stderr, flush=True))
    finally:
        os.chdir(old)
    meta.setdefault("capture", {})["counters"] = result
    if result.get("status") != "ok":
        write_json(meta, meta_path)
        raise UserError(f"{run}: counters: {result.get('message')}", exit_code=1)
    profile.save(run / "profile")
    _, doc = report(profile, extras=run_extras(run))  # the run's extras (throughput, samples, memory, …)
    write_json(doc, run / "summary.json")
    write_json(meta, meta_path)
    if json_out is not None:
        write_json(doc, json_out)
    print(f"dnnprof: counters for step {result.get('step')}: {result.get('matched_kernels')} kernels matched, "
          f"{result.get('covered_gpu_time_pct')}% of its GPU time covered ({result.get('wall_s')} s under ncu)")
    from dnnprof.render.terminal import render

    render(doc, top=top)


def register(app: typer.Typer) -> None:
    app.command("counters")(counters)
