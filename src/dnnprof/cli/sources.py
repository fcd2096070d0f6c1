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


def analysed(path: Path, rank: int | None = None, kind: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The :class:`~dnnprof.analysis.summary.Analysis` of one rank of ``path`` and its summary document with the
    findings. ``rank`` None: the only rank of a single-rank input (a cluster job's rank-34 file), else rank 0.
    ``kind``: ``ingest.detect.kind_of(path)`` when the caller asked already."""
    from dnnprof.ingest.errors import TraceError
    from dnnprof.runs.report import ReportError, report_path

    try:
        return report_path(path, rank, kind)
    except (TraceError, ReportError) as e:
        raise UserError(str(e)) from None


def run_extras(path: Path) -> dict[str, Any] | None:
    """``runs.report.run_extras`` of ``path``, its errors as one line for the user."""
    from dnnprof.ingest.errors import TraceError
    from dnnprof.runs.report import ReportError
    from dnnprof.runs.report import run_extras as extras_of

    try:
        return extras_of(path)
    except (TraceError, ReportError) as e:
        raise UserError(str(e)) from None
