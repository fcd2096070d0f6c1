"""A whole benchmark: every backend at every batch size, each checked against eager, as raw JSON-ready data."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from dnnprof.bench.backends import unavailable
from dnnprof.bench.backends_onnx import OnnxFiles
from dnnprof.bench.sources import Source
from dnnprof.bench.trial import Settings, Trial, reference_outputs, run_trial
from dnnprof.collect.environment import cpu_name

#: Progress callback: (label of the trial now running, trials finished including the current one's fraction).
Progress = Callable[[str, float], None]


def run_bench(source: Source, backends: list[str], batch_sizes: list[int], settings: Settings,
              progress: Progress | None = None) -> dict[str, Any]:
    """Run every (batch size, backend) trial; returns ``{"source", "device", "settings", "trials": [...]}``.

    Trials whose backend cannot run here are ``skipped`` with the reason; eager's outputs at each batch size are
    the reference for the others (for an ONNX file, the first backend that ran).
    """
    report = progress or (lambda label, done: None)
    onnx = OnnxFiles(source)
    trials: list[dict[str, Any]] = []
    n = len(backends) * len(batch_sizes)
    try:
        for bi, b in enumerate(batch_sizes):
            reference, ref_backend, ref_error = None, None, ""
            if source.model is not None:
                report(f"eager reference outputs, batch {b}", float(bi * len(backends)))
                try:
                    reference, ref_backend = reference_outputs(source, b), "eager"
                except Exception as e:  # noqa: BLE001 - the model itself fails: every trial says so below
                    ref_error = f"the eager reference failed: {type(e).__name__}: {str(e).strip()[:200]}"
            for ki, name in enumerate(backends):
                k = bi * len(backends) + ki
                label = f"{name} batch {b}"
                report(label, float(k))
                why = unavailable(name, source)
                if why or ref_error:
                    t = Trial(backend=name, batch_size=b, status="skipped" if why else "error",
                              reason=why or ref_error)
                    out = None
                else:
                    t, out = run_trial(source, name, b, settings, onnx, reference, progress=_within(report, label, k))
                if reference is None and t.status == "ok" and out is not None:
                    reference, ref_backend = out, name
                trials.append({**dataclasses.asdict(t), "reference_backend": ref_backend
                               if t.status in ("ok", "wrong") and ref_backend != name else None})
                report(label, float(k + 1))
    finally:
        onnx.close()
    return {"source": {"name": source.name, "kind": source.kind, "precision": source.precision,
                       "tokens_per_sample": source.tokens_per_sample},
            "device": device_info(source.device), "settings": dataclasses.asdict(settings),
            "batch_sizes": list(batch_sizes), "backends": list(backends), "trials": trials, "of": n}


def _within(report: Progress, label: str, k: int) -> Callable[[float], None]:
    """Progress inside trial ``k``: its fraction done added to the trials before it."""
    def at(fraction: float) -> None:
        report(label, k + min(fraction, 1.0))

    return at


def device_info(device: str) -> dict[str, Any]:
    """Where the benchmark ran: device name, torch and backend library versions."""
    import importlib.metadata as md

    import torch

    versions = {"torch": str(torch.__version__), "python": sys.version.split()[0]}
    for pkg in ("onnxruntime", "onnxruntime-gpu", "openvino", "tensorrt", "onnx"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    if device == "cuda":
        name = torch.cuda.get_device_name()
        cap = ".".join(map(str, torch.cuda.get_device_capability()))
        return {"type": "cuda", "name": name, "compute_capability": cap, "versions": versions}
    return {"type": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(), "versions": versions}
