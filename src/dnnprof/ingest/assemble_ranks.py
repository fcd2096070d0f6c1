"""A multi-rank run directory (``rank0/``, ``rank1/`` … each with its collector results and traces) → one Profile.

Each rank is assembled on its own exactly as a one-process run is (``assemble``), then its rows are labelled with
its rank and the ranks are put on one timeline: each rank's clock probe gives the offset between its trace clock
and the wall clock (``time.time_ns``) at the moment the probe ran; subtracting it from the rank's
``base_time_ns`` moves the rank onto the wall clock, which all ranks of one host share (across hosts, to within
their NTP error). :func:`dnnprof.ingest.ranks.merge_ranks` then concatenates the ranks on that clock.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.ingest.assemble import AssembleError, assemble, load_collector
from dnnprof.ingest.ranks import merge_ranks
from dnnprof.model.profile import Profile
from dnnprof.model.run_format import RESULT_FILE, rank_of_subdir


def rank_dirs(run_dir: Path) -> dict[int, Path]:
    """``{rank: run_dir/rank<N>}`` for every rank sub-directory holding collector results (empty for a run of one
    process)."""
    if not run_dir.is_dir():
        return {}
    out = {}
    for p in run_dir.iterdir():
        r = rank_of_subdir(p.name)
        if r is not None and p.is_dir() and (p / RESULT_FILE).is_file():
            out[r] = p
    return dict(sorted(out.items()))


def label_rank(profile: Profile, rank: int) -> None:
    """Mark every row and device of a one-rank profile as rank ``rank``."""
    for t in profile.tables.values():
        if "rank" in t:
            t["rank"][:] = rank
    profile.devices = [replace(d, rank=rank) for d in profile.devices]
    profile.meta["ranks"] = [rank]


def assemble_ranks(run_dir: Path) -> tuple[Profile, dict[str, Any]]:
    """The profile of every rank of a multi-rank run, on one clock, and how each rank was put together.

    Returns ``(profile, info)``: ``info["ranks"]`` maps each rank (as a string) to what :func:`assemble` said of it
    plus its ``status``; ``info["clock_shift_ns"]`` what each rank's timeline was moved by. A rank whose traces
    cannot be assembled is reported in ``info["ranks"][r]["error"]`` and left out.

    Raises:
        AssembleError: no rank could be assembled.
    """
    per: dict[str, Any] = {}
    profiles = []
    errors = []
    for rank, d in rank_dirs(run_dir).items():
        col = load_collector(d)
        entry: dict[str, Any] = {"status": (col or {}).get("status", "not_started"), "dir": d.name}
        try:
            p, info = assemble(d, col or {}, rank=0)
        except (AssembleError, ValueError) as e:  # TraceError is a ValueError: one bad rank must not hide the rest
            entry["error"] = str(e)
            errors.append(f"rank {rank}: {e}")
            per[str(rank)] = entry
            continue
        label_rank(p, rank)
        offset = int((info.get("clock") or {}).get("offset_ns", 0))
        # trace time = wall time + offset: take the offset off the base and the rank's times read as wall clock
        p.meta["base_time_ns"] = int(p.meta.get("base_time_ns", 0)) - offset
        entry.update(info)
        entry["clock_shift_ns"] = -offset
        per[str(rank)] = entry
        profiles.append(p)
    if not profiles:
        raise AssembleError("no rank's traces could be assembled: " + ("; ".join(errors) or "no rank sub-directories"))
    merged = merge_ranks(profiles, source=run_dir)
    for name in ("steps",):
        t = merged.tables[name]
        order = np.lexsort((t["start_ns"], t["rank"]))
        for c in t:
            t[c] = t[c][order]
    return merged, {"ranks": per, "profiled_ranks": [p.meta["ranks"][0] for p in profiles]}
