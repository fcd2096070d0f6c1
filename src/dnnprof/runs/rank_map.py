"""The map step of a folder of per-rank traces: one rank's trace → its canonical profile (Parquet, cached) and the
small summary the cross-rank reduce needs (:func:`rank_task`).

A worker holds one rank at a time, so its memory is bounded by one rank's trace. What it returns is small: the
rank's row of the ranks overview (``analysis.ranks.rank_row``), its part of the critical path
(``analysis.critical_path.rank_part``: collective arrivals and ends per instance, step starts, phase times of the
windows the reduce asks for, module ranges) and its metadata; it grows with collectives, steps and module calls,
never with kernels or ops.

The cache: one folder per trace under ``$XDG_CACHE_HOME/dnnprof/ranks/`` (``~/.cache`` when unset), named by a
hash of the trace's resolved path, size and modification time and of this dnnprof's version and profile format;
it holds ``profile/`` (``Profile.save``) and ``part.json``. Touching, replacing or growing the trace names another
folder, so a stale entry is never read. Nothing is written beside the user's files.

Pruning (:func:`prune_cache`, after every map): an entry whose trace is gone or has changed since (its ``source.json``
no longer names the trace as it is) is removed, then the least recently used entries until the cache holds at most
``$DNNPROF_RANK_CACHE_MB`` megabytes (default :data:`DEFAULT_CACHE_MB`; 0 keeps only what the last map used).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
from pathlib import Path
from typing import Any

from dnnprof import __version__
from dnnprof.model.profile import PROFILE_FORMAT, Profile

#: What the map keeps of a trace, per trace: the canonical profile and the part for the reduce.
PROFILE_DIR, PART_FILE = "profile", "part.json"
#: The trace an entry was made from (path, size, modification time), for pruning.
SOURCE_FILE = "source.json"
#: Default bound of the rank cache, MB (``$DNNPROF_RANK_CACHE_MB``).
DEFAULT_CACHE_MB = 4096
CACHE_MB_ENV = "DNNPROF_RANK_CACHE_MB"
#: What ``part.json`` holds; part of the cache key, so a part written by an older map is not read.
PART_FORMAT = "dnnprof.rank-part/2"


def cache_root() -> Path:
    """``$DNNPROF_CACHE_DIR/ranks`` (as ``dnnprof device``'s cache), else ``$XDG_CACHE_HOME/dnnprof/ranks``
    (``~/.cache/dnnprof/ranks`` when both are unset or empty)."""
    if os.environ.get("DNNPROF_CACHE_DIR"):
        return Path(os.environ["DNNPROF_CACHE_DIR"]) / "ranks"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dnnprof" / "ranks"


def cache_entry(trace: Path, root: Path) -> Path:
    """The cache folder of ``trace`` as it is now (path, size, modification time; this dnnprof's formats)."""
    path = trace.resolve()
    st = path.stat()
    key = "\0".join([str(path), str(st.st_size), str(st.st_mtime_ns), __version__, PROFILE_FORMAT,
                    PART_FORMAT])
    return root / hashlib.sha256(key.encode()).hexdigest()[:32]


def rank_summary(profile: Profile) -> dict[str, Any]:
    """The part of one rank's profile the reduce reads (see the module docstring), JSON-ready, on its own clock."""
    from dnnprof.analysis.collectives import rank_collectives
    from dnnprof.analysis.critical_path import rank_part
    from dnnprof.analysis.ranks import rank_row

    rank = int(profile.meta.get("ranks", [0])[0])
    return {"rank": rank, "base_time_ns": int(profile.meta.get("base_time_ns", 0)), "meta": profile.meta,
            "row": rank_row(profile, rank), "critical": rank_part(profile, rank),
            "collectives": rank_collectives(profile, rank)}


def rank_task(trace: str, root: str) -> dict[str, Any]:
    """Map one rank: its part from the cache when the trace has not changed, else read, saved and summarised.

    Returns the part plus ``trace``, ``cache`` (the entry's folder), ``cached`` (whether it was reused) and what
    the process measured: ``pid`` and ``peak_rss_kb`` (its peak resident memory so far).

    Raises:
        dnnprof.ingest.errors.TraceError: the trace cannot be read.
        dnnprof.model.outputs.OutputError: the cache cannot be written.
    """
    from dnnprof.ingest.kineto import read_kineto
    from dnnprof.ingest.kineto_split import read_workers
    from dnnprof.model.outputs import write_text_atomic

    path = Path(trace)
    entry = cache_entry(path, Path(root))
    part_file = entry / PART_FILE
    part: dict[str, Any] | None = None
    cached = False
    if part_file.is_file() and (entry / PROFILE_DIR / "profile.json").is_file():
        try:
            part = json.loads(part_file.read_text())
            cached = True
        except (OSError, ValueError):
            part = None  # a damaged entry is rebuilt
    if part is None:
        # Ranks are read side by side already: a big one takes two processes at most, not every core.
        profile = read_kineto(path, workers=min(2, read_workers()))
        profile.save(entry / PROFILE_DIR)
        part = rank_summary(profile)
        del profile
        st = path.resolve().stat()
        write_text_atomic(entry / SOURCE_FILE, json.dumps({"path": str(path.resolve()), "size": st.st_size,
                                                           "mtime_ns": st.st_mtime_ns}), option="rank cache")
        # written last: an entry with its part is complete
        write_text_atomic(part_file, json.dumps(part, default=str), option="rank cache")
    else:
        os.utime(part_file)  # used now: the last to go when the cache is bounded
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {**part, "trace": str(path), "cache": str(entry), "cached": cached, "pid": os.getpid(),
            "peak_rss_kb": int(peak)}


class CacheError(ValueError):
    """A bad ``$DNNPROF_RANK_CACHE_MB`` (one line for the user)."""


def cache_limit_bytes() -> int:
    """The rank cache's bound: ``$DNNPROF_RANK_CACHE_MB`` megabytes, else :data:`DEFAULT_CACHE_MB`.

    Raises:
        CacheError: the variable is not a number ≥ 0.
    """
    raw = os.environ.get(CACHE_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise CacheError(f"{CACHE_MB_ENV}={raw}: give the rank cache's bound in megabytes, a number ≥ 0 "
                         f"(default {DEFAULT_CACHE_MB})")
    return int(mb * (1 << 20))


def _stale(entry: Path) -> bool:
    """The entry's trace is gone or is no longer the file it was made from (entries without a source are stale)."""
    try:
        src = json.loads((entry / SOURCE_FILE).read_text())
        st = Path(src["path"]).stat()
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return (st.st_size, st.st_mtime_ns) != (src.get("size"), src.get("mtime_ns"))


def _size(entry: Path) -> int:
    return sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())


def prune_cache(root: Path, keep: set[Path] | None = None, limit_bytes: int | None = None) -> list[Path]:
    """Remove the entries of ``root`` whose trace is gone or changed, then the least recently used ones until the
    rest fit in ``limit_bytes`` (:func:`cache_limit_bytes` when None); ``keep``: entries just used, never removed.
    Returns the entries removed."""
    import shutil

    keep = {k.resolve() for k in keep or set()}
    limit = cache_limit_bytes() if limit_bytes is None else limit_bytes
    if not root.is_dir():
        return []
    entries = [e for e in root.iterdir() if e.is_dir()]
    removed = [e for e in entries if e.resolve() not in keep and _stale(e)]
    live = []
    for e in entries:
        if e in removed:
            continue
        part = e / PART_FILE
        live.append((part.stat().st_mtime_ns if part.is_file() else 0, e, _size(e)))
    total = sum(s for _, _, s in live)
    for _, e, s in sorted(live, key=lambda x: (x[0], x[1].name)):  # least recently used first
        if total <= limit:
            break
        if e.resolve() in keep:
            continue
        removed.append(e)
        total -= s
    for e in removed:
        shutil.rmtree(e, ignore_errors=True)
    return removed
