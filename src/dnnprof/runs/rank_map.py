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
        profile = read_kineto(path)
        profile.save(entry / PROFILE_DIR)
        part = rank_summary(profile)
        del profile
        # written last: an entry with its part is complete
        write_text_atomic(part_file, json.dumps(part, default=str), option="rank cache")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {**part, "trace": str(path), "cache": str(entry), "cached": cached, "pid": os.getpid(),
            "peak_rss_kb": int(peak)}
