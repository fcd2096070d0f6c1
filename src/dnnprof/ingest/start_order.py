"""The order of a table's rows by start, the longer first among rows that start together, ties in row order.

For a few million rows that is two stable sorts (by −duration, then by start). A big trace's ops are tens of
millions, and those sorts' temporaries (the starts gathered in the first order, the int64 indices of each sort and
mergesort's buffer) came to about 20 bytes a row over the 4-byte order kept. So from :data:`BUCKET_ROWS` rows the
rows are put in buckets by ranges of start (the ranges cut at the quantiles of a sample of the starts) and each
bucket is sorted alone. A bucket holds every row whose start lies in its range, its rows in row order, so sorting
it by (start, −duration) stably and laying the buckets end to end gives the same order as the two sorts.
"""

from __future__ import annotations

import numpy as np

from dnnprof.ingest.row_groups import rows_by_group
from dnnprof.model.mapped_columns import gather, release_pages_of

#: From this many rows the rows are sorted a bucket at a time (below, the two whole sorts are fast and small).
BUCKET_ROWS = 1 << 22
#: Rows per bucket, about (a bucket's temporaries are ~40 bytes a row).
ROWS_PER_BUCKET = 1 << 20
#: Rows read at a time when the buckets are counted and filled.
_BLOCK_ROWS = 1 << 20
#: Starts sampled per bucket to place the cuts.
_SAMPLES_PER_BUCKET = 256


def start_order(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Row positions ordered by ``start``, then by ``dur`` from the longest, then by position: int32 when the
    rows are fewer than 2**31. ``start`` and ``dur`` may be mapped columns: read a block at a time, their pages
    given back. A bucket holds every row of its range of starts: when most rows start together, it is most of them
    (correct still, with a bucket's temporaries for that many rows)."""
    n = start.shape[0]
    index = np.int32 if n < 2**31 else np.int64
    if n < max(BUCKET_ROWS, 2):
        order = np.argsort(np.negative(dur), kind="stable").astype(index)
        release_pages_of(dur)
        return order[np.argsort(gather(start, order), kind="stable")]
    cuts = _cuts(start, -(-n // ROWS_PER_BUCKET))

    def bucket(lo: int, hi: int) -> np.ndarray:
        out = np.searchsorted(cuts, start[lo:hi], side="right")
        release_pages_of(start)
        return out

    order, ends = rows_by_group(n, cuts.size + 1, bucket, _BLOCK_ROWS)
    for k in range(ends.size):  # each bucket by (start, −duration), stably
        rows = order[ends[k - 1] if k else 0:ends[k]]
        if rows.size > 1:
            rows[:] = rows[np.lexsort((np.negative(dur[rows]), start[rows]))]
        release_pages_of(start, dur)
    return order


def _cuts(start: np.ndarray, buckets: int) -> np.ndarray:
    """Up to ``buckets - 1`` distinct starts, ascending, at the quantiles of an even sample of ``start``."""
    n = start.shape[0]
    step = max(1, n // (buckets * _SAMPLES_PER_BUCKET))
    sample = np.sort(start[::step])
    release_pages_of(start)
    at = (np.arange(1, buckets) * sample.size) // buckets
    return np.unique(sample[at])
