"""What the parent tells the collector inside the profiled process (written as JSON in the run directory)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnprof.model.run_format import RESULT_FILE as RESULT_FILE  # the collector writes it

MODES = ("default", "full", "counters")
CONFIG_FILE = "collector_config.json"
SAMPLES_FILE = "samples.json"
#: Environment variables that connect the profiled process to its run.
ENV_RUN_DIR = "DNNPROF_RUN_DIR"
ENV_OWNER = "DNNPROF_OWNER_PID"
ENV_PKG_ROOT = "DNNPROF_PKG_ROOT"
#: The one bootstrap directory (holds only ``sitecustomize.py``): put first on a child's PYTHONPATH by ``dnnprof
#: run`` and ``dnnprof sweep``; it starts the installers whose variables are set (see its ``INSTALLERS``).
BOOT_DIR = Path(__file__).resolve().parent / "_boot"


def with_boot(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the bootstrap first on PYTHONPATH (once) and the package root it falls back to (changed in place)."""
    old = env.get("PYTHONPATH")
    parts = [p for p in old.split(os.pathsep) if p != str(BOOT_DIR)] if old else []
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), *parts])
    env[ENV_PKG_ROOT] = str(Path(__file__).resolve().parents[2])  # the folder that holds the dnnprof package
    return env


@dataclass
class CollectorConfig:
    """Capture settings.

    Attributes:
        mode: ``default`` (timing window + attribution window, low overhead) or ``full``.
        warmup_steps: unprofiled steps first (at least 2).
        steps: steps in the timing (or full) window.
        attribution_steps: steps in the attribution window (default mode with CUDA).
        baseline_after_steps: unprofiled steps timed after the windows.
        step_marker: name of a record_function/NVTX range that ends each iteration.
        stop_after_profile: end the process once the collector is done.
        nvml: sample NVML/GPM in the background.
        nvml_period_s: NVML sampling period.
        host_sampling: sample the main thread's Python stack during the timed window.
        host_period_s: stack sampling period.
        counters: hardware counters were requested (Nsight Compute, run separately).
        counters_step: in ``counters`` mode (the ncu pass), the step wrapped in the NVTX range ncu filters on.
        workload: the workload name and config when run by ``dnnprof profile``.
        warmup_until_steady: keep warming up past ``warmup_steps`` until step times settle
            (``schedule.warm``); set for built-in workloads, whose loop runs as long as the collector needs.
        explicit_steps: only ``dnnprof.step()`` calls end steps (optimizer steps and DataLoader batches are not
            boundaries): set by adapters that mark every iteration themselves (a Hugging Face Trainer with
            gradient accumulation fetches several batches per step, and they would start the window first).
    """

    mode: str = "default"
    warmup_steps: int = 5
    steps: int = 10
    attribution_steps: int = 2
    baseline_after_steps: int = 3
    step_marker: str | None = None
    stop_after_profile: bool = False
    nvml: bool = True
    nvml_period_s: float = 0.05
    host_sampling: bool = True
    host_period_s: float = 0.01
    counters: bool = False
    counters_step: int | None = None
    workload: dict[str, Any] | None = field(default=None)
    warmup_until_steady: bool = False
    explicit_steps: bool = False

    def validate(self) -> CollectorConfig:
        """Raise ``ValueError`` naming the bad setting and what is allowed."""
        if self.mode not in MODES:
            raise ValueError(f"unknown capture mode {self.mode!r}; modes: {', '.join(MODES)}")
        if self.warmup_steps < 2:
            raise ValueError("--warmup-steps must be at least 2 (step 0 has no start boundary, and one step must "
                             "separate profiler sessions)")
        if self.steps < 1:
            raise ValueError("--steps must be at least 1")
        if self.attribution_steps < 1:
            raise ValueError("attribution steps must be at least 1")
        if self.baseline_after_steps < 0:
            raise ValueError("baseline steps cannot be negative")
        if not 0.005 <= self.nvml_period_s <= 1.0:
            raise ValueError(f"NVML period {self.nvml_period_s} s is outside 0.005–1 s")
        if self.step_marker is not None and not self.step_marker.strip():
            raise ValueError("--step-marker needs a non-empty range name")
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CollectorConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def load(cls, run_dir: Path) -> CollectorConfig:
        return cls.from_dict(json.loads((run_dir / CONFIG_FILE).read_text()))


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON so that a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)
