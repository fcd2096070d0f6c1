"""An Nsight Systems report (``.nsys-rep``) → its SQLite export, made with ``nsys export`` and cached beside it.

The report format is nsys's own; its SQLite export is documented and is what :mod:`dnnprof.ingest.nsys_sqlite`
reads. The export is written as ``<report stem>.dnnprof.sqlite`` next to the report (first to a hidden temporary
name, then renamed), with one table of dnnprof's own, :data:`STAMP_TABLE`, holding the report's path, size and
modification time. An export carrying a stamp that matches the report is reused; one whose stamp is stale is
replaced (dnnprof made it); any other file of that name is the user's and is never touched: the next free name
(``<stem>.dnnprof-2.sqlite``, …) is used instead.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from dnnprof.ingest.errors import TraceError

#: The table dnnprof adds to an export it made: which report, of which size and mtime, it came from.
STAMP_TABLE = "DNNPROF_EXPORT"
#: Names tried for the cached export before giving up.
_MAX_NAMES = 20


def export_command(report: Path, out: Path) -> list[str]:
    """The ``nsys export`` command line that writes ``report``'s SQLite export to ``out``."""
    return ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]


def _stamp(report: Path) -> tuple[str, int, int]:
    st = report.stat()
    return str(report.resolve()), int(st.st_size), int(st.st_mtime_ns)


def _read_stamp(db: Path) -> tuple[str, int, int] | None:
    """The stamp of an export dnnprof made, None for any other file."""
    try:
        con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
        try:
            row = con.execute(f"SELECT report, size, mtime_ns FROM {STAMP_TABLE}").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return None
    return (str(row[0]), int(row[1]), int(row[2])) if row else None


def sqlite_of_report(report: Path) -> Path:
    """The SQLite export of ``report``: a cached one dnnprof made earlier, else a new one made with ``nsys``.

    Raises:
        TraceError: ``nsys`` is not on the PATH (the message says how to export by hand), or the export failed.
    """
    stamp = _stamp(report)
    candidates = [report.with_name(f"{report.stem}.dnnprof{'' if i == 1 else f'-{i}'}.sqlite")
                  for i in range(1, _MAX_NAMES + 1)]
    target = None
    for c in candidates:
        if not c.exists():
            target = target or c
            continue
        found = _read_stamp(c)
        if found == stamp:
            return c
        if found is not None and found[0] == stamp[0] and target is None:
            target = c  # dnnprof's own export of an older version of this report: replaced
    nsys = shutil.which("nsys")
    manual = f"nsys export --type sqlite --output {report.with_suffix('.sqlite')} {report}"
    if nsys is None:
        raise TraceError(f"{report}: an Nsight Systems report, read through its SQLite export; nsys is not on the "
                         f"PATH: run `{manual}` and analyze the .sqlite file")
    if target is None:
        raise TraceError(f"{report}: no free name beside it for its SQLite export; run `{manual}` and analyze that")
    tmp = target.with_name(f".{target.stem}.tmp-{os.getpid()}.sqlite")
    cmd = export_command(report, tmp)
    cmd[0] = nsys
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not tmp.is_file():
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise TraceError(f"{report}: `nsys export` failed (exit {proc.returncode}"
                             f"{': ' + said[-1] if said else ''}); run `{manual}` to see why")
        con = sqlite3.connect(tmp)
        try:
            con.execute(f"CREATE TABLE {STAMP_TABLE} (report TEXT, size INTEGER, mtime_ns INTEGER)")
            con.execute(f"INSERT INTO {STAMP_TABLE} VALUES (?, ?, ?)", stamp)
            con.commit()
        finally:
            con.close()
        os.replace(tmp, target)
    except OSError as e:
        raise TraceError(f"{report}: cannot write its SQLite export beside it ({e.strerror}); run `{manual}` with "
                         "another --output and analyze that") from None
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{report}: `nsys export` wrote no readable SQLite database ({e})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target
