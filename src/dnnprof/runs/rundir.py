"""Run directories: ``dnnprof-runs/<name>-<UTC timestamp>/``, written atomically.

Everything is written into a hidden staging directory next to the final one (``.<name>-<ts>.partial``) and renamed
at the very end. A complete run gets the final name; a run that crashed, was interrupted or recorded only part of
its window is renamed ``<name>-<ts>.incomplete`` and holds an ``INCOMPLETE`` file saying why. A staging directory
left behind (the dnnprof process itself was killed) is hidden and still says ``.partial``. Nothing that claims to
be complete is ever half written.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnprof.model.outputs import plain_mode

RUNS_ROOT = Path("dnnprof-runs")
INCOMPLETE_FILE = "INCOMPLETE"
INCOMPLETE_SUFFIX = ".incomplete"
STAGING_SUFFIX = ".partial"
#: Markers the profiled process leaves while a run is live (the collector's claim, its flush in progress); they
#: mean nothing once the run has ended and are removed from the run folder and its sub-folders (a counters pass).
LIVE_MARKERS = ("owner.pid", "finalizing")


class RunDirError(ValueError):
    """The run directory cannot be created where asked; the message names the path."""


def utc_stamp(now: _dt.datetime | None = None) -> str:
    """``20261126T031427Z``-style UTC timestamp."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def safe_name(name: str) -> str:
    """A file-system-safe run name (letters, digits, ``._-``; at most 60 characters)."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return s[:60] or "run"


def name_from_command(command: list[str]) -> str:
    """A run name from a command line: the script's stem for ``python x.py``, the module for ``python -m a.b``."""
    args = list(command)
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return safe_name(args[i + 1].rsplit(".", 1)[-1])
        if a.endswith(".py"):
            return safe_name(Path(a).stem)
    return safe_name(Path(args[0]).name) if args else "run"


@dataclass
class RunDir:
    """Where a run is being written (``staging``) and where it will end up (``final``)."""

    final: Path
    staging: Path

    @classmethod
    def create(cls, name: str, out: Path | None = None, root: Path = RUNS_ROOT,
               now: _dt.datetime | None = None) -> RunDir:
        """Make the staging directory.

        Raises:
            RunDirError: ``out`` exists and is not an empty directory, or the parent cannot be created.
        """
        if out is not None:
            final = Path(out)
            if final.exists() and (not final.is_dir() or any(final.iterdir())):
                raise RunDirError(f"{final}: already exists and is not an empty directory; choose another --out")
        else:
            stem = f"{safe_name(name)}-{utc_stamp(now)}"
            final = Path(root) / stem
            n = 2
            while final.exists() or final.with_name(final.name + INCOMPLETE_SUFFIX).exists():
                final = Path(root) / f"{stem}-{n}"
                n += 1
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            # A unique name: a run killed before it finished leaves its staging folder behind, and a later run
            # with the same --out must neither fail on it nor write into it.
            staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=STAGING_SUFFIX, dir=final.parent))
            staging.chmod(plain_mode(0o777))  # mkdtemp makes it private; a run folder follows the umask like mkdir
        except OSError as e:
            raise RunDirError(f"{final.parent}: cannot create the run directory ({e.strerror})") from None
        return cls(final=final.absolute(), staging=staging.absolute())

    def target(self, complete: bool) -> Path:
        """Where the run ends up: the final name, or the final name + ``.incomplete``."""
        return self.final if complete else self.final.with_name(self.final.name + INCOMPLETE_SUFFIX)

    def finish(self, complete: bool, reason: str = "") -> Path:
        """Move the staging directory to its final name; an incomplete run is marked as such. Returns the path.

        The name is taken only when it is free or an empty folder. When something else is there (a folder made
        while the run ran, someone's ``<out>.incomplete``), the run goes to ``<name>-2``, ``-3``, … instead:
        nothing already there is replaced or mixed into.
        """
        base = self.target(complete)
        for marker in LIVE_MARKERS:
            for path in (self.staging / marker, *self.staging.glob(f"*/{marker}")):
                path.unlink(missing_ok=True)
        if not complete:
            (self.staging / INCOMPLETE_FILE).write_text((reason or "the run did not complete") + "\n")
        target, n = base, 2
        while True:
            if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
                target.rmdir()
            if not target.exists() and not target.is_symlink():
                try:
                    os.rename(self.staging, target)  # never replaces a non-empty folder or a file
                    return target
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                        raise
            target, n = base.with_name(f"{base.name}-{n}"), n + 1


def git_info(cwd: Path) -> dict[str, Any] | None:
    """Commit and dirty flag of the git work tree containing ``cwd`` (None outside one, or without git)."""

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "branch": git("rev-parse", "--abbrev-ref", "HEAD")}
