"""The Perfetto export of one prepared input, written by a child process into the input's cache folder.

A Perfetto trace covers the whole input, so writing it means loading the whole profile: done in the server's
process, that would hold every table of a big profile for as long as the server lives (its memory is rarely given
back). The server runs ``python -m dnnprof.serve.perfetto_export TABLES OUT`` instead, once per input, and streams
the file it leaves; later requests get the same file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

#: The export's file name in an input's cache folder.
EXPORT_FILE = "perfetto.json.gz"

_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


class ExportError(RuntimeError):
    """The child process could not write the export (its last error line)."""


def export_path(cache: Path, tables: Path) -> Path:
    """``cache/perfetto.json.gz``, written first (in a child process) when it is not there; one writer per input
    at a time, the others wait for its file."""
    out = cache / EXPORT_FILE
    with _locks_guard:
        lock = _locks.setdefault(out, threading.Lock())
    with lock:
        if out.is_file():
            return out
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # this package's own sources win in the child
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        done = subprocess.run([sys.executable, "-m", "dnnprof.serve.perfetto_export", str(tables), str(out)],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.is_file():
            lines = (done.stderr or "").strip().splitlines()
            raise ExportError(lines[-1] if lines else f"the Perfetto export failed (exit {done.returncode})")
        return out


def write_export(tables: Path, out: Path) -> None:
    """Load the saved profile ``tables`` and write its Perfetto trace, gzipped, to ``out`` (atomically)."""
    from dnnprof.analysis.attribution import attribute
    from dnnprof.model.profile import Profile
    from dnnprof.render.perfetto import write_perfetto_trace

    profile = Profile.load(tables)
    write_perfetto_trace(profile, out, attribution=attribute(profile))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m dnnprof.serve.perfetto_export TABLES OUT.json.gz", file=sys.stderr)
        return 2
    write_export(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
