"""What torch.distributed records about each collective → the ``collectives`` table.

torch ≥ 2.1 puts the collective's description on its ``record_param_comms`` host op and (with NCCL) on its kernel:
``Collective name``, ``Process Group Name``/``Description``/``Ranks``, ``Group size``, ``In``/``Out msg nelems``,
``dtype``, and in newer versions ``Seq`` (the collective's number in its group). Older traces, and gloo runs, carry
none of it: their collectives have no row here, and the analysis falls back to kernel and span names.

:class:`CollectiveArgs` gathers those events' args as the chunks are read (in file order, per category), and
:meth:`CollectiveArgs.rows_of` finds each one's row once its table is sorted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.model.profile import Profile
from dnnprof.model.schema import empty_table

#: Bytes per element of torch's scalar types, as ``c10::toString(ScalarType)`` spells them in ``dtype``.
DTYPE_BYTES = {
    "Bool": 1, "Byte": 1, "Char": 1, "UInt8": 1, "Int8": 1, "QInt8": 1, "QUInt8": 1, "Float8_e4m3fn": 1,
    "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1,
    "Short": 2, "UInt16": 2, "Half": 2, "BFloat16": 2, "ComplexHalf": 4,
    "Int": 4, "UInt32": 4, "Float": 4, "QInt32": 4,
    "Long": 8, "UInt64": 8, "Double": 8, "ComplexFloat": 8, "ComplexDouble": 16,
}
_FIELDS = ("name", "pg_name", "pg_desc", "pg_ranks", "group_size", "seq", "in_nelems", "out_nelems", "dtype")


def _text(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _count(v: Any) -> int:
    """A non-negative int from an int or numeric string, else -1."""
    if isinstance(v, bool) or v is None:
        return -1
    try:
        x = int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return x if 0 <= x < 2**63 else -1


class CollectiveArgs:
    """The collective args of the events seen so far: per category, their position among that category's events
    (file order) and their fields."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}  # events per category so far
        self.found: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}

    def add(self, cat: str, args: list[Any]) -> None:
        """One chunk's events of category ``cat`` (their args, ``None``-valued fields where absent)."""
        base = self.seen.get(cat, 0)
        self.seen[cat] = base + len(args)
        hits = [(base + i, a) for i, a in enumerate(args) if a.coll_name is not None]
        if hits:
            self.found.setdefault(cat, []).extend(
                (i, (_text(a.coll_name), _text(a.pg_name), _text(a.pg_desc), _text(a.pg_ranks), _count(a.group_size),
                     _count(a.seq), _count(a.in_nelems), _count(a.out_nelems), _text(a.dtype))) for i, a in hits)

    def extend(self, later: CollectiveArgs) -> None:
        """Append ``later``'s, the events that follow these in the file."""
        for cat, rows in later.found.items():
            base = self.seen.get(cat, 0)
            self.found.setdefault(cat, []).extend((base + i, f) for i, f in rows)
        for cat, n in later.seen.items():
            self.seen[cat] = self.seen.get(cat, 0) + n

    def rows_of(self, counts: list[tuple[str, int]], order: np.ndarray) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """The sorted table's rows of the collectives among its categories (``counts``: category and rows, in the
        order the table concatenated them; ``order``: the sort, table row → concatenated position), and their
        fields."""
        positions: list[int] = []
        fields: list[tuple[Any, ...]] = []
        offset = 0
        for cat, n in counts:
            for i, f in self.found.pop(cat, []):
                positions.append(offset + i)
                fields.append(f)
            offset += n
        if not positions:
            return np.empty(0, dtype=np.int64), []
        want = np.asarray(positions, dtype=np.int64)
        rows = np.flatnonzero(np.isin(order, want))  # one pass over the table; no inverse permutation kept
        at = order[rows]
        srt = np.argsort(at, kind="stable")
        found = rows[srt][np.searchsorted(at[srt], want)]
        by_row = np.argsort(found, kind="stable")  # the table in its rows' (time) order
        return found[by_row], [fields[i] for i in by_row.tolist()]


def collectives_table(profile: Profile, rank: int, kernel: tuple[np.ndarray, list[tuple[Any, ...]]],
                      op: tuple[np.ndarray, list[tuple[Any, ...]]]) -> dict[str, np.ndarray]:
    """The ``collectives`` table: the kernels' rows, then the ops', each with its fields interned into ``profile``."""
    n_k, n_o = kernel[0].size, op[0].size
    t = empty_table("collectives", n_k + n_o)
    if not n_k + n_o:
        return t
    t["rank"][:] = rank
    t["kernel_row"][:n_k] = kernel[0]
    t["op_row"][n_k:] = op[0]
    cols = list(zip(*(kernel[1] + op[1]), strict=True))
    f = dict(zip(_FIELDS, cols, strict=True))
    for k, col in (("name_id", "name"), ("pg_name_id", "pg_name"), ("pg_desc_id", "pg_desc"),
                   ("pg_ranks_id", "pg_ranks"), ("dtype_id", "dtype")):
        t[k][:] = [-1 if v is None else profile.intern(v) for v in f[col]]
    for k in ("group_size", "seq", "in_nelems", "out_nelems"):
        t[k][:] = f[k]
    size = np.array([DTYPE_BYTES.get(v or "", -1) for v in f["dtype"]], dtype=np.int64)
    for k in ("in", "out"):
        n = t[f"{k}_nelems"]
        t[f"{k}_bytes"][:] = np.where((n >= 0) & (size > 0), n * size, -1)
    return t
