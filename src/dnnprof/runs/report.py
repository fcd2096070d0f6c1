"""The one writer of every summary document (``dnnprof.summary/1``): ``run``, ``profile``, ``analyze``, ``diff`` and
``counters`` build theirs here, so the same input gives the same document whichever command produced it.

A summary is the analysis of one rank of a profile (:func:`dnnprof.analysis.summary.summary_of`), plus, for a run
directory, what the run measured outside the trace (throughput, NVML/GPM samples, memory, the capture's cost, host
hotspots, the run's settings: :func:`dnnprof.runs.finish.summary_extras`), then the findings and the self-checks,
computed last since rules read those extras.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnprof.ingest.detect import kind_of, open_profile
from dnnprof.model.mapped_columns import release_pages

if TYPE_CHECKING:
    from dnnprof.analysis.checks import Check
    from dnnprof.analysis.rules.context import Context
    from dnnprof.analysis.summary import Analysis
    from dnnprof.model.profile import Profile


class ReportError(ValueError):
    """The input holds no such rank, or its run directory cannot be read back."""


def default_rank(ranks: list[int]) -> int:
    """The rank to report on when none is named: the only one there is (a cluster job's rank-34 file), else 0."""
    return int(ranks[0]) if len(ranks) == 1 else 0


def summary_document(analysis: Analysis, extras: dict[str, Any] | None = None,
                     across_ranks: dict[str, Any] | None = None,
                     made_checks: Callable[[], dict[str, Check]] | None = None) -> dict[str, Any]:
    """The summary without its findings: the analysis, and a run's extras on top. ``across_ranks``,
    ``made_checks``: see :func:`dnnprof.analysis.summary.summary_of`."""
    from dnnprof.analysis.summary import summary_of

    doc = summary_of(analysis, across_ranks, made_checks)
    doc.update(extras or {})
    return doc


def with_findings(analysis: Analysis, doc: dict[str, Any], prepared: Context | None = None) -> dict[str, Any]:
    """``doc`` with its findings (and the checks on them), computed on the complete document (``prepared``: the
    rules' context made beside it, :func:`dnnprof.analysis.rules.prepare`)."""
    from dnnprof.analysis.rules import findings_from_analysis

    doc["findings"] = findings_from_analysis(analysis, doc) if prepared is None else \
        findings_from_analysis(analysis, doc, prepared)
    return doc


def report(profile: Profile, rank: int | None = None, extras: dict[str, Any] | None = None,
           across_ranks: Callable[[Analysis], dict[str, Any]] | None = None) -> tuple[Analysis, dict[str, Any]]:
    """The analysis of one rank of ``profile`` and its complete summary document. ``across_ranks``: when
    ``profile`` holds one rank of several, what the summary says across them (``ranks``, ``critical_path``) from
    that rank's analysis and what the other ranks' workers returned (``runs.rank_folder``)."""
    rank = default_rank(profile.ranks) if rank is None else rank
    if rank not in profile.ranks:
        raise ReportError(f"no rank {rank} (ranks in the trace: {profile.ranks})")
    from dnnprof.analysis.beside import Beside  # after the read: the analysis's imports are not start-up's
    from dnnprof.analysis.summary import analyse, side_by_side

    analysis = analyse(profile, rank=rank)
    across = None if across_ranks is None else across_ranks(analysis)
    if not side_by_side(profile):  # a huge trace: one part after the other, so that their memory does not add up
        doc = summary_document(analysis, extras, across)
        release_pages()  # a big trace's mapped columns read by the summary (see analyse)
        doc = with_findings(analysis, doc)
    else:  # meanwhile, another thread makes the checks that need no summary, then the rules' idle-gap timeline
        with Beside(_before_the_summary, analysis) as ready:
            doc = summary_document(analysis, extras, across, lambda: ready()[0])
            doc = with_findings(analysis, doc, ready()[1])
    release_pages()
    return analysis, doc


def _before_the_summary(analysis: Analysis) -> tuple[dict[str, Check], Context]:
    from dnnprof.analysis.checks import analysis_checks
    from dnnprof.analysis.rules import prepare

    return analysis_checks(analysis), prepare(analysis)


def run_extras(path: Path, rank: int | None = None, kind: str | None = None) -> dict[str, Any] | None:
    """What a run directory's summary.json adds to the analysis (throughput, samples, memory, overhead, host
    hotspots, run settings), rebuilt from its files as ``dnnprof run`` built it; None for any other input. In a
    multi-rank run they come from ``rank<N>/`` of ``rank`` (default: the lowest profiled rank).
    ``kind``: :func:`~dnnprof.ingest.detect.kind_of` of ``path`` when the caller knows it already.

    Raises:
        dnnprof.ingest.errors.TraceError: one of the run's files is damaged (named, one line).
        ReportError: the run's collector results cannot be read back.
    """
    from dnnprof.ingest.assemble import AssembleError
    from dnnprof.ingest.assemble_ranks import rank_dirs
    from dnnprof.ingest.run_files import check_run_dir
    from dnnprof.runs.finish import run_dir_extras

    if (kind_of(path) if kind is None else kind) not in ("run", "run-raw"):
        return None
    ranks = rank_dirs(path)
    if ranks:
        path = ranks.get(default_rank(list(ranks)) if rank is None else rank, ranks[min(ranks)])
    check_run_dir(path)  # the files the run's extras come from, type-checked: a damaged one is one line
    try:
        return run_dir_extras(path)
    except AssembleError as e:
        raise ReportError(f"{path}: {e}") from None


def report_path(path: Path, rank: int | None = None, kind: str | None = None) -> tuple[Analysis, dict[str, Any]]:
    """:func:`report` of anything ``analyze`` reads; a run directory adds what the run measured beside its trace.
    ``kind``: :func:`~dnnprof.ingest.detect.kind_of` of ``path`` when the caller knows it already (else asked once).

    Raises:
        dnnprof.ingest.errors.TraceError: the input cannot be read.
        ReportError: no such rank, or the run directory's own files cannot be read.
    """
    kind = kind_of(path) if kind is None else kind
    profile = open_profile(path, kind)
    extras = run_extras(path, rank if rank is not None else default_rank(profile.ranks), kind)
    try:
        return report(profile, rank, extras)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None
