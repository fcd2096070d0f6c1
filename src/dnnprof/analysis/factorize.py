"""Group keys as small integer codes without sorting every row: the analysis of a big trace groups millions of
kernels by layer, source line and launch configuration, and ``np.unique`` over an object array (a Python
comparison per step of the sort) or over rows of a 2-D array (a sort of structured records) costs more than the
rest of the grouping. Both helpers give exactly what ``np.unique`` would, so results do not change."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dnnprof.model.mapped_columns import release_pages_of


def unique_strings(ids: np.ndarray, lut: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(lut[ids], return_inverse=True)`` of string ids, in O(rows + strings) plus a sort of the
    distinct strings only. ``lut``: object array of str; an id of -1 stands for ``lut[-1]``. Equal strings under
    different ids share one code, as ``np.unique`` would give them. The codes are 32-bit (``np.unique``'s are
    64-bit): a big trace's kernels are millions of rows."""
    ids = np.asarray(ids, dtype=np.int64)
    at = np.where(ids < 0, len(lut) - 1, ids)
    present = np.flatnonzero(np.bincount(at, minlength=len(lut)))
    uniq, remap = np.unique(lut[present], return_inverse=True)
    code_of = np.full(len(lut), -1, dtype=np.int32 if len(lut) <= 2**31 else np.int64)  # codes of kernels: 4 B
    code_of[present] = remap.reshape(-1)
    return uniq, code_of[at]


def row_keys(columns: Iterable[np.ndarray]) -> np.ndarray:
    """One int64 per row, equal for two rows exactly when every column is equal (a mixed-radix number of the
    columns' offsets from their minimum; when the radix would overflow, the key so far is renumbered densely).
    Keys order rows as their columns do, the first column first. ``columns`` is read once, in order: a generator
    can make each column as it is needed."""
    key = np.zeros(0, dtype=np.int64)
    span = 1
    for i, col in enumerate(columns):
        c = np.asarray(col).astype(np.int64)  # a copy, made relative in place: one temporary of the rows' length
        release_pages_of(col)  # a big trace's mapped column: its pages, once copied
        if i == 0:
            key = np.zeros(c.size, dtype=np.int64)
        if c.size == 0:
            continue
        lo = int(c.min())
        radix = int(c.max()) - lo + 1
        if radix == 1:  # a constant column (block_z, grid_z): nothing to tell rows apart
            continue
        c -= lo
        if radix >= 2**31:
            _, c = np.unique(c, return_inverse=True)
            c, radix = c.reshape(-1).astype(np.int64), int(c.max()) + 1
        if span * radix >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key, span = key.reshape(-1).astype(np.int64), int(key.max()) + 1
        key *= radix
        key += c
        del c
        span *= radix
    return key
