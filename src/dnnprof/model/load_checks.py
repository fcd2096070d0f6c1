"""What :meth:`dnnprof.model.profile.Profile.load` checks before trusting a saved profile.

A saved profile is files on a disk: a file may be missing, cut short, edited or written by something else. Every
check here returns the first problem as one line (the file and what is wrong), or None; ``Profile.load`` raises
it as a :class:`~dnnprof.model.profile.ProfileError`. Checked: the ``profile.json`` document's shape, each
column's type (a number column must be numbers, without nulls), the strings (text, without nulls), every link
between tables (``*_row`` to a row of its table, ``*_id`` to a string) and every code column (an op's category, a
step's source: an index into one of the schema's name lists), so the analysis never indexes past an end.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.model.mapped_columns import release_pages_of

#: Row links: column → the table whose rows it counts (-1 = none).
ROW_LINKS = {"launch_row": "runtime", "op_row": "ops", "parent_row": "ops", "fwd_row": "ops",
             "kernel_row": "kernels"}
#: ``*_id`` columns that are ids from the trace, not indexes into the strings.
NOT_STRING_IDS = frozenset({"external_id", "fwd_thread_id", "graph_id"})


def one_line(error: BaseException | str) -> str:
    """An exception's message on one line (pyarrow's run over several)."""
    return " ".join(str(error).split())


def document_problem(doc: Any) -> str | None:
    """The first problem of a ``profile.json`` document, or None."""
    if not isinstance(doc, dict):
        return f"is a JSON {type(doc).__name__}, not an object"
    if not isinstance(doc.get("meta", {}), dict):
        return "'meta' is not an object"
    devices = doc.get("devices", [])
    if not isinstance(devices, list):
        return "'devices' is not a list"
    for i, d in enumerate(devices):
        problem = device_problem(d)
        if problem:
            return f"device {i}: {problem}"
    return meta_problem(doc.get("meta", {}))


def device_problem(d: Any) -> str | None:
    """Why ``d`` cannot be a :class:`~dnnprof.model.device.DeviceInfo`, or None."""
    from dnnprof.model.device import DeviceInfo

    if not isinstance(d, dict):
        return f"a JSON {type(d).__name__}, not an object"
    for f in fields(DeviceInfo):
        if f.name not in d:
            if f.default is MISSING and f.default_factory is MISSING:
                return f"no {f.name}"
            continue
        v = d[f.name]
        want = str(f.type)
        if want == "int" and not (isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63):
            return f"{f.name} is {v!r:.40}, not an integer"
        if want == "str" and not isinstance(v, str):
            return f"{f.name} is {v!r:.40}, not text"
    return None


#: Metadata keys the analysis reads, with the JSON type each must have when present.
_META_TYPES: dict[str, tuple[type, ...]] = {
    "source": (dict,), "base_time_ns": (int,), "ranks": (list,), "distributed": (dict,), "device_vendor": (str,),
    "event_counts": (dict,), "step_source": (str,), "capture": (dict,), "command": (list, str), "per_rank": (list,),
}


def meta_problem(meta: dict[str, Any]) -> str | None:
    for key, types in _META_TYPES.items():
        if key in meta and meta[key] is not None and (not isinstance(meta[key], types) or isinstance(meta[key], bool)):
            return f"meta.{key} is {meta[key]!r:.40}, not a JSON {'/'.join(_json_name(t) for t in types)}"
    ranks = meta.get("ranks") or []
    if not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31 for r in ranks):
        return "meta.ranks holds something other than rank numbers"
    base = meta.get("base_time_ns")
    if isinstance(base, int) and not -(2**63) <= base < 2**63:
        return "meta.base_time_ns is beyond the 64-bit range"
    notes = (meta.get("source") or {}).get("notes")
    if notes is not None and not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        return "meta.source.notes is not a list of text"
    counts = meta.get("event_counts") or {}
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63 for n in counts.values()):
        return "meta.event_counts holds something other than counts"
    for i, m in enumerate(meta.get("per_rank") or []):
        problem = meta_problem(m) if isinstance(m, dict) else "not an object"
        if problem:
            return f"meta.per_rank[{i}]: {problem}"
    return None


def meta_without_nulls(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (checked by :func:`meta_problem`) with the keys the analysis reads left out where they are null, at
    the top, in ``per_rank`` and in ``source.notes``: null reads as absent, the way every reader takes these keys
    (``meta.get("source", {…})``)."""
    out = {k: v for k, v in meta.items() if not (k in _META_TYPES and v is None)}
    if isinstance(out.get("per_rank"), list):
        out["per_rank"] = [meta_without_nulls(m) if isinstance(m, dict) else m for m in out["per_rank"]]
    source = out.get("source")
    if isinstance(source, dict) and "notes" in source and source["notes"] is None:
        out["source"] = {k: v for k, v in source.items() if k != "notes"}
    return out


def _json_name(t: type) -> str:
    return {dict: "object", list: "list", str: "string", int: "integer"}.get(t, t.__name__)


def column_problem(column: Any, dtype: str) -> str | None:
    """Why a Parquet column cannot be read as ``dtype``, or None."""
    import pyarrow as pa

    typ = column.type
    numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
    if not numeric:
        return f"is {typ}, not numbers ({dtype})"
    if column.null_count and not dtype.startswith("float"):
        return f"has {column.null_count} nulls"
    return None


def converted(values: np.ndarray, dtype: str) -> tuple[np.ndarray | None, str | None]:
    """``values`` as ``dtype``, or (None, problem) when some do not fit (a float with a fraction, out of range)."""
    target = np.dtype(dtype)
    if target.kind in "iu" and values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.all() or not np.array_equal(values, np.round(values)):
            return None, "holds values that are not whole numbers"
    if target.kind in "iu" and values.dtype.kind in "iuf" and values.size:
        info = np.iinfo(target)
        lo, hi = values.min(), values.max()
        if lo < info.min or hi > info.max:
            return None, f"holds values beyond {dtype} ({lo}…{hi})"
    return values.astype(target, copy=False), None


def strings_problem(column: Any) -> str | None:
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return f"column value is {column.type}, not text"
    if column.null_count:
        return f"column value has {column.null_count} null strings"
    try:  # a flipped byte in the file can leave text that is not UTF-8 (pyarrow reads it unchecked)
        for chunk in column.chunks:
            chunk.validate(full=True)
    except pa.ArrowInvalid as e:
        return f"column value is not valid text ({' '.join(str(e).split())})"
    return None


def link_problem(tables: dict[str, dict[str, np.ndarray]], strings: int, folder: Path,
                 missing: list[str]) -> str | None:
    """The first link that points past the end of what it refers to, or None."""
    for name, t in tables.items():
        for col, values in t.items():
            if not values.size:
                continue
            if col.endswith("_row") and col in ROW_LINKS:
                target = ROW_LINKS[col]
                size = int(next(iter(tables[target].values())).size) if tables.get(target) else 0
            elif col.endswith("_id") and col not in NOT_STRING_IDS:
                target, size = "strings", strings
            else:
                continue
            lo, hi = int(values.min()), int(values.max())
            release_pages_of(values)  # a big table's mapped column: read whole once
            if lo < -1 or hi >= size:
                bad = hi if hi >= size else lo
                gone = " (the file is missing)" if target in missing else ""
                return (f"{folder / (name + '.parquet')}: {col} refers to row {bad} of {target}.parquet, which has "
                        f"{size} rows{gone}")
    return None



def code_problem(tables: dict[str, dict[str, np.ndarray]], folder: Path) -> str | None:
    """The first code column (its schema text says ``index into NAMES``, NAMES a list of the schema) holding a
    value that is neither an index of that list nor -1 (unknown), or None."""
    from dnnprof.model import schema

    for name, t in tables.items():
        for c in schema.TABLES.get(name, ()):
            values = t.get(c.name)
            marker = "index into "
            if values is None or not values.size or marker not in c.doc:
                continue
            names = getattr(schema, c.doc.split(marker, 1)[1].split()[0].strip("(),."), None)
            if not isinstance(names, tuple):
                continue
            lo, hi = int(values.min()), int(values.max())
            release_pages_of(values)
            if lo < -1 or hi >= len(names):  # -1: unknown (a memory event without its device type)
                bad = hi if hi >= len(names) else lo
                return (f"{folder / (name + '.parquet')}: {c.name} holds {bad}, which is none of the "
                        f"{len(names)} codes it may hold (0 to {len(names) - 1}, or -1 for unknown)")
    return None
