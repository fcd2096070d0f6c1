"""Writing the outputs a user names (``--json``, ``--html``, ``--perfetto``, ``--save``, ``--out``) without ever
destroying what dnnprof did not write.

* A file is written to a temporary file in the same folder and renamed over the target: an interrupted write
  never leaves half a file, and a reader sees the old file or the new one. An existing *file* named as an output
  is replaced (that is what naming it asks for), but never an input of the same command, and never a folder.
* A missing parent folder is created; a parent that is a file is an :class:`OutputError`, not a traceback.
* A folder is replaced only by :func:`replace_dir`, whose caller has checked that dnnprof wrote what is there
  (``Profile.save`` does). The new folder is written complete beside the old one and the two are swapped in one
  ``renameat2(RENAME_EXCHANGE)`` where the system has it (Linux), so a crash leaves the old folder or the new one
  at the path, never neither.
* Temporary files and folders are named ``.<target>.<pid>-<random>.tmp``: one left by a killed dnnprof (whose pid
  is gone) is removed the next time the same output is written (:func:`remove_stale_temps`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO


class OutputError(ValueError):
    """An output that must not or cannot be written; the message names the path and says what to do."""


def plain_mode(default: int) -> int:
    """``default`` less the umask: what ``open``/``mkdir`` would give (mkstemp and mkdtemp make private 0600/0700
    entries, which would turn a shared report or profile private)."""
    mask = os.umask(0)
    os.umask(mask)
    return default & ~mask


def _mode_for(target: Path) -> int:
    """Permission bits for a file output: those of the file it replaces, else a plain new file's."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        return plain_mode(0o666)


def check_parent(path: Path) -> None:
    """Refuse an output whose nearest existing ancestor is not a folder (missing folders are created later)."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{path}: {parent} is a file, not a folder; choose another output path")
            return


def check_output_file(path: str | os.PathLike[str], *, option: str = "output",
                      inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Raise :class:`OutputError` when ``path`` cannot take a file written by dnnprof: it is a folder, its
    parent is a file, or it is one of ``inputs`` (or an existing file inside an input folder) that the command
    reads. ``option`` names the command-line option in the message."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"{target}: is a folder; {option} writes a file: give a file name")
    check_parent(target)
    if target.exists():
        for i in inputs:
            src = Path(i)
            if not src.exists():
                continue
            if src.is_dir():
                try:
                    target.resolve().relative_to(src.resolve())
                except ValueError:
                    continue
                raise OutputError(f"{target}: is a file inside the input folder {src}; {option} would overwrite "
                                  "it: write the output elsewhere")
            if os.path.samefile(src, target):
                raise OutputError(f"{target}: is the input of this command; {option} would overwrite it: "
                                  "write the output elsewhere")
    return target


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process (alive), or not a pid at all
        return pid > 0
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary files and folders beside ``target`` that a killed dnnprof left (their pid is not
    running); those of a dnnprof still writing are kept. Returns what was removed."""
    removed: list[Path] = []
    head = f".{target.name}."
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for p in entries:
        name = p.name
        if not (name.startswith(head) and name.endswith(".tmp")):
            continue
        pid, dash, _ = name[len(head):-len(".tmp")].partition("-")
        if not dash or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            continue  # not ours to remove (permissions): leave it
        removed.append(p)
    return removed


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, option: str = "output") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename (fsynced first). A
    symbolic link is written through: the file it points to is replaced, the link stays."""
    with atomic_file(path, option=option) as (target, f):
        f.write(data)
    return target


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, option: str = "output") -> Iterator[tuple[Path, BinaryIO]]:
    """``(target, file)``: a binary file to write in pieces that becomes ``path`` (``target``, a symbolic link
    resolved) when the block ends, fsynced and renamed as :func:`write_bytes_atomic`; removed if the block fails."""
    target = check_output_file(path, option=option)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{target}: cannot create the folder {target.parent} ({e.strerror})") from None
    mode = _mode_for(target)
    remove_stale_temps(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise OutputError(f"{target}: cannot write in {target.parent} ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield target, f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write ({e.strerror or e})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, *, option: str = "output") -> Path:
    """:func:`write_bytes_atomic` of UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"), option=option)


def temp_dir_beside(target: Path) -> Path:
    """A new empty hidden folder next to ``target`` (same file system, so it can be renamed onto it), with the
    permissions a plain ``mkdir`` would give."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target)
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
    except OSError as e:
        raise OutputError(f"{target}: cannot write in {target.parent} ({e.strerror})") from None
    os.chmod(tmp, plain_mode(0o777))
    return tmp


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with ``renameat2(RENAME_EXCHANGE)``; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here: only a replaced folder needs it, not every command's start-up

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # no libc symbol (musl, glibc < 2.28)
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system without exchange (some network ones)
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(new: Path, target: Path) -> None:
    """Move the complete folder ``new`` (a sibling made by :func:`temp_dir_beside`) to ``target``.

    ``target`` must be absent, an empty folder, or a folder the caller has checked dnnprof wrote: its old
    contents are deleted once the new folder is in place. Where the system cannot swap two folders atomically, the
    old one is renamed aside first and renamed back if the second rename fails; only a kill between those two
    renames leaves it aside (as ``.<name>.old-…``), still whole.
    """
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(new, target)  # onto nothing or an empty folder: one atomic rename
        return
    if _exchange(new, target):
        shutil.rmtree(new)  # ``new`` now holds the old contents
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old)
