"""The inputs of ``dnnprof view``: each one a run, profile or trace (prepared into a cache folder) or a sweep.

The cache lives under ``$XDG_CACHE_HOME/dnnprof/view`` (``~/.cache`` without it), one folder per input named by a
hash of its resolved path and of the size and modification time of its files: nothing is written beside the
user's files, and a changed trace is ingested again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnprof.serve.prepare import CACHE_FORMAT, VIEW_FILE

SWEEP_SCHEMA = "dnnprof.sweep/1"


class InputError(ValueError):
    """An input cannot be shown (named, one line)."""


@dataclass
class Input:
    """One input as the server knows it: its label, and the cache folder (profiles) or report (sweeps)."""

    label: str
    kind: str  # "profile", "sweep" or "recording" (a dnnprof monitor --record file)
    cache: Path | None = None
    view: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] | None = None


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dnnprof" / "view"


def cache_key(path: Path, rank: int | None) -> str:
    """Hash of the resolved path, the rank asked for, and every file's relative path, size and mtime."""
    path = path.resolve()
    h = hashlib.sha256(f"{CACHE_FORMAT}\0{path}\0{rank}".encode())
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        st = f.stat()
        h.update(f"\0{f.relative_to(path.parent)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def _sweep_doc(path: Path) -> dict[str, Any] | None:
    """The sweep document of a sweep directory or a sweep.json; None for anything else."""
    f = path / "sweep.json" if path.is_dir() else path
    if not f.is_file() or f.suffix != ".json" or f.stat().st_size > 256 * 2**20:
        return None
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("schema") == SWEEP_SCHEMA):
        return None
    from dnnprof.model.sweep_doc import SweepDocError, check_sweep

    try:
        check_sweep(doc)
    except SweepDocError as e:
        raise InputError(f"{f}: not a valid {SWEEP_SCHEMA} document ({e})") from None
    return doc


def prepared(path: Path, rank: int | None = None, root: Path | None = None) -> Path:
    """The cache folder of ``path``, ingesting it first (in a child process) when it is not cached yet."""
    out = (root or cache_root()) / cache_key(path, rank)
    if (out / VIEW_FILE).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # this package's own sources win in the child
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run([sys.executable, "-m", "dnnprof.serve.prepare", str(path), str(out),
                           "" if rank is None else str(rank)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        raise InputError(lines[-1] if lines else f"{path}: cannot be prepared (exit {done.returncode})")
    return out


def recording_view(path: Path) -> dict[str, Any]:
    """A monitor recording as the GPU-counters view reads it: a series per metric (per GPU when there are several;
    empty values left out) and its mean / p90 / max."""
    import numpy as np

    from dnnprof.model.gpu_samples import METRIC_NAMES, read_samples

    cols = read_samples(path)
    gpus = sorted({int(g) for g in cols.get("gpu", [])})
    t = np.asarray(cols.get("t_s", []), dtype=float)
    g = np.asarray(cols.get("gpu", []), dtype=int)
    series: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for name in METRIC_NAMES:
        if name not in cols:
            continue
        v = np.asarray([np.nan if x is None else float(x) for x in cols[name]], dtype=float)
        for gpu in gpus:
            sel = (g == gpu) & np.isfinite(v)
            if not sel.any():
                continue
            label = name if len(gpus) == 1 else f"{name} (GPU {gpu})"
            series[label] = {"t_s": t[sel].round(3).tolist(), "value": v[sel].round(3).tolist()}
            metrics[label] = {"mean": round(float(v[sel].mean()), 3), "p90": round(float(np.percentile(v[sel], 90)), 3),
                              "max": round(float(v[sel].max()), 3)}
    return {"samples": series, "samples_summary": {"metrics": metrics, "window": "the whole recording"}}


def open_inputs(paths: list[Path], rank: int | None = None, root: Path | None = None) -> list[Input]:
    """Every input, prepared; InputError names the first that cannot be shown."""
    from dnnprof.analysis.sweep_report import sweep_report
    from dnnprof.ingest.detect import kind_of
    from dnnprof.ingest.errors import TraceError
    from dnnprof.model.gpu_samples import is_recording

    out: list[Input] = []
    for p in paths:
        if not p.exists():
            raise InputError(f"{p}: no such file or directory")
        sweep = _sweep_doc(p)
        if sweep is not None:
            out.append(Input(label=p.name or str(p), kind="sweep", sweep=sweep_report(sweep)))
            continue
        if p.is_file() and is_recording(p):
            out.append(Input(label=p.name, kind="recording", view=recording_view(p)))
            continue
        try:
            kind = kind_of(p)
        except TraceError as e:
            raise InputError(str(e)) from None
        if kind in ("ncu-csv", "ncu-rep", "nvprof-summary"):
            raise InputError(f"{p}: {kind} has no timeline to show; dnnprof view reads traces, run directories "
                             "and saved profiles (try dnnprof analyze)")
        cache = prepared(p, rank, root)
        view = json.loads((cache / VIEW_FILE).read_text())
        out.append(Input(label=p.name or str(p), kind="profile", cache=cache, view=view))
    return out
