"""Rows grouped by a small code (a thread, a range of starts), in row order within each group, without a sort of
every row: a big trace's ops are tens of millions, and ``np.argsort`` of a column gives 8-byte positions and needs
a buffer of half as many. Here the codes are computed a block of rows at a time, twice (to count, then to place),
and the only column of every row is the 4-byte positions returned.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def rows_by_group(n: int, groups: int, codes: Callable[[int, int], np.ndarray],
                  block_rows: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """(rows, ends): the positions ``0..n-1`` ordered by group, ascending within a group (int32 when ``n`` <
    2**31), and where each group's positions end in ``rows`` (group ``k`` is ``rows[ends[k-1]:ends[k]]``).

    ``codes(lo, hi)`` gives the group, in ``range(groups)``, of rows ``lo`` to ``hi``; it is called twice per
    block."""
    sizes = np.zeros(groups, dtype=np.int64)
    for lo in range(0, n, block_rows):
        sizes += np.bincount(codes(lo, min(lo + block_rows, n)), minlength=groups)
    ends = np.cumsum(sizes)
    rows = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    filled = ends - sizes  # where each group's next row goes
    for lo in range(0, n, block_rows):
        code = codes(lo, min(lo + block_rows, n))
        by_group = np.argsort(code, kind="stable")
        counts = np.bincount(code, minlength=groups)
        rows[np.repeat(filled - (np.cumsum(counts) - counts), counts) + np.arange(code.size)] = by_group + lo
        filled += counts
    return rows, ends
