"""SQL over the canonical tables of one or several profiles, with DuckDB (embedded, no server).

Every table of ``schema.TABLES`` is a view of the same name holding the rows of every profile, told apart by a
``run`` column (the run's label) and numbered by ``row`` within their run (what ``*_row`` columns point at), with the ``*_id`` string columns also decoded as text columns without the suffix
(``name_id`` → ``name``) and the enumerations as ``*_label`` columns (``memcpy.kind_label`` = ``HtoD`` …).
A ``runs`` view lists each run's label and path. docs/query.md is generated from :func:`query_schema_markdown`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.model import schema
from dnnprof.model.profile import Profile

#: ``*_id`` columns that are numbers, not string ids.
NOT_STRINGS = frozenset({"external_id", "fwd_thread_id", "graph_id"})
#: Enumerated columns per table and their labels (decoded as ``<column>_label``).
ENUMS: dict[str, dict[str, tuple[str, ...]]] = {
    "memcpy": {"kind": schema.MEMCPY_KINDS, "src_mem": schema.MEMORY_KINDS, "dst_mem": schema.MEMORY_KINDS},
    "memset": {"dst_mem": schema.MEMORY_KINDS},
    "ops": {"category": schema.OP_CATEGORIES},
    "runtime": {"api_kind": schema.API_KINDS},
    "steps": {"source": schema.STEP_SOURCES},
    "memory_events": {"device_type": schema.DEVICE_TYPES},
}


def string_columns(table: str) -> list[str]:
    """The ``*_id`` columns of ``table`` that index the profile's strings."""
    return [c.name for c in schema.TABLES[table] if c.name.endswith("_id") and c.name not in NOT_STRINGS]


def connect(runs: list[tuple[str, str, Profile]]) -> Any:
    """A DuckDB connection with the views of ``runs`` (label, path, profile); labels must be unique."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    con.register("_runs", pa.table({"run": [r[0] for r in runs], "path": [r[1] for r in runs]}))
    con.execute("CREATE VIEW runs AS SELECT * FROM _runs")
    for name in schema.TABLES:
        parts: list[Any] = []
        for label, _path, prof in runs:
            t = prof.tables[name]
            n = int(next(iter(t.values())).shape[0])
            cols: dict[str, Any] = {"run": pa.array([label] * n, type=pa.string()),
                                    "row": pa.array(np.arange(n, dtype=np.int32)), **dict(t)}
            for c in string_columns(name):
                cols[c[:-3]] = pa.array(prof.names(t[c]), type=pa.string(), mask=t[c] < 0)
            for c, labels in ENUMS.get(name, {}).items():
                lut = np.asarray([*labels, "unknown"], dtype=object)
                codes = t[c].astype(np.int64)
                cols[f"{c}_label"] = pa.array(lut[np.where((codes >= 0) & (codes < len(labels)), codes,
                                                           len(labels))], type=pa.string())
            parts.append(pa.table(cols))
        con.register(f"_{name}", pa.concat_tables(parts) if parts else pa.table({}))
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}")
    return con


def query_schema_markdown() -> str:
    """The views :func:`connect` makes, as Markdown (docs/query.md's schema part)."""
    lines = ["| view | columns beside the stored ones (docs/profile-schema.md) |", "|---|---|"]
    for name in schema.TABLES:
        extra = ["`run`", "`row`"] + [f"`{c[:-3]}`" for c in string_columns(name)]
        extra += [f"`{c}_label`" for c in ENUMS.get(name, {})]
        lines.append(f"| `{name}` | {', '.join(extra)} |")
    lines.append("| `runs` | `run`, `path`: one row per input |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(query_schema_markdown(), end="")
