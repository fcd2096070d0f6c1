"""``dnnprof.load(path)``: anything ``dnnprof analyze`` reads, as pandas tables, the summary and its findings.

A thin view over the canonical profile (``ingest.detect.open_profile``) and its report (``runs.report``, the one
writer of summary documents), so ``load(p).summary()`` is the document ``dnnprof analyze p --json`` writes.
"""

from __future__ import annotations

import copy
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import dnnprof.api.frames as frames
from dnnprof.ingest.errors import TraceError
from dnnprof.model.profile import Profile as CanonicalProfile

#: Inputs with no timeline: ``analyze`` reports them, but they hold no tables to load.
NO_TIMELINE = {"ncu-csv": "an Nsight Compute CSV", "ncu-rep": "an Nsight Compute report",
               "nvprof-summary": "an nvprof --print-summary CSV"}


class Profile:
    """A loaded profile: its tables as DataFrames, its summary document, findings, diff and exports.

    Attributes:
        path: what was loaded.
        canonical: the canonical profile (``dnnprof.model.profile.Profile``: numpy tables, ``.query(sql)``).
        rank: the rank the summary, findings and reports are about.
    """

    def __init__(self, path: Path, canonical: CanonicalProfile, rank: int | None = None) -> None:
        from dnnprof.runs.report import default_rank

        self.path = path
        self.canonical = canonical
        self.rank = default_rank(canonical.ranks) if rank is None else rank
        if self.rank not in canonical.ranks:
            raise ValueError(f"{path}: no rank {self.rank} (ranks in the trace: {canonical.ranks})")
        self._report: tuple[Any, dict[str, Any]] | None = None

    # --- tables ----------------------------------------------------------------------------------------------
    def table(self, name: str) -> Any:
        """Any canonical table (``runtime``, ``memset``, ``counters`` …) as a DataFrame (see ``api.frames``)."""
        return frames.table_frame(self.canonical, name)

    @cached_property
    def kernels(self) -> Any:
        """GPU kernels, one row each: ``start_ns``, ``dur_ns``, ``name``, grid/block, ``layer``, ``phase``, ``op`` …"""
        return self.table("kernels")

    @cached_property
    def ops(self) -> Any:
        """CPU ops and ranges: ``name``, ``category``, ``start_ns``, ``dur_ns``, ``parent_row``, ``depth`` …"""
        return self.table("ops")

    @cached_property
    def layers(self) -> Any:
        """Kernel time per layer (module) and rank: ``kernel_time_ns``, ``kernel_calls``, ``kernel_time_pct``."""
        return frames.layers_frame(self.kernels)

    @cached_property
    def steps(self) -> Any:
        """Iterations: ``number``, ``source``, host ``start_ns``/``dur_ns``, GPU ``gpu_start_ns``/``gpu_end_ns``."""
        return self.table("steps")

    @cached_property
    def samples(self) -> Any:
        """NVML/GPM samples: ``ts_ns``, ``metric`` (its unit in its name: ``power_w``, ``sm_active_pct``), ``value``."""
        return self.table("samples")

    @cached_property
    def memcpy(self) -> Any:
        """Copies: ``kind`` (HtoD …), ``src_mem``/``dst_mem``, ``bytes``, ``dur_ns``, ``layer``, ``phase``, ``op``."""
        return self.table("memcpy")

    # --- the report ------------------------------------------------------------------------------------------
    def _reported(self) -> tuple[Any, dict[str, Any]]:
        if self._report is None:
            from dnnprof.runs.report import report, run_extras

            self._report = report(self.canonical, self.rank, run_extras(self.path))
        return self._report

    def summary(self) -> dict[str, Any]:
        """The ``dnnprof.summary/1`` document (docs/summary-json.md), as ``dnnprof analyze PATH --json`` writes it;
        a run directory's includes its throughput, samples, memory and overhead. A copy: change it freely."""
        return copy.deepcopy(self._reported()[1])

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The findings (docs/findings.md), most important first: ``id``, ``severity``, ``title``, ``evidence`` …"""
        return copy.deepcopy(self._reported()[1].get("findings") or [])

    def diff(self, other: Profile | str | os.PathLike[str], top: int = 20) -> dict[str, Any]:
        """The ``dnnprof.diff/1`` document of this profile (base) against ``other`` (new), as ``dnnprof diff``."""
        from dnnprof.analysis.diff import diff_summaries

        new = other if isinstance(other, Profile) else load(other)
        return diff_summaries(self._reported()[1], new._reported()[1], top=top)

    # --- exports ---------------------------------------------------------------------------------------------
    def to_perfetto(self, path: str | os.PathLike[str]) -> Path:
        """Write a trace for ui.perfetto.dev (``.json`` or ``.json.gz``), every rank; returns its path."""
        from dnnprof.render.perfetto import write_perfetto_trace

        analysis = self._reported()[0]
        target = Path(path)
        write_perfetto_trace(self.canonical, target, attribution=analysis.attribution)
        return target

    def html(self, path: str | os.PathLike[str], top: int = 30) -> Path:
        """Write the self-contained HTML report (``dnnprof analyze --html``); returns its path."""
        from dnnprof.model.outputs import write_text_atomic
        from dnnprof.render.html_report import render_html

        return write_text_atomic(path, render_html(self._reported()[1], top=top), option="html")

    def _repr_html_(self) -> str:
        from dnnprof.render.notebook_html import profile_card

        return profile_card(self._reported()[1])

    def __repr__(self) -> str:
        c = self.canonical
        return (f"<dnnprof.Profile {str(self.path)!r}: {c.rows('kernels')} kernels, {c.rows('ops')} ops, "
                f"{c.rows('steps')} steps, ranks {c.ranks}>")


def load(path: str | os.PathLike[str], rank: int | None = None) -> Profile:
    """Read a profile: a Kineto/torch.profiler trace (``.json``/``.json.gz``), a folder of per-rank traces, a
    dnnprof run directory (also one whose run ended early), a saved profile, an Nsight Systems SQLite export or
    ``.nsys-rep`` report, or an ``nvprof --csv --print-gpu-trace`` file.

    Args:
        path: the input.
        rank: the rank the summary and findings are about (default: the only rank, else 0).

    Raises:
        dnnprof.ingest.errors.TraceError: the input cannot be read, or has no timeline (an Nsight Compute CSV or
            report, an nvprof summary: ``dnnprof analyze FILE`` reports those); one line naming the file.
        ValueError: no such rank.
    """
    from dnnprof.ingest.detect import kind_of, open_profile

    p = Path(path)
    kind = kind_of(p)
    if kind in NO_TIMELINE:
        raise TraceError(f"{p}: is {NO_TIMELINE[kind]}, which has no timeline to load as tables; "
                         f"`dnnprof analyze {p}` reports it")
    return Profile(p, open_profile(p), rank)
