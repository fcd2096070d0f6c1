"""``--counters``: a second run of the same command under Nsight Compute, for the counters of one steady step.

Counters cannot be read while the profiler's CUPTI session runs, and ncu replays every kernel it profiles, so they
come from a separate, short run: the collector (mode ``counters``: no profiler, no sampler) wraps step ``K`` — the
middle step of the timed window of the first run — in an NVTX push/pop range ``dnnprof.counters`` and ends the
process after it. The ncu driver (``collect.ncu``) chooses the kernels that cover most of that step's GPU time
from the first run's launches, runs ncu with the matching filters, and the CSV is joined onto the profile's kernels
by the caller's ``join`` (the analysis layer owns the matching).

The collector's bootstrap reaches the profiled process through ``env`` on the target's command line, not through
ncu's own environment. With the bootstrap on ncu's ``PYTHONPATH`` the profiled process never started its collector
(no ``owner.pid``, no NVTX range, "No kernels were profiled"; Nsight Compute 2025.3.1 on an H100) — most likely
because ncu embeds a Python interpreter that ran the bootstrap first and marked ncu as the owner of the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.collect.config import CONFIG_FILE, ENV_OWNER, RESULT_FILE, CollectorConfig
from dnnprof.model.run_format import COUNTERS_RANGE as COUNTERS_RANGE

COUNTERS_DIR = "counters"
#: ncu replays kernels many times; a generous limit for one step of a large model.
TIMEOUT_S = 900.0
#: Files a previous counters pass leaves behind that would stop or confuse the next one (the first process to
#: create ``owner.pid`` owns the run).
STALE_FILES = ("owner.pid", RESULT_FILE, "finalizing", "boot_error.txt", "workload_error.txt", "ncu.csv")


def target_command(command: list[str], child_env: dict[str, str], base_env: dict[str, str]) -> list[str]:
    """``command`` prefixed with ``env -u DNNPROF_OWNER_PID NAME=VALUE…`` for every variable the collector adds
    (``PYTHONPATH`` with the bootstrap, the run directory …), so only the profiled process sees them."""
    env_exe = shutil.which("env") or "/usr/bin/env"
    changed = [f"{k}={v}" for k, v in sorted(child_env.items()) if base_env.get(k) != v]
    return [env_exe, "-u", ENV_OWNER, *changed, *command]


def ncu_environment(base_env: dict[str, str]) -> dict[str, str]:
    """ncu's own environment: the caller's, without any dnnprof run variables."""
    return {k: v for k, v in base_env.items() if not k.startswith("DNNPROF_") or k == "DNNPROF_NCU"}


def counters_pass(run_dir: Path, command: list[str], config: CollectorConfig, profile: Any, timed_steps: list[int],
                  env_for: Callable[[Path], dict[str, str]],
                  join: Callable[[Any, Any], Any] | None,
                  say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the command under ncu for one timed step and join the counters into ``profile``; never raises.
    ``say`` gets one line on what ncu is about to profile, before it starts."""
    from dnnprof.collect.ncu import LaunchSequence, collect_counters, plan_message

    if not timed_steps:
        return {"status": "skipped", "message": "no timed steps to take counters for"}
    step = int(timed_steps[len(timed_steps) // 2])
    seq = LaunchSequence.from_profile(profile, step=step)
    if not len(seq):
        return {"status": "skipped", "message": f"step {step} launched no kernels (no GPU work to count)"}
    sub = run_dir / COUNTERS_DIR
    sub.mkdir(exist_ok=True)
    for name in STALE_FILES:
        (sub / name).unlink(missing_ok=True)
    cfg = dataclasses.replace(config, mode="counters", counters_step=step, nvml=False, host_sampling=False,
                              stop_after_profile=True, counters=False)
    (sub / CONFIG_FILE).write_text(cfg.to_json())
    dev = profile.devices[0] if profile.devices else None
    cc = dev.compute_capability if dev is not None and dev.compute_capability else None
    base = dict(os.environ)
    target = target_command(command, env_for(sub), base)
    result, plan = collect_counters(target, seq, sub / "ncu.csv", nvtx_range=COUNTERS_RANGE, compute_capability=cc,
                                    env=ncu_environment(base), timeout_s=TIMEOUT_S,
                                    on_plan=None if say is None else (lambda pl: say(f"step {step}: {plan_message(pl)}")))
    (sub / "ncu_command.json").write_text(json.dumps(result.command))
    out: dict[str, Any] = {"status": result.status, "message": result.message, "step": step,
                           "log": f"{COUNTERS_DIR}/ncu.csv", "wall_s": round(result.wall_s, 2)}
    if plan is not None:
        out["plan"] = {"strategy": plan.strategy, "filter_mode": plan.mode, "kernels": plan.kernels,
                       "predicted_launches": len(plan.profiled),
                       "predicted_coverage_pct": round(100.0 * plan.predicted_coverage, 2)}
    if result.ok:
        out["profiled_launches"] = len(result.table) if result.table is not None else 0
    elif result.status == "no-kernels":
        out["message"] += _why_nothing(sub, step)
    if result.ok and result.table is not None and join is not None:
        j = join(profile, result.table)
        covered = getattr(j, "covered_ns", None)
        total = getattr(j, "total_ns", None)
        out["matched_kernels"] = getattr(j, "matched_kernels", None)
        out["covered_gpu_time_pct"] = round(100.0 * covered / total, 2) if covered is not None and total else None
    return out


def _why_nothing(sub: Path, step: int) -> str:
    """What the profiled process's collector left behind, as a hint after "no kernels were profiled"."""
    if not (sub / "owner.pid").exists():
        return ("; the collector did not start in the profiled process under ncu (no owner.pid in "
                f"{sub}), so step {step} was never marked")
    try:
        col = json.loads((sub / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return ""
    done = col.get("steps_completed")
    if isinstance(done, int) and done <= step:
        return f"; the command ended after {done} steps, before step {step} was over"
    return ""
