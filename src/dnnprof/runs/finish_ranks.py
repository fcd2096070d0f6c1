"""The end of a multi-rank run: every ``rank<N>/`` assembled onto one clock, one profile, meta.json, summary.json.

The run directory holds one sub-directory per profiled rank (what that rank's collector wrote: ``collector.json``,
``trace/``, samples) and, at its top, the merged ``profile/``, ``meta.json`` and ``summary.json`` — the summary of
one rank (the lowest profiled, or ``dnnprof analyze RUN --rank N`` later) with every rank side by side
(``summary.ranks``) and the cross-rank analysis (``summary.critical_path``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.collect.config import CollectorConfig
from dnnprof.ingest.assemble import AssembleError, load_collector
from dnnprof.ingest.assemble_ranks import assemble_ranks
from dnnprof.ingest.errors import TraceError
from dnnprof.runs.result import RunResult
from dnnprof.runs.rundir import RunDir


def _rank_messages(per: dict[str, Any], ranks: dict[int, Path]) -> list[str]:
    msgs = []
    for r in ranks:
        e = per.get(str(r)) or {}
        if e.get("error"):
            msgs.append(f"rank {r}: {e['error']}")
        elif e.get("status") not in (None, "complete", "no_steps"):
            msgs.append(f"rank {r}: collector status {e['status']}")
    return msgs


def finish_ranks(rd: RunDir, run_meta: dict[str, Any], config: CollectorConfig, ranks: dict[int, Path], *,
                 echo: Callable[[str], None]) -> RunResult:
    """Build the merged profile and summary of a multi-rank run and rename it into place (see the module doc)."""
    from dnnprof.analysis import run_metrics as metrics
    from dnnprof.runs.finish import (
        COMPLETE_STATUSES,
        RUN_FORMAT,
        _messages,
        _samples,
        close_run,
        summary_extras,
        write_summary,
    )

    staging = rd.staging
    reason = ""
    profile = None
    info: dict[str, Any] = {"ranks": {}}
    try:
        profile, info = assemble_ranks(staging)
    except (AssembleError, TraceError) as e:
        reason = str(e)
    per = info["ranks"]
    statuses = {r: (per.get(str(r)) or {}).get("status", "not_started") for r in ranks}
    bad = [s for s in statuses.values() if s not in COMPLETE_STATUSES]
    status = bad[0] if bad else next(iter(statuses.values()))
    failed = [r for r in ranks if (per.get(str(r)) or {}).get("error")]
    summary_rank = min(info.get("profiled_ranks") or list(ranks))
    col = load_collector(ranks[summary_rank]) if summary_rank in ranks else None
    messages = _messages(status, col, run_meta, per.get(str(summary_rank)) or {}) + _rank_messages(per, ranks)
    if reason:
        messages.insert(0, reason)
    complete = profile is not None and not bad and not failed
    if profile is not None and not reason and not complete:
        reason = messages[0] if messages else "a rank ended early"
    first = per.get(str(summary_rank)) or {}
    capture = {
        "mode": config.mode, "kinds": first.get("windows", []), "step_source": (col or {}).get("step_source"),
        "status": status, "plan": (col or {}).get("plan"), "windows": (col or {}).get("windows", []),
        "timed_steps": first.get("timed_steps", []), "clock": first.get("clock"),
        "attribution": first.get("attribution"), "overhead": metrics.overhead(col) if col else {},
        "ranks": {r: {k: e.get(k) for k in ("status", "dir", "timed_steps", "clock", "clock_shift_ns", "error",
                                            "edge_steps_dropped")}
                  for r, e in per.items()},
    }
    meta: dict[str, Any] = {
        "format": RUN_FORMAT, "complete": complete, "status": status, "reason": reason, **run_meta,
        "finished_unix_s": time.time(), "config": config.__dict__, "capture": capture,
        "profiled_ranks": sorted(ranks), "summary_rank": summary_rank,
        "environment": (col or {}).get("environment"), "nvml": (col or {}).get("nvml"),
        "script": (col or {}).get("script"), "messages": messages,
    }
    summary = None
    if profile is not None:
        settings = dict((col or {}).get("settings") or {})
        run_info = {k: run_meta.get(k) for k in ("name", "command", "workload", "exit_code")}
        profile.meta.update({"run": {**run_info, **settings}, "capture": capture, "complete": complete,
                             "source": {"path": str(rd.target(complete)), "format": "dnnprof-run"}})
        profile.save(staging / "profile")
        extras = summary_extras(col, _samples(ranks[summary_rank], col), complete=complete, status=status,
                                mode=config.mode)
        summary = write_summary(staging, profile, summary_rank, extras, meta, messages)
    return close_run(staging, rd, meta, complete=complete, reason=reason, status=status, run_meta=run_meta,
                     messages=messages, summary=summary)
