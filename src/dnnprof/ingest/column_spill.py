"""Columns of a trace being read, appended to files as the chunks arrive (a category's chunks held until they come
to a megabyte, then written a column at a time), read back one column at a time.

A big trace's columns then do not sit in memory until the end of the read: each category's column is one raw
file (``<category>.<column>.bin``, native byte order) in a private folder, and building a table loads one of its
columns at a time, mapped from the files (:mod:`dnnprof.model.mapped_columns`), so a column read whole takes
pages the caller gives back. The folder belongs to the read and goes with it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import IO, Any

import numpy as np

from dnnprof.model.mapped_columns import mapped_column, mapped_file, release_pages_of

#: Columns holding local string ids (renumbered when another reader's columns are appended).
NAME_COLUMNS = ("name", "module", "stack", "dims")
_COPY_ROWS = 1 << 20  # rows per block when renumbering another reader's names or putting a table's column together
#: A category's chunks are held until they come to this many bytes, then written one column at a time: one write
#: per column and block rather than per chunk (a chunk's columns are a few KB each).
_FLUSH_BYTES = 1 << 20


class SpilledColumns:
    """Per-category columns on disk (the last megabyte or so of each category held in memory until written), in the
    order they were appended. Every chunk of a category has the same columns, of the same types."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.layout: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}  # category → column → (dtype, row shape)
        self.rows: dict[str, int] = {}
        self._files: dict[tuple[str, str], IO[bytes]] = {}
        self._held: dict[str, list[dict[str, np.ndarray]]] = {}  # per category, chunks not written yet
        self._held_bytes: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        self.close()
        return {"folder": self.folder, "layout": self.layout, "rows": self.rows}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._files, self._held, self._held_bytes = {}, {}, {}

    def _path(self, cat: str, col: str) -> Path:
        return self.folder / f"{cat.replace('/', '_')}.{col}.bin"

    def _file(self, cat: str, col: str) -> IO[bytes]:
        f = self._files.get((cat, col))
        if f is None:
            f = self._files[(cat, col)] = self._path(cat, col).open("ab")
        return f

    def append(self, cat: str, cols: dict[str, np.ndarray]) -> None:
        """Append one chunk's columns of category ``cat`` (all of the same length)."""
        layout = {col: (a.dtype.str, a.shape[1:]) for col, a in cols.items()}
        if self.layout.setdefault(cat, layout) != layout:
            raise ValueError(f"{cat}: a chunk's columns {layout} are not the category's {self.layout[cat]}")
        self._held.setdefault(cat, []).append(cols)
        held = self._held_bytes[cat] = self._held_bytes.get(cat, 0) + sum(a.nbytes for a in cols.values())
        self.rows[cat] = self.rows.get(cat, 0) + next(iter(cols.values())).shape[0]
        if held >= _FLUSH_BYTES:
            self._write(cat)

    def _write(self, cat: str) -> None:
        """Write the held chunks of ``cat``, a column at a time."""
        chunks = self._held.pop(cat, [])
        self._held_bytes.pop(cat, None)
        for col in self.layout[cat] if chunks else ():
            parts = [c[col] for c in chunks]
            self._file(cat, col).write(np.ascontiguousarray(parts[0] if len(parts) == 1 else np.concatenate(parts)).data)

    def column(self, cat: str, col: str) -> np.ndarray:
        """The whole column ``col`` of ``cat``, in append order."""
        self._write(cat)
        f = self._files.get((cat, col))
        if f is not None:
            f.flush()
        dtype, shape = self.layout[cat][col]
        return mapped_file(self._path(cat, col), np.dtype(dtype)).reshape(-1, *shape)

    def extend(self, later: SpilledColumns, remap: np.ndarray) -> None:
        """Append ``later``'s columns after this one's, local string ids renumbered through ``remap``."""
        later.close()
        for cat in list(self._held):
            self._write(cat)
        for cat, layout in later.layout.items():
            for col, (dtype, shape) in layout.items():
                self.layout.setdefault(cat, {}).setdefault(col, (dtype, shape))
                out = self._file(cat, col)
                with later._path(cat, col).open("rb") as src:
                    if col not in NAME_COLUMNS:
                        shutil.copyfileobj(src, out, 1 << 20)
                        continue
                    size = np.dtype(dtype).itemsize
                    while block := src.read(_COPY_ROWS * size):
                        out.write(remap[np.frombuffer(block, dtype=np.dtype(dtype))].astype(dtype).data)
            self.rows[cat] = self.rows.get(cat, 0) + later.rows[cat]

    def close(self) -> None:
        for cat in list(self._held):
            self._write(cat)
        for f in self._files.values():
            f.close()
        self._files = {}


class LazyTable:
    """A table's input columns across its categories, loaded from the spill when asked for (``cols["ts"]``) and
    forgotten when popped: the shape of the dict of arrays the in-memory reader builds."""

    def __init__(self, spill: SpilledColumns, cats: list[str]) -> None:
        self._spill, self._cats = spill, cats
        self._keys = list(spill.layout[cats[0]])

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._keys:
            raise KeyError(key)
        parts = [self._spill.column(c, key) for c in self._cats]
        if len(parts) == 1:
            return parts[0]
        row_shape = parts[0].shape[1:]
        values = sum(p.shape[0] for p in parts) * int(np.prod(row_shape, dtype=np.int64))
        out = mapped_column(self._spill.folder, parts[0].dtype, values, 0).reshape(-1, *row_shape)
        row = 0
        for p in parts:
            for lo in range(0, p.shape[0], _COPY_ROWS):  # mapped both: a block's pages at a time
                block = p[lo:lo + _COPY_ROWS]
                out[row:row + block.shape[0]] = block
                row += block.shape[0]
                release_pages_of(p, out)
        return out

    def pop(self, key: str) -> np.ndarray:
        out = self[key]
        self._keys.remove(key)
        return out
