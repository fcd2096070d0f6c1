"""``dnnprof analyze summary.csv``: an nvprof ``--csv --print-summary`` file on its own (no timeline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnprof.cli.errors import UserError

SCHEMA = "dnnprof.nvprof-summary/1"


def _kind(name: str) -> str:
    return "memcpy" if name.startswith("[CUDA memcpy") else "memset" if name.startswith("[CUDA memset") else "kernel"


def nvprof_summary_doc(path: Path) -> dict[str, Any]:
    """The ``dnnprof.nvprof-summary/1`` document: GPU activities (with kernel family and tensor-core use) and API
    calls, in the file's order (nvprof's: longest first), times in µs."""
    from dnnprof.analysis.kernel_names import family, short_name, uses_tensor_cores
    from dnnprof.ingest.errors import TraceError
    from dnnprof.ingest.nvprof_summary import read_nvprof_summary

    try:
        s = read_nvprof_summary(path)
    except TraceError as e:
        raise UserError(str(e)) from None

    def nums(r: Any) -> dict[str, Any]:
        return {"time_pct": round(r.time_pct, 3), "total_us": round(r.total_us, 3), "calls": r.calls,
                "avg_us": round(r.avg_us, 3), "min_us": round(r.min_us, 3), "max_us": round(r.max_us, 3)}

    gpu = []
    for r in s.gpu_activities:
        kind = _kind(r.name)
        gpu.append({"name": r.name, "short_name": short_name(r.name) if kind == "kernel" else r.name,
                    "family": family(r.name) if kind == "kernel" else kind,
                    "tensor_core": uses_tensor_cores(r.name) if kind == "kernel" else False, "kind": kind,
                    **nums(r)})
    api = [{"name": r.name, **nums(r)} for r in s.api_calls]
    return {"schema": SCHEMA, "source": {"path": str(path), "format": "nvprof-summary"},
            "gpu_activities": gpu, "api_calls": api}


def report_nvprof_summary(path: Path, json_out: Path | None, top: int, quiet: bool) -> None:
    """Print (and optionally write as JSON) the nvprof-style summary of an nvprof ``--print-summary`` CSV."""
    from dnnprof.model.outputs import OutputError

    doc = nvprof_summary_doc(path)
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        try:
            write_json(doc, json_out)
        except OutputError as e:
            raise UserError(str(e)) from None
    if not quiet and str(json_out) != "-":
        from dnnprof.render.nvprof_summary_table import render_nvprof_summary

        render_nvprof_summary(doc, top=top)
