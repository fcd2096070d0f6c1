"""``dnnprof sweep``: batch size to the limit, precisions and modes, every point in its own process.

Public API::

    from dnnprof.runs.sweep import SweepSpec, run_sweep, workload_target, parse_batch_sizes
    doc = run_sweep(SweepSpec(target=workload_target("deepspeech2-tiny"), out=Path("sw"), device="cpu",
                              batches=parse_batch_sizes("auto"), modes=("train", "infer")))

The sweep directory holds ``sweep.json`` (``dnnprof.sweep/1``), ``trials.jsonl`` and one folder per trial.
"""

from __future__ import annotations

from dnnprof.runs.sweep.runner import Sweep, run_sweep
from dnnprof.runs.sweep.search import BatchSearch, Observation
from dnnprof.runs.sweep.spec import (
    BatchPlan,
    MemoryLimit,
    SweepSpec,
    SweepSpecError,
    Target,
    default_device,
    parse_batch_sizes,
    parse_choices,
    parse_profile_points,
    parse_size,
    script_target,
    trial_bound,
    workload_target,
)
from dnnprof.runs.sweep.store import SCHEMA

__all__ = [
    "SCHEMA",
    "BatchPlan",
    "BatchSearch",
    "MemoryLimit",
    "Observation",
    "Sweep",
    "SweepSpec",
    "SweepSpecError",
    "Target",
    "default_device",
    "parse_batch_sizes",
    "parse_choices",
    "parse_profile_points",
    "parse_size",
    "run_sweep",
    "script_target",
    "trial_bound",
    "workload_target",
]
