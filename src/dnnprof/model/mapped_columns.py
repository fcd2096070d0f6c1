"""Table columns kept in temporary files mapped into memory, for traces whose tables would not fit comfortably.

A mapped column is an ordinary writable numpy array whose pages live in the page cache, backed by an unlinked
temporary file: the process holds only the pages it touched since the last :func:`release_pages`, which drops
them from its resident set (a later access reads them back from the page cache, or from the file if the system
reclaimed them). The reader fills the tables of a big trace into mapped columns and releases each one when it is
done; the analysis releases between its stages, so the resident set is what one stage uses, not every table.

Only on POSIX systems (a mapped file cannot be removed while mapped on Windows): elsewhere columns are in memory.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: Whether this system maps columns (see the module's docstring).
SUPPORTED = os.name == "posix" and hasattr(mmap, "MADV_DONTNEED")

_MAPS: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
_MAPS_LOCK = threading.Lock()  # a big trace's table columns are filled by several threads


def mapped_column(folder: Path | None, dtype: np.dtype, n: int, fill: object) -> np.ndarray:
    """A writable column of ``n`` values of ``dtype``, each ``fill``, in an unlinked file in ``folder`` (the
    system's temporary folder when None). Zero-length columns are ordinary arrays."""
    dtype = np.dtype(dtype)
    if n == 0 or not SUPPORTED:
        return np.full(n, fill, dtype=dtype)
    import tempfile  # here: most commands never map a column

    with tempfile.TemporaryFile(dir=folder, prefix="column-") as f:
        f.truncate(n * dtype.itemsize)
        m = mmap.mmap(f.fileno(), n * dtype.itemsize)  # the map keeps the file alive after it is closed
    with _MAPS_LOCK:
        _MAPS.add(m)
    out = np.frombuffer(m, dtype=dtype)
    if fill != 0 and not (dtype.kind == "b" and not fill):  # a new file reads as zeros already
        out[:] = fill
        m.madvise(mmap.MADV_DONTNEED)  # a table's columns are made together: none of them resident yet
    return out


def mapped_file(path: Path, dtype: np.dtype) -> np.ndarray:
    """The values of the raw file ``path`` (native byte order) as a read-only column mapped from it (read into
    memory where columns are not mapped)."""
    dtype = np.dtype(dtype)
    size = path.stat().st_size
    if size == 0 or not SUPPORTED:
        return np.fromfile(path, dtype=dtype)
    with path.open("rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    with _MAPS_LOCK:
        _MAPS.add(m)
    return np.frombuffer(m, dtype=dtype)


def large_blocks_returned_on_free() -> None:
    """Make glibc's malloc give every block of 1 MiB or more its own mapping, returned to the system when freed.

    By default glibc raises that threshold up to 32 MiB each time such a block is freed, so the big temporaries
    of numpy that come later stay in the heap once freed and the resident set only grows (+30 MB at a 900 MB
    trace). Process-wide; called for big traces only; nothing where malloc is not glibc's. From then on,
    :func:`release_pages` trims the heap too.
    """
    global _THRESHOLD_SET, _TRIM
    if _THRESHOLD_SET or not SUPPORTED:
        return
    _THRESHOLD_SET = True
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt, _TRIM = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 1 << 20)
    # Setting the mmap threshold also pins the trim threshold at its 128 KiB default: the heap's top would then be
    # given back and faulted in again all through a read (a third of its system time). release_pages trims instead.
    mallopt(m_trim_threshold, TRIM_THRESHOLD_BYTES)


_THRESHOLD_SET = False
#: Free bytes at the heap's top that malloc keeps rather than trims on each free (release_pages trims them all).
TRIM_THRESHOLD_BYTES = 32 << 20
_TRIM: Any = None  # glibc's malloc_trim, once large_blocks_returned_on_free() has run


def release_pages() -> None:
    """Drop every mapped column's pages from this process's resident set (their contents stay in the file); and,
    for big traces, the free pages of malloc's heap (the small blocks of a stage that are freed stay in the heap,
    interleaved with live ones, until it is trimmed). Any thread may call it."""
    with _MAPS_LOCK:
        maps = list(_MAPS)
    for m in maps:
        if not m.closed:
            m.madvise(mmap.MADV_DONTNEED)
    if _TRIM is not None:
        _TRIM(0)


def gather(column: np.ndarray, rows: np.ndarray, block_rows: int = 1 << 20) -> np.ndarray:
    """``column[rows]``, a block of rows at a time, giving back a mapped column's pages after each block: however
    far the rows spread over a big trace's column, the resident set holds one block's pages of it.

    Rows in ascending order are also cut where they pass each ``block_rows`` rows of the column: a read maps the
    pages around it too (the kernel's fault-around, up to 64 KB), so a few thousand rows spread over a column
    would otherwise map most of it at once."""
    out = np.empty(rows.size, dtype=column.dtype)
    if rows.size == 0:
        return out
    cuts = np.arange(0, rows.size, block_rows)
    if rows.size > 1 and column.size > block_rows and bool((rows[1:] >= rows[:-1]).all()):
        cuts = np.union1d(cuts, np.searchsorted(rows, np.arange(block_rows, column.size, block_rows)))
    for a, b in zip(cuts.tolist(), [*cuts[1:].tolist(), rows.size], strict=True):
        out[a:b] = column[rows[a:b]]
        release_pages_of(column)
    return out


def rows_where(n: int, test: Callable[[int, int], np.ndarray], *columns: np.ndarray,
               block_rows: int = 1 << 20) -> np.ndarray:
    """The positions among ``n`` rows where ``test(lo, hi)``, a mask of rows ``lo`` to ``hi``, holds: a block of
    rows at a time, giving back the pages of the mapped ``columns`` the test reads after each block."""
    parts = [np.empty(0, dtype=np.int64)]
    for lo in range(0, n, block_rows):
        parts.append(lo + np.flatnonzero(test(lo, min(lo + block_rows, n))))
        release_pages_of(*columns)
    return np.concatenate(parts)


def release_pages_of(*columns: np.ndarray) -> None:
    """Drop the pages of the mapped columns among ``columns`` (views of them included) from the resident set: what
    a thread that fills a column gives back as it goes, without touching the columns other threads are filling."""
    for c in columns:
        base: Any = c
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview):  # np.frombuffer's base
            base = base.obj
        if isinstance(base, mmap.mmap) and not base.closed:
            base.madvise(mmap.MADV_DONTNEED)


def mapped_bytes() -> int:
    """Bytes of all live mapped columns, resident or not."""
    with _MAPS_LOCK:
        maps = list(_MAPS)
    return sum(len(m) for m in maps if not m.closed)
