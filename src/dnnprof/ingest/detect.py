"""What a path holds: a Kineto trace, a folder of traces (one per rank), a saved profile, an nsys export, an ncu
CSV, …"""

from __future__ import annotations

import zlib
from pathlib import Path

from dnnprof.ingest.errors import TraceError
from dnnprof.model.profile import Profile, ProfileError

#: The first bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


#: What a dnnprof run directory holds before its profile is assembled (``collect.config.RESULT_FILE``, its traces).
RUN_RESULTS, RUN_TRACES = "collector.json", "trace"


def kind_of(path: Path) -> str:
    """One of: 'profile' (saved dnnprof profile dir), 'run' (dnnprof run dir), 'run-raw' (a run directory whose
    profile was never assembled: its collector results and traces only), 'kineto', 'kineto-dir', 'ncu-csv',
    'ncu-rep', 'nvprof-csv' (``--print-gpu-trace``), 'nvprof-summary' (``--print-summary``: no timeline),
    'nsys-sqlite' (by content: the SQLite magic; its tables are checked by the reader), 'nsys-rep' (an
    Nsight Systems report, ``.nsys-rep`` or the older ``.qdrep``). Raises TraceError for anything else."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "profile.json").is_file():
            return "profile"
        if (path / "profile" / "profile.json").is_file():
            return "run"
        if (path / RUN_RESULTS).is_file() and (path / RUN_TRACES).is_dir():
            return "run-raw"
        from dnnprof.ingest.assemble_ranks import rank_dirs

        if rank_dirs(path):  # a multi-rank run: rank<N>/ with each rank's collector results and traces
            return "run-raw"
        if trace_files(path):
            return "kineto-dir"
        raise TraceError(f"{path}: folder holds no trace (*.json, *.json.gz) and no dnnprof profile")
    name = path.name.lower()
    if name.endswith(".ncu-rep"):
        return "ncu-rep"
    if name.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    head = _head(path)
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(b"\x1f\x8b"):
        head = _gunzip_head(path)
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return "kineto"
    from dnnprof.ingest.nvprof_csv import is_nvprof_csv
    from dnnprof.ingest.nvprof_summary import is_nvprof_summary

    if is_nvprof_summary(head):
        return "nvprof-summary"
    if is_nvprof_csv(head):
        return "nvprof-csv"
    if (text.startswith((b'"ID"', b"==PROF==", b"==ERROR==", b"==WARNING==")) or b'"Kernel Name"' in head):
        return "ncu-csv"
    if not head:
        raise TraceError(f"{path}: empty file")
    raise TraceError(f"{path}: not a trace dnnprof can read (expected Kineto JSON, a dnnprof profile, an Nsight "
                     "Systems SQLite export or report, or an ncu CSV)")


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def _gunzip_head(path: Path, n: int = 4096) -> bytes:
    """The first bytes of a gzip file's contents (b"" when the compressed data is unreadable: the reader says why)."""
    d = zlib.decompressobj(31)
    out = b""
    try:
        with path.open("rb") as f:
            while len(out) < n:
                chunk = f.read(65536)
                if not chunk:
                    break
                out += d.decompress(chunk, n - len(out))
    except (OSError, zlib.error):
        return b"\x1f\x8b"
    return out or b"\x1f\x8b"


def trace_files(folder: Path) -> list[Path]:
    """Kineto trace files directly in a folder, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES))


def open_profile(path: str | Path, kind: str | None = None) -> Profile:
    """A canonical Profile from a trace file, a folder of per-rank traces, a saved profile or a run directory.

    ``kind``: what :func:`kind_of` said of ``path`` when the caller already asked (it is not asked again).
    """
    from dnnprof.ingest.kineto import read_kineto
    from dnnprof.ingest.ranks import merge_ranks

    p = Path(path)
    kind = kind_of(p) if kind is None else kind
    try:
        if kind == "profile":
            return Profile.load(p)
        if kind == "run":
            return Profile.load(p / "profile")
    except ProfileError as e:
        raise TraceError(str(e)) from None
    if kind == "kineto":
        return read_kineto(p)
    if kind == "kineto-dir":
        files = trace_files(p)
        if len(files) == 1:
            return read_kineto(files[0])
        return merge_ranks([read_kineto(f) for f in files], source=p)
    if kind == "nsys-sqlite":
        from dnnprof.ingest.nsys_sqlite import read_nsys_sqlite

        return read_nsys_sqlite(p)
    if kind == "nsys-rep":
        from dnnprof.ingest.nsys_export import sqlite_of_report
        from dnnprof.ingest.nsys_sqlite import read_nsys_sqlite

        return read_nsys_sqlite(sqlite_of_report(p))
    if kind == "nvprof-csv":
        from dnnprof.ingest.nvprof_csv import read_nvprof_csv

        return read_nvprof_csv(p)
    if kind == "run-raw":
        return _assemble_run(p)
    if kind == "nvprof-summary":
        raise TraceError(f"{p}: is an nvprof --print-summary CSV, not a timeline trace (record with "
                         "`nvprof --csv --print-gpu-trace`)")
    raise TraceError(f"{p}: is an Nsight Compute {'report' if kind == 'ncu-rep' else 'CSV'}, not a timeline trace")


def _assemble_run(run_dir: Path) -> Profile:
    """A run directory whose process ended before ``dnnprof run`` wrote its profile, assembled from its traces."""
    from dnnprof.ingest.assemble import AssembleError, assemble, load_collector
    from dnnprof.ingest.assemble_ranks import assemble_ranks, rank_dirs
    from dnnprof.ingest.run_files import check_run_dir

    ranks = rank_dirs(run_dir)
    for d in ranks.values():
        check_run_dir(d)
    if not ranks:
        check_run_dir(run_dir)  # a damaged collector.json or samples file is one line naming it
    try:
        if ranks:
            profile, _ = assemble_ranks(run_dir)
            return _noted(profile)
        col = load_collector(run_dir)
        if col is None:
            raise TraceError(f"{run_dir}: no collector results")
        profile, _ = assemble(run_dir, col)
    except AssembleError as e:
        raise TraceError(f"{run_dir}: {e}") from None
    return _noted(profile)


def _noted(profile: Profile) -> Profile:
    profile.meta.setdefault("source", {})["notes"] = [
        *profile.meta["source"].get("notes", []),
        "assembled from the run's traces here: its profile/ was never written (the run ended early?)"]
    return profile
