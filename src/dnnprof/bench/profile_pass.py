"""``dnnprof bench --profile``: one extra pass per backend under dnnprof's profiler, in its own run directory."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.collect.config import CollectorConfig
from dnnprof.runs.rundir import RUNS_ROOT, safe_name

#: Queries in the profiled window and unprofiled ones before it.
PROFILE_STEPS = 10
PROFILE_WARMUP_STEPS = 5


def profile_backend(spec: dict[str, Any], backend: str, batch_size: int, *, root: Path = RUNS_ROOT,
                    echo: Callable[[str], None] | None = None) -> Any:
    """Profile ``backend`` at ``batch_size`` in a child process; returns the ``RunResult`` (run directory)."""
    from dnnprof.runs.session import run_command

    config = CollectorConfig(warmup_steps=PROFILE_WARMUP_STEPS, steps=PROFILE_STEPS, step_marker=None)
    config.warmup_until_steady = True
    config.validate()
    command = [sys.executable, "-m", "dnnprof.bench.profile_main", "--spec", json.dumps(spec), "--backend", backend,
               "--batch-size", str(batch_size)]
    name = safe_name(f"bench-{Path(str(spec.get('name') or spec.get('path'))).stem}-{backend}-b{batch_size}")
    return run_command(command, config, name=name, root=root, echo=echo)
