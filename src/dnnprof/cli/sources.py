"""What ``analyze`` and ``diff`` accept, opened as a profile (``ingest.detect.open_profile``: traces, folders of
ranks, saved profiles, run directories, assembled on the spot when their run ended early) and reported through
``runs.report``, the one writer of summary documents; errors become one line for the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnprof.cli.errors import UserError


def open_source(path: Path) -> Any:
    """The :class:`~dnnprof.model.profile.Profile` of ``path``; a :class:`UserError` naming the problem otherwise."""
    from dnnprof.ingest.detect import open_profile
    from dnnprof.ingest.errors import TraceError

    try:
        return open_profile(path)
    except TraceError as e:
        raise UserError(str(e)) from None


def analysed(path: Path, rank: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The :class:`~dnnprof.analysis.summary.Analysis` of one rank of ``path`` and its summary document with the
    findings. ``rank`` None: the only rank of a single-rank input (a cluster job's rank-34 file), else rank 0."""
    from dnnprof.ingest.errors import TraceError
    from dnnprof.runs.report import ReportError, report_path

    try:
        return report_path(path, rank)
    except (TraceError, ReportError) as e:
        raise UserError(str(e)) from None


def run_extras(path: Path) -> dict[str, Any] | None:
    """What a run directory's summary.json adds to the profile's summary (throughput, samples, memory, overhead,
    host hotspots, run settings), rebuilt from its files as ``dnnprof run`` built it; None for anything else."""
    from dnnprof.ingest.assemble import AssembleError
    from dnnprof.ingest.detect import kind_of
    from dnnprof.ingest.errors import TraceError
    from dnnprof.ingest.run_files import check_run_dir
    from dnnprof.runs.finish import run_dir_extras

    if kind_of(path) not in ("run", "run-raw"):
        return None
    try:
        check_run_dir(path)
        return run_dir_extras(path)
    except AssembleError as e:
        raise UserError(f"{path}: {e}") from None
    except TraceError as e:
        raise UserError(str(e)) from None

