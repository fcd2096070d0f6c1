"""What ``analyze`` and ``diff`` accept, opened as a profile: everything ``ingest.detect.open_profile`` reads, and
a run directory whose profile was never assembled (its process ended before ``dnnprof run`` finished), assembled
from its collector results and traces on the spot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnprof.cli.errors import UserError


def open_source(path: Path) -> Any:
    """The :class:`~dnnprof.model.profile.Profile` of ``path``; a :class:`UserError` naming the problem otherwise."""
    from dnnprof.ingest.detect import kind_of, open_profile
    from dnnprof.ingest.errors import TraceError

    try:
        if kind_of(path) == "run-raw":
            return _assemble(path)
        return open_profile(path)
    except TraceError as e:
        raise UserError(str(e)) from None


def analysed(path: Path, rank: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The :class:`~dnnprof.analysis.summary.Analysis` of one rank of ``path`` and its summary document with the
    findings. ``rank`` None: the only rank of a single-rank input (a cluster job's rank-34 file), else rank 0."""
    from dnnprof.analysis.rules import findings_from_analysis
    from dnnprof.analysis.summary import analyse, summary_of

    profile = open_source(path)
    rank = default_rank(profile.ranks) if rank is None else rank
    if rank not in profile.ranks:
        raise UserError(f"{path}: no rank {rank} (ranks in the trace: {profile.ranks})")
    analysis = analyse(profile, rank=rank)
    doc = summary_of(analysis)
    doc.update(run_extras(path) or {})  # a run directory: what the run's own summary.json holds besides
    doc["findings"] = findings_from_analysis(analysis, doc)  # last: rules read the run's extras (memory, …)
    return analysis, doc


def run_extras(path: Path) -> dict[str, Any] | None:
    """What a run directory's summary.json adds to the profile's summary (throughput, samples, memory, overhead,
    host hotspots, run settings), rebuilt from its files as ``dnnprof run`` built it; None for anything else."""
    from dnnprof.ingest.assemble import AssembleError
    from dnnprof.ingest.detect import kind_of
    from dnnprof.runs.finish import run_dir_extras

    if kind_of(path) not in ("run", "run-raw"):
        return None
    try:
        return run_dir_extras(path)
    except AssembleError as e:
        raise UserError(f"{path}: {e}") from None


def default_rank(ranks: list[int]) -> int:
    """The rank to report on when the user named none: the only one there is, else 0."""
    return int(ranks[0]) if len(ranks) == 1 else 0


def _assemble(run_dir: Path) -> Any:
    from dnnprof.ingest.assemble import AssembleError, assemble, load_collector

    try:
        col = load_collector(run_dir)
        if col is None:
            raise UserError(f"{run_dir}: no collector results")
        profile, _ = assemble(run_dir, col)
    except AssembleError as e:
        raise UserError(f"{run_dir}: {e}") from None
    profile.meta.setdefault("source", {})["notes"] = [
        *profile.meta["source"].get("notes", []),
        "assembled from the run's traces here: its profile/ was never written (the run ended early?)"]
    return profile
