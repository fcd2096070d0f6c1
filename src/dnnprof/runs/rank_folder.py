"""``dnnprof analyze FOLDER`` of per-rank traces, spread over processes: map every rank in a worker
(:func:`dnnprof.runs.rank_map.rank_task`), then reduce across ranks from what the workers returned.

Executors: in this process (``workers=1``), a local process pool (the default: one worker per core, at most one per
rank), or a Dask distributed cluster (``dask="tcp://scheduler:8786"``, or ``"local:N"`` for a ``LocalCluster`` of N
worker processes). Each does the same map and the same reduce, so the summary is the same document.

The reduce reads only the parts (a row per rank, the critical path's per-instance arrivals and window phase
times), plus the full profile of the one rank reported (``--rank``), from the cache or, when this process cannot
see the workers' cache, read from its trace. Its memory grows with ranks × collectives, not ranks × trace size.
When an output needs every rank's rows (``--save``, ``--perfetto``, the dashboard), the ranks are loaded back from
the cache and merged as a folder always was: that one grows with ranks × trace size.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.model.profile import Profile

#: ``--dask local:N`` starts a LocalCluster of N worker processes.
LOCAL_PREFIX = "local:"
#: Seconds to wait for a Dask scheduler before saying it cannot be reached.
CONNECT_TIMEOUT_S = 10


class ScaleError(ValueError):
    """A bad ``--workers``/``--dask``, or a cluster that cannot be used (one line for the user)."""


def default_workers(ranks: int) -> int:
    """One worker per core this process may run on, at most one per rank."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, ranks))


def check_workers(workers: int | None) -> None:
    """Raise :class:`ScaleError` for a worker count below 1."""
    if workers is not None and workers < 1:
        raise ScaleError(f"--workers {workers}: give at least 1 (1 reads the ranks one after another in this "
                         "process)")


def map_ranks(files: list[Path], *, workers: int | None = None, dask: str | None = None,
              root: Path | None = None) -> list[dict[str, Any]]:
    """Every trace's part (:func:`~dnnprof.runs.rank_map.rank_task`), in the order of ``files``.

    Raises:
        ScaleError: a bad worker count, dask missing, or a scheduler that cannot be reached.
        dnnprof.ingest.errors.TraceError: a trace cannot be read (raised by the worker that read it).
    """
    from dnnprof.runs.rank_map import CacheError, cache_limit_bytes, cache_root, prune_cache

    check_workers(workers)
    try:
        limit = cache_limit_bytes()
    except CacheError as e:
        raise ScaleError(str(e)) from None
    root = cache_root() if root is None else root
    parts = _map(files, workers, dask, root)
    # entries of traces gone or changed, then the least recently used beyond the bound (not the ones just used)
    prune_cache(root, keep={Path(p["cache"]) for p in parts}, limit_bytes=limit)
    return parts


def _map(files: list[Path], workers: int | None, dask: str | None, root: Path) -> list[dict[str, Any]]:
    from dnnprof.runs.rank_map import rank_task

    names = [str(f) for f in files]
    if dask is not None:
        return _map_dask(names, str(root), dask)
    n = default_workers(len(files)) if workers is None else min(workers, len(files))
    if n <= 1:
        return [rank_task(f, str(root)) for f in names]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: a fresh interpreter per worker, nothing of this process's memory (or threads) copied into it
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(rank_task, names, [str(root)] * len(names)))


def _map_dask(names: list[str], root: str, address: str) -> list[dict[str, Any]]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ScaleError("--dask needs dask.distributed: pip install 'dnnprof[scale]'") from None
    from dnnprof.runs.rank_map import rank_task

    cluster = None
    if address.startswith(LOCAL_PREFIX):
        count = address[len(LOCAL_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise ScaleError(f"--dask {address}: give local:N with N ≥ 1 worker processes (e.g. local:4)")
        cluster = LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True, dashboard_address=None)
        address = cluster.scheduler_address
    try:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as e:
            raise ScaleError(f"--dask {address}: cannot reach a Dask scheduler there "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        try:
            futures = client.map(rank_task, names, root=root, pure=False)
            return list(client.gather(futures))
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


def _place_on_clock(profile: Profile, base_ns: int) -> None:
    """Move a one-rank profile's times onto the folder's clock, as ``ingest.ranks.merge_ranks`` does."""
    import numpy as np

    shift = int(profile.meta.get("base_time_ns", 0)) - base_ns
    if not shift:
        return
    for t in profile.tables.values():
        for c, v in t.items():
            if c.endswith("_ns") and c not in ("dur_ns", "window_ns"):
                t[c] = np.where(v >= 0, v + shift, v)


def _reported_profile(part: dict[str, Any]) -> Profile:
    """The full profile of the reported rank: from the cache when this process sees it, else from its trace."""
    from dnnprof.ingest.kineto import read_kineto
    from dnnprof.model.profile import ProfileError
    from dnnprof.runs.rank_map import PROFILE_DIR

    try:
        return Profile.load(Path(part["cache"]) / PROFILE_DIR)
    except ProfileError:  # a cluster's workers cached it on their machines
        return read_kineto(part["trace"])


def _spent_of(parts: dict[int, dict[str, Any]], reported: int,
              profile: Profile) -> Callable[[int, list[tuple[int, int]]], list[dict[str, int]]]:
    """Phase times of windows no part foresaw: back to that one rank's profile (only when the ranks did not all
    see the same collectives). ``profile``: the reported rank's, already open."""
    from dnnprof.analysis.critical_path import rank_phases, spent_in

    def spent(rank: int, windows: list[tuple[int, int]]) -> list[dict[str, int]]:
        p = profile if rank == reported else _reported_profile(parts[rank])
        phases = rank_phases(p, rank)
        return [spent_in(phases, lo, hi) for lo, hi in windows]

    return spent


def report_folder(folder: Path, files: list[Path], rank: int | None = None, *, workers: int | None = None,
                  dask: str | None = None, every_rank: bool = False,
                  root: Path | None = None) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """The analysis and summary document of one rank of a folder of per-rank traces, mapped over workers and
    reduced across ranks; also the parts the workers returned (for their measurements).

    ``every_rank``: the analysis' profile must hold every rank (``--save``, ``--perfetto``, the dashboard); they
    are then loaded back from the cache and merged.

    Raises:
        ScaleError, dnnprof.ingest.errors.TraceError, dnnprof.runs.report.ReportError (no such rank).
    """
    from dnnprof.analysis.collectives import match_collectives, rank_collectives
    from dnnprof.analysis.critical_path import rank_part, reduce_parts
    from dnnprof.analysis.ranks import overview_of_rows
    from dnnprof.ingest.errors import TraceError
    from dnnprof.runs.report import ReportError, default_rank, report

    parts = map_ranks(files, workers=workers, dask=dask, root=root)
    ranks = [int(p["rank"]) for p in parts]
    if len(set(ranks)) != len(ranks):
        raise TraceError(f"{folder}: several traces claim the same rank {ranks} "
                         f"({', '.join(p['trace'] for p in parts)}); pass one file, or a folder with one trace per rank")
    rank = default_rank(sorted(ranks)) if rank is None else rank
    if rank not in ranks:
        raise ReportError(f"{folder}: no rank {rank} (ranks in the trace: {sorted(ranks)})")
    if every_rank:
        from dnnprof.ingest.ranks import merge_ranks

        merged = merge_ranks([_reported_profile(p) for p in parts], source=folder)
        analysis, doc = report(merged, rank)
        return analysis, doc, parts
    base = min(int(p["base_time_ns"]) for p in parts)
    mine = parts[ranks.index(rank)]
    profile = _reported_profile(mine)
    _place_on_clock(profile, base)
    profile.meta = {"source": {"path": str(folder), "format": "kineto"}, "base_time_ns": base,
                    "ranks": sorted(ranks), "per_rank": [p["meta"] for p in parts]}
    by_rank = {int(p["rank"]): p for p in parts}
    rows = [by_rank[r]["row"] for r in sorted(by_rank)]
    critical = {r: {**p["critical"], "shift_ns": int(p["base_time_ns"]) - base} for r, p in by_rank.items()}
    colls = {r: {**p["collectives"], "shift_ns": int(p["base_time_ns"]) - base} for r, p in by_rank.items()}

    def across(analysis: Any) -> dict[str, Any]:
        # the reported rank's part from its analysed profile (its steps as the report sees them), on the common clock
        critical[rank] = rank_part(analysis.profile, rank)
        colls[rank] = {**rank_collectives(analysis.profile, rank), "shift_ns": 0}
        return {"ranks": overview_of_rows(rows),
                "critical_path": reduce_parts(critical, _spent_of(by_rank, rank, analysis.profile)),
                "collectives": match_collectives(colls)}

    analysis, doc = report(profile, rank, across_ranks=across)
    return analysis, doc, parts
