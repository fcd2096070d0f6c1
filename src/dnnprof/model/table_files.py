"""One table of a saved profile as a Parquet file, written and read a slice of rows at a time.

A big trace's tables are mapped columns (:mod:`dnnprof.model.mapped_columns`) of tens of millions of rows. Writing
one whole would build the table in Arrow at once and keep every page of its columns resident (a 5 GB trace's
profile took 1.6 GB to save); reading one whole would hold its decoded columns in memory (2.6 GB). Here a table is
written :data:`SLICE_ROWS` rows at a time, one row group each, the columns' pages given back after each; and the
tables of a profile of :data:`MAPPED_MIN_ROWS` rows or more are read a row group at a time into mapped columns,
as the reader fills a big trace's. A smaller profile's tables are read whole into memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.model import load_checks as check
from dnnprof.model.mapped_columns import large_blocks_returned_on_free, release_pages_of
from dnnprof.model.schema import TABLES, empty_table, fill_value

#: Rows written as one row group: at about 100 bytes a row of the ops table, 25 MB of a mapped table's pages.
SLICE_ROWS = 1 << 18
#: From this many rows in all its tables, a profile's tables are read into mapped columns, a row group at a time
#: (about what a 64 MB trace holds, from which the reader maps a trace's tables).
MAPPED_MIN_ROWS = 1 << 18


def write_table(table: dict[str, np.ndarray], path: Path) -> None:
    """Write ``table`` (columns of equal length) to ``path`` as zstd-compressed Parquet, a slice of rows at a time.
    A table without rows is written with its schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(next(iter(table.values()))) if table else 0
    writer = None
    try:
        for a in range(0, max(n, 1), SLICE_ROWS):
            part = pa.table({c: pa.array(v[a:a + SLICE_ROWS]) for c, v in table.items()})
            if writer is None:
                writer = pq.ParquetWriter(path, part.schema, compression="zstd")
            writer.write_table(part)
            del part
            release_pages_of(*table.values())  # a big trace's mapped columns: a slice's pages at a time
    finally:
        if writer is not None:
            writer.close()


def mapped_read(paths: Iterable[Path]) -> bool:
    """Whether tables read from the Parquet files ``paths`` (a profile's) go into mapped columns: when they hold
    :data:`MAPPED_MIN_ROWS` rows in all. A file that cannot be read counts none (its read names the problem)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 0
    for p in paths:
        try:
            rows += pq.ParquetFile(p, memory_map=True).metadata.num_rows
        except (pa.ArrowException, OSError):
            continue
    return rows >= MAPPED_MIN_ROWS


def read_table(name: str, path: Path, error: Callable[[str], Exception], mapped: bool = False
               ) -> dict[str, np.ndarray]:
    """Table ``name`` of the schema from the Parquet file ``path``: the schema's columns the file has, each checked
    and converted to its type; the others filled as unknown. ``error(message)``: the exception raised for a file
    that cannot be read or a column that does not fit (the message names the file and the column). ``mapped``:
    into mapped columns, a row group at a time (:func:`mapped_read`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, memory_map=True)
        n = pf.metadata.num_rows
        present = [c for c in TABLES[name] if c.name in pf.schema_arrow.names]
        mapped = mapped and n > 0
        if mapped:
            large_blocks_returned_on_free()
        # mapped columns start as zeros: only those the file lacks are filled, the others are written once below
        t = empty_table(name, n, mapped=Path(tempfile.gettempdir()) if mapped else None, prefill=not mapped)
        if mapped:
            for c in TABLES[name]:
                if c not in present:
                    t[c.name][:] = fill_value(np.dtype(c.dtype))
                    release_pages_of(t[c.name])
        parts: Any = [pf.read(columns=[c.name for c in present])] if not mapped else \
            (pf.read_row_group(i, columns=[c.name for c in present]) for i in range(pf.num_row_groups))
        at = 0
        for part in parts:
            rows = part.num_rows
            for c in present:
                column = part.column(c.name)
                problem = check.column_problem(column, c.dtype)
                values = None
                if problem is None:
                    values, problem = check.converted(numpy_of(column), c.dtype)
                if problem is not None or values is None:
                    raise error(f"{path}: column {c.name} {problem}")
                if mapped:
                    t[c.name][at:at + rows] = values
                else:
                    t[c.name] = values
            at += rows
            del part
            if mapped:
                release_pages_of(*t.values())
                pa.default_memory_pool().release_unused()  # Arrow's pool keeps what it freed otherwise
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: unreadable Parquet ({check.one_line(e)})") from None
    return t


def read_whole(path: Path, error: Callable[[str], Exception]) -> Any:
    """The Arrow table of the Parquet file ``path``; ``error(message)`` raised when it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, memory_map=True).read()  # lighter than read_table (no dataset layer)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: unreadable Parquet ({check.one_line(e)})") from None


def numpy_of(column: Any) -> np.ndarray:
    """A numeric Arrow column (integers, floats or booleans) as numpy, as ``to_numpy(zero_copy_only=False)`` gives
    it, without pyarrow's conversion, which imports pandas (40 MB and 0.4 s for a saved profile): fixed-width values
    are viewed in place, booleans unpacked from their bits; nulls read as NaN (integers with nulls become float64)."""
    import pyarrow as pa

    parts = []
    for chunk in column.chunks:
        typ, n, at = chunk.type, len(chunk), chunk.offset
        if pa.types.is_boolean(typ) and chunk.null_count:
            parts.append(chunk.to_numpy(zero_copy_only=False))  # objects with None: the rare case, as pyarrow has it
            continue
        validity, data = chunk.buffers()[:2]
        dtype = _dtype(typ)
        if n == 0:
            values = np.empty(0, dtype=dtype)
        elif dtype.kind == "b":
            values = _bits(data, at, n)
        else:
            values = np.frombuffer(data, dtype=dtype, count=n, offset=at * dtype.itemsize)
            if chunk.null_count:
                values = values.astype(dtype if dtype.kind == "f" else np.float64)  # a copy: the nulls are NaN
                values[~_bits(validity, at, n)] = np.nan
        parts.append(values)
    if not parts:
        return np.empty(0, dtype=_dtype(column.type))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _dtype(typ: Any) -> np.dtype:
    """The numpy type of a numeric Arrow type."""
    import pyarrow as pa

    if pa.types.is_boolean(typ):
        return np.dtype(bool)
    kind = "f" if pa.types.is_floating(typ) else "i" if pa.types.is_signed_integer(typ) else "u"
    return np.dtype(f"{kind}{typ.bit_width // 8}")


def _bits(buffer: Any, at: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap from bit ``at``, as booleans."""
    if n == 0:
        return np.empty(0, dtype=bool)
    first = at // 8
    raw = np.frombuffer(buffer, dtype=np.uint8, count=(at + n + 7) // 8 - first, offset=first)
    return np.unpackbits(raw, bitorder="little")[at % 8:at % 8 + n].view(bool)
