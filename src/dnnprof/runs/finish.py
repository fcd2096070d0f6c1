"""The end of a run: collector results + raw traces → profile, meta.json, summary.json; then the atomic rename."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnprof.analysis import run_metrics as metrics
from dnnprof.analysis.summary import analyse
from dnnprof.collect.config import CONFIG_FILE, CollectorConfig, write_json_atomic
from dnnprof.ingest.assemble import AssembleError, assemble, load_collector
from dnnprof.ingest.errors import TraceError
from dnnprof.model.run_format import rank_of_subdir
from dnnprof.runs.report import summary_document, with_findings
from dnnprof.runs.result import RunResult
from dnnprof.runs.rundir import RunDir

if TYPE_CHECKING:
    from dnnprof.model.profile import Profile

RUN_FORMAT = "dnnprof.run/1"
#: Collector statuses of a complete run (given a profile could be built).
COMPLETE_STATUSES = ("complete", "no_steps")


class ChildRefused(ValueError):
    """The profiled workload refused its configuration on this machine (e.g. CUDA asked for, none present)."""
HOW_TO_MARK = ("mark iterations with --step-marker NAME (a record_function or NVTX range around each iteration) "
               "or call dnnprof.step() at the end of each iteration")


def _not_started_reason(run_meta: dict[str, Any]) -> str:
    if run_meta.get("boot_error"):
        return f"the collector failed to start in the script: {run_meta['boot_error']}"
    if not run_meta.get("owner_found"):
        return ("the command never imported torch in a Python process dnnprof could reach (is it a PyTorch "
                "program? 'python -I', '-E' or '-S' ignore the PYTHONPATH dnnprof uses)")
    return "the profiled process ended without writing its results (killed by a signal or os._exit?)"


def _messages(status: str, col: dict[str, Any] | None, run_meta: dict[str, Any], info: dict[str, Any]) -> list[str]:
    msgs: list[str] = []
    if status == "no_steps" and col is not None:
        msgs.append(f"no iterations found (no optimizer.step() call, no DataLoader batches): profiled the whole run as one window; {HOW_TO_MARK}")
    elif status == "partial" and run_meta.get("interrupted"):
        msgs.append("interrupted during the profiled window: what was collected is kept, the profile is partial")
    elif status == "partial":
        msgs.append("the script ended during the profiled window: the profile is partial")
    elif run_meta.get("interrupted"):
        msgs.append("interrupted: what was collected is kept")
    if col is not None and col.get("notes"):
        msgs += [n for n in col["notes"] if not n.startswith("NVML sampling turned off")]
    for stall in run_meta.get("exit_stalls") or []:
        who = f"rank {stall['rank']}'s process" if stall.get("rank") is not None else "the script's process"
        code = stall.get("script_exit_code")
        status = (f"the script was ending with status {code}" if code is not None else
                  "the status the script was ending with was not seen (a top-level `raise SystemExit(n)` is not)")
        tail = ("; the launcher counts that rank as failed" if stall.get("rank") is not None else
                f"; dnnprof exits with {code}" if code is not None else "")
        msgs.append(f"{who} stopped making progress for {stall['limit_s']:g} s after its exit handlers had run "
                    f"(seen with the CUDA profiler's teardown on H100s): dnnprof ended it with {stall['signal']}; what "
                    f"it wrote is kept; {status}{tail}")
    exc = (col or {}).get("script", {}).get("exception")
    if run_meta.get("exit_code"):
        tail = f" ({exc['type']}: {exc['message'].splitlines()[0] if exc['message'] else ''})" if exc else ""
        msgs.append(f"the script exited with code {run_meta['exit_code']}{tail}")
    if info.get("invalid"):
        msgs.append(info["invalid"])
    att = info.get("attribution") or {}
    pct = att.get("matched_kernels_pct")
    if pct is not None and pct < 90:
        msgs.append(f"only {pct}% of timed kernels matched the attribution step: layers/ops are partial "
                    "(the steps differ; --full records everything in one window)")
    return msgs


def summary_extras(col: dict[str, Any] | None, samples: dict[str, Any] | None, *, complete: bool, status: str,
                   mode: str | None) -> dict[str, Any]:
    """The keys a run directory's summary.json adds to ``summarize()``'s document.

    ``throughput``, ``samples``, ``memory``, ``overhead``, ``host_hotspots`` (from the collector results and the
    NVML/GPM samples), ``meta`` (run settings read in the script: ``cudnn_benchmark`` …) and ``run`` (status,
    capture mode, step source, dilation). ``dnnprof run`` writes them at the end of a run and ``dnnprof analyze
    RUN_DIR`` recomputes them from the same files (:func:`run_dir_extras`): both say the same.
    """
    col = col or {}
    out = metrics.run_extras(col, samples)
    out["meta"] = dict(col.get("settings") or {})
    out["run"] = {"complete": complete, "status": status, "mode": mode, "step_source": col.get("step_source"),
                  "dilation": out["overhead"].get("dilation")}
    return out


def run_dir_extras(run_dir: Path) -> dict[str, Any] | None:
    """:func:`summary_extras` of a run directory, from its collector results, samples and meta.json; None when it
    holds no collector results (then it is no run directory).

    Raises:
        AssembleError: the collector results are unreadable.
    """
    col = load_collector(run_dir)
    if col is None:
        return None
    meta: dict[str, Any] = {}
    top = run_dir
    if rank_of_subdir(run_dir.name) is not None and not (run_dir / "meta.json").is_file():
        top = run_dir.parent  # a rank of a multi-rank run: the run's own meta.json and settings are one level up
    if (top / "meta.json").is_file():
        try:
            meta = json.loads((top / "meta.json").read_text())
        except json.JSONDecodeError as e:
            raise AssembleError(f"{top / 'meta.json'}: unreadable ({e})") from None
    status = meta.get("status") or col.get("status", "partial")
    mode = (meta.get("config") or {}).get("mode")
    if mode is None and (top / CONFIG_FILE).is_file():
        mode = CollectorConfig.load(top).mode
    return summary_extras(col, _samples(run_dir, col), complete=bool(meta.get("complete", status in COMPLETE_STATUSES)),
                          status=status, mode=mode)


def _samples(run_dir: Path, col: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's NVML/GPM samples (the file the collector names), None when it took none."""
    name = (col or {}).get("samples_file")
    if not name or not (run_dir / name).is_file():
        return None
    try:
        return json.loads((run_dir / name).read_text())
    except json.JSONDecodeError as e:
        raise AssembleError(f"{run_dir / name}: unreadable samples ({e})") from None


def finish_run(rd: RunDir, run_meta: dict[str, Any], config: CollectorConfig, *,
               echo: Callable[[str], None]) -> RunResult:
    """Build and write everything the run directory holds, rename it into place, and describe the result.

    ``summary.json`` is :mod:`dnnprof.runs.report`'s document of rank 0: the analysis plus the run's extras
    (throughput, samples, memory, overhead, host hotspots, ``meta`` with the run's settings such as
    ``cudnn_benchmark``), then the findings, last, on that complete document, since several rules read the extras.

    Raises:
        ChildRefused: the workload refused to start (bad knob for this machine); nothing is kept.
    """
    staging = rd.staging
    if run_meta.get("child_error"):
        shutil.rmtree(staging, ignore_errors=True)
        raise ChildRefused(run_meta["child_error"])
    from dnnprof.ingest.assemble_ranks import rank_dirs

    ranks = rank_dirs(staging)
    if ranks:
        from dnnprof.runs.finish_ranks import finish_ranks

        return finish_ranks(rd, run_meta, config, ranks, echo=echo)
    reason = ""
    profile = None
    info: dict[str, Any] = {}
    try:
        col = load_collector(staging)
    except AssembleError as e:
        col, reason = None, str(e)
    if col is None:
        status = "not_started"
        reason = reason or _not_started_reason(run_meta)
    else:
        status = col.get("status", "partial")
        try:
            profile, info = assemble(staging, col)
        except (AssembleError, TraceError) as e:
            reason = str(e)
    messages = _messages(status, col, run_meta, info)
    if reason:
        messages.insert(0, reason)
    complete = profile is not None and status in COMPLETE_STATUSES
    if profile is not None and not reason and not complete:
        reason = f"{messages[0] if messages else 'the run ended early'} (collector status {status})"
    overhead = metrics.overhead(col) if col else {}
    capture = {
        "mode": config.mode,
        "kinds": info.get("windows", []),
        "step_source": (col or {}).get("step_source"),
        "status": status,
        "plan": (col or {}).get("plan"),
        "windows": (col or {}).get("windows", []),
        "timed_steps": info.get("timed_steps", []),
        "edge_steps_dropped": info.get("edge_steps_dropped", []),
        "clock": info.get("clock"),
        "attribution": info.get("attribution"),
        "samples": info.get("samples", 0),
        "overhead": overhead,
    }
    meta: dict[str, Any] = {
        "format": RUN_FORMAT,
        "complete": complete,
        "status": status,
        "reason": reason,
        **run_meta,
        "finished_unix_s": time.time(),
        "config": config.__dict__,
        "capture": capture,
        "environment": (col or {}).get("environment"),
        "nvml": (col or {}).get("nvml"),
        "script": (col or {}).get("script"),
        "messages": messages,
    }
    summary = None
    settings = dict((col or {}).get("settings") or {})
    if profile is not None:
        run_info = {k: run_meta.get(k) for k in ("name", "command", "workload", "exit_code")}
        profile.meta.update({"run": {**run_info, **settings},  # rules read run settings from here too
                             "capture": capture, "complete": complete,
                             "source": {"path": str(rd.target(complete)), "format": "dnnprof-run"}})
        if config.counters and complete:
            from dnnprof.analysis.counters_join import join_counters
            from dnnprof.runs.counters_pass import counters_pass
            from dnnprof.runs.session import child_env

            echo("--counters: running the command again under Nsight Compute for one step")
            capture["counters"] = counters_pass(staging, list(run_meta["command"]), config, profile,
                                                capture["timed_steps"], child_env, join_counters,
                                                say=lambda m: echo(f"--counters: {m}"))
            if capture["counters"]["status"] != "ok":
                messages.append(f"counters: {capture['counters']['message']}")
        profile.save(staging / "profile")
        extras = summary_extras(col, _samples(staging, col), complete=complete, status=status, mode=config.mode)
        summary = write_summary(staging, profile, 0, extras, meta, messages)
    return close_run(staging, rd, meta, complete=complete, reason=reason, status=status, run_meta=run_meta,
                     messages=messages, summary=summary)


def write_summary(staging: Path, profile: Profile, rank: int, extras: dict[str, Any], meta: dict[str, Any],
                  messages: list[str]) -> dict[str, Any]:
    """summary.json of a finished run (the one report writer's pieces); an analysis or a rule that trips is said
    in ``meta``/``messages`` and leaves what came before it, never the run."""
    summary = dict(extras)
    analysis = None
    try:
        analysis = analyse(profile, rank=rank)
        summary = summary_document(analysis, extras)
    except Exception as e:  # noqa: BLE001 - the capture is valid even when the analysis trips; say so
        meta["summary_error"] = f"{type(e).__name__}: {e}"
        messages.append(f"summary failed ({type(e).__name__}: {e}); the profile itself is fine")
    if analysis is not None and "summary_error" not in meta:
        try:
            summary = with_findings(analysis, summary)
        except Exception as e:  # noqa: BLE001 - a rule that trips must not lose the run; say so
            meta["findings_error"] = f"{type(e).__name__}: {e}"
            messages.append(f"findings failed ({type(e).__name__}: {e}); the summary itself is fine")
    write_json_atomic(staging / "summary.json", summary)
    return summary


def close_run(staging: Path, rd: Any, meta: dict[str, Any], *, complete: bool, reason: str | None, status: str,
              run_meta: dict[str, Any], messages: list[str], summary: dict[str, Any] | None) -> RunResult:
    """meta.json with the list of the run's files, the staging directory moved into place, the result."""
    meta["files"] = sorted(p.name if p.is_file() else p.name + "/" for p in staging.iterdir())
    write_json_atomic(staging / "meta.json", meta)
    final = rd.finish(complete, reason)
    return RunResult(run_dir=final, complete=complete, status=status, exit_code=int(run_meta.get("exit_code", 0)),
                     interrupted=bool(run_meta.get("interrupted")), messages=messages, summary=summary, meta=meta)
