"""A big read's columns on disk: chunks held and written together read back as every chunk in append order."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest import column_spill
from dnnprof.ingest.column_spill import SpilledColumns


def _chunks(seed: int, count: int) -> list[tuple[str, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(0, 40))
        cat = str(rng.choice(["kernel", "cpu_op", "cuda_runtime"]))
        out.append((cat, {"ts": rng.random(n), "name": rng.integers(-1, 5, n).astype(np.int32),
                          "grid": rng.integers(1, 9, (n, 3))}))
    return out


def _expected(chunks: list[tuple[str, dict[str, np.ndarray]]], cat: str, col: str) -> np.ndarray:
    parts = [c[col] for k, c in chunks if k == cat]
    return np.concatenate(parts)


@pytest.mark.parametrize("flush_bytes", [0, 100, 1 << 20])
def test_columns_read_back_in_append_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_bytes: int) -> None:
    monkeypatch.setattr(column_spill, "_FLUSH_BYTES", flush_bytes)
    chunks = _chunks(flush_bytes, 60)
    spill = SpilledColumns(tmp_path / "s")
    for i, (cat, cols) in enumerate(chunks):
        spill.append(cat, {k: v.copy() for k, v in cols.items()})
        if i == 30:  # a column read midway sees every chunk so far, and appending goes on after it
            seen = [c for c in chunks[:31] if c[0] == cat]
            np.testing.assert_array_equal(spill.column(cat, "ts"), _expected(seen, cat, "ts"))
    for cat in {c for c, _ in chunks}:
        assert spill.rows[cat] == sum(c["ts"].size for k, c in chunks if k == cat)
        for col in ("ts", "name", "grid"):
            got = spill.column(cat, col)
            assert got.dtype == chunks[0][1][col].dtype
            np.testing.assert_array_equal(got, _expected(chunks, cat, col))
    spill.close()


@pytest.mark.parametrize("flush_bytes", [0, 1 << 20])
def test_extend_appends_the_later_columns_with_names_renumbered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                flush_bytes: int) -> None:
    monkeypatch.setattr(column_spill, "_FLUSH_BYTES", flush_bytes)
    first, later = _chunks(1, 20), _chunks(2, 20)
    a, b = SpilledColumns(tmp_path / "a"), SpilledColumns(tmp_path / "b")
    for cat, cols in first:
        a.append(cat, cols)
    for cat, cols in later:
        b.append(cat, cols)
    b = pickle.loads(pickle.dumps(b))  # as a helper process hands its columns over: held chunks written first
    remap = np.array([10, 11, 12, 13, 14, -1], dtype=np.int32)
    a.extend(b, remap)
    for cat in {c for c, _ in first + later}:
        np.testing.assert_array_equal(
            a.column(cat, "ts"), np.concatenate([c["ts"] for k, c in first + later if k == cat]))
        names = [c["name"] for k, c in first if k == cat] + [remap[c["name"]] for k, c in later if k == cat]
        np.testing.assert_array_equal(a.column(cat, "name"), np.concatenate(names))
    a.close()


@pytest.mark.parametrize("copy_rows", [1, 3, 1 << 20])
def test_a_table_over_categories_is_their_columns_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             copy_rows: int) -> None:
    monkeypatch.setattr(column_spill, "_COPY_ROWS", copy_rows)
    chunks = _chunks(7, 30)
    spill = SpilledColumns(tmp_path / "s")
    for cat, cols in chunks:
        spill.append(cat, cols)
    cats = ["cpu_op", "kernel", "cuda_runtime"]
    table = column_spill.LazyTable(spill, cats)
    for col in ("ts", "name", "grid"):
        want = np.concatenate([_expected(chunks, c, col) for c in cats])
        np.testing.assert_array_equal(table[col], want)
        np.testing.assert_array_equal(table.pop(col), want)
        assert col not in table
    spill.close()


def test_a_chunk_with_other_columns_is_refused(tmp_path: Path) -> None:
    spill = SpilledColumns(tmp_path / "s")
    spill.append("kernel", {"ts": np.zeros(2), "name": np.zeros(2, dtype=np.int32)})
    with pytest.raises(ValueError, match="kernel: a chunk's columns"):
        spill.append("kernel", {"ts": np.zeros(2)})  # a column missing
    with pytest.raises(ValueError, match="kernel: a chunk's columns"):
        spill.append("kernel", {"ts": np.zeros(2), "name": np.zeros(2, dtype=np.int64)})  # another type
    spill.close()
