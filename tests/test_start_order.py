"""Ops ordered by start, the longer first among those that start together: a bucket of starts at a time (big
traces) is the order of the two whole sorts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.ingest import kineto, start_order
from dnnprof.model.mapped_columns import mapped_column
from test_kineto_stream import assert_same_profile

NEVER = 1 << 62


def _two_sorts(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    order = np.argsort(-dur, kind="stable")
    return order[np.argsort(start[order], kind="stable")]


def _cases(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(120):
        n = int(rng.integers(0, 2500))
        start = [rng.integers(0, 40, n).astype(float),  # many ties
                 np.sort(rng.random(n)),  # already in order
                 np.full(n, 7.0),  # every op starts together
                 rng.random(n) * 1e9][trial % 4]
        dur = rng.integers(0, 4, n).astype(float)
        if n and trial % 5 == 0:
            start[rng.integers(0, n, 4)] = np.inf
            start[:2] = -0.0
            dur[::3] = -0.0
        out.append((start, dur))
    return out


@pytest.mark.parametrize(("rows_per_bucket", "block_rows"), [(1, 1), (3, 7), (64, 100), (1 << 20, 1 << 20)])
def test_buckets_give_the_order_of_the_two_sorts(rows_per_bucket: int, block_rows: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_order, "BUCKET_ROWS", 0)
    monkeypatch.setattr(start_order, "ROWS_PER_BUCKET", rows_per_bucket)
    monkeypatch.setattr(start_order, "_BLOCK_ROWS", block_rows)
    for start, dur in _cases(rows_per_bucket):
        got = start_order.start_order(start, dur)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _two_sorts(start, dur))


def test_below_the_bucket_size_the_two_sorts() -> None:
    for start, dur in _cases(1):
        got = start_order.start_order(start, dur)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _two_sorts(start, dur))


def test_mapped_columns_are_read_as_arrays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_order, "BUCKET_ROWS", 0)
    monkeypatch.setattr(start_order, "ROWS_PER_BUCKET", 500)
    start, dur = _cases(3)[0]
    mapped_start = mapped_column(tmp_path, np.dtype(np.float64), start.size, 0)
    mapped_dur = mapped_column(tmp_path, np.dtype(np.float64), dur.size, 0)
    mapped_start[:], mapped_dur[:] = start, dur
    np.testing.assert_array_equal(start_order.start_order(mapped_start, mapped_dur), _two_sorts(start, dur))


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.parent.name)
def test_a_real_trace_read_with_small_buckets_is_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = kineto._read_profile(path, None, spill_min_bytes=NEVER)
    monkeypatch.setattr(start_order, "BUCKET_ROWS", 0)
    monkeypatch.setattr(start_order, "ROWS_PER_BUCKET", 1 << 9)  # the fixtures' thousands of ops in many buckets
    monkeypatch.setattr(start_order, "_BLOCK_ROWS", 1 << 10)
    assert_same_profile(whole, kineto._read_profile(path, None, spill_min_bytes=0))
    assert_same_profile(whole, kineto._read_profile(path, None, spill_min_bytes=NEVER))
