"""The grouping fast paths give exactly what ``np.unique`` gives, on real kernels and on edge cases."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dnnprof.analysis.attribution import attribute
from dnnprof.analysis.factorize import row_keys, unique_strings
from dnnprof.analysis.kernel_summary import _dominant, _dominant_code, group_by, group_by_codes
from dnnprof.ingest.kineto import read_kineto

DATA = Path(__file__).resolve().parent / "data"
TRACE = DATA / "deepspeech_train_h200"


def _reference(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inv = np.unique(values, return_inverse=True)
    return uniq, inv.reshape(-1)


def test_unique_strings_matches_np_unique_with_duplicates_and_missing() -> None:
    lut = np.array(["b", "a", "", "b", "zz", ""], dtype=object)  # "b" under two ids, "" also as id -1
    ids = np.array([0, 3, -1, 2, 1, 0, -1, 4, 3])
    uniq, inv = unique_strings(ids, lut)
    ref_u, ref_inv = _reference(lut[np.where(ids < 0, len(lut) - 1, ids)])
    assert uniq.tolist() == ref_u.tolist() == ["", "a", "b", "zz"]
    assert inv.tolist() == ref_inv.tolist()


def test_unique_strings_of_nothing() -> None:
    uniq, inv = unique_strings(np.empty(0, dtype=np.int64), np.array([""], dtype=object))
    assert uniq.size == 0 and inv.size == 0


def test_row_keys_equal_exactly_when_rows_equal() -> None:
    rng = np.random.default_rng(0)
    cols = [rng.integers(-3, 4, 500), rng.integers(0, 2, 500),
            rng.integers(-2**62, 2**62, 500) // 2**40 * 2**40,  # wide column: renumbered before it is combined
            rng.integers(0, 3, 500)]
    keys = row_keys(cols)
    _, by_rows = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    _, by_keys = np.unique(keys, return_inverse=True)
    # the same partition of the rows
    pairs = set(zip(by_rows.reshape(-1).tolist(), by_keys.reshape(-1).tolist(), strict=True))
    assert len(pairs) == len(set(by_rows.reshape(-1).tolist())) == len(set(by_keys.reshape(-1).tolist()))


def test_row_keys_order_rows_as_their_columns_and_read_a_generator_once() -> None:
    """Keys sort rows lexicographically, first column first (the kernel summary's ties rest on it), also after a
    renumbering; columns given one at a time by a generator give the same keys."""
    rng = np.random.default_rng(3)
    cols = [rng.integers(-3, 4, 300), rng.integers(-2**62, 2**62, 300) // 2**40 * 2**40, rng.integers(0, 3, 300)]
    keys = row_keys(cols)
    by_key = np.argsort(keys, kind="stable")
    by_cols = np.lexsort(cols[::-1])
    assert np.array_equal(np.stack(cols, 1)[by_key], np.stack(cols, 1)[by_cols])
    made = []

    def one_at_a_time():  # type: ignore[no-untyped-def]
        for c in cols:
            made.append(len(made))
            yield c

    assert np.array_equal(row_keys(one_at_a_time()), keys) and made == [0, 1, 2]
    assert row_keys([]).size == 0 and row_keys(iter([np.empty(0, np.int32)] * 2)).size == 0


def test_row_keys_overflow_of_the_radix_is_renumbered() -> None:
    cols = [np.array([0, 2**30, 5, 0]), np.array([7, 2**30, 7, 7]), np.array([0, 2**30 - 1, 1, 0])]
    keys = row_keys(cols)
    assert keys[0] == keys[3] and len(set(keys.tolist())) == 3


@pytest.mark.skipif(not TRACE.is_dir(), reason="tests/data/deepspeech_train_h200 is absent")
def test_attribution_codes_and_grouping_match_the_object_arrays() -> None:
    trace = next(TRACE.glob("*.json*"))
    profile = read_kineto(trace)
    a = attribute(profile)
    for name in ("layer", "source"):
        uniq, inv = a.codes(name)
        ref_u, ref_inv = _reference(getattr(a, name))
        assert uniq.tolist() == ref_u.tolist() and np.array_equal(inv, ref_inv)
    dur = profile.tables["kernels"]["dur_ns"]
    uniq, inv = a.codes("layer")
    assert group_by_codes(uniq, inv, dur) == group_by(a.layer, dur)
    phases = np.array(["forward", "backward", "optimizer", "other"], dtype=object)
    assert group_by_codes(phases, a.phase, dur) == group_by(phases[a.phase], dur)
    rng = np.random.default_rng(1)
    for _ in range(50):
        rows = np.sort(rng.choice(dur.size, size=int(rng.integers(1, 40)), replace=False))
        w = np.where(rng.random(rows.size) < 0.3, 0.0, dur[rows].astype(np.float64))  # ties by zero weights
        assert _dominant_code(uniq, inv[rows], w) == _dominant(a.layer[rows], w)


@pytest.mark.skipif(not TRACE.is_dir(), reason="tests/data/deepspeech_train_h200 is absent")
def test_kept_codes_cannot_go_stale() -> None:
    a = attribute(read_kineto(next(TRACE.glob("*.json*"))))
    a.codes("layer")
    with pytest.raises(ValueError, match="read-only"):
        a.layer[:] = ""
    b = replace(a, layer=np.full(a.layer.size, "x", dtype=object))
    assert b.codes("layer")[0].tolist() == ["x"] and a.codes("layer")[0].tolist() != ["x"]


@pytest.mark.parametrize("seed", range(30))
def test_dominant_code_by_count_is_the_dominant_by_sort(seed: int) -> None:
    """Ties (equal weights, zero weights, no weight at all) go to the smallest code present, as np.unique's order;
    a code not present never wins, even over negative weights."""
    from dnnprof.analysis.kernel_summary import _dominant_index

    rng = np.random.default_rng(seed)
    codes = rng.integers(2, 6, int(rng.integers(1, 30)))  # codes 0 and 1 never present
    w = rng.choice([0.0, 1.0, 2.0], codes.size) if seed % 3 else np.zeros(codes.size)
    if seed % 5 == 4:
        w = -w - rng.choice([0.0, 3.0], codes.size)  # negative weights (a hand-made table's durations)
    assert _dominant_index(codes, w) == _dominant(codes, w)
    uniq = np.array([f"v{i}" for i in range(6)], dtype=object)
    assert _dominant_code(uniq, codes, w) == _dominant(uniq[codes], w)
