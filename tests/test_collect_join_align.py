"""The launch-sequence alignment behind the attribution join: correct (a longest common subsequence where the
sequences differ in few places) and usable on real step sizes (tens of thousands of runtime calls)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest import join

DATA = Path(__file__).parent / "data" / "join" / "deepspeech2_runtime_steps.json.gz"


def lcs_length(a: list[int], b: list[int]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def valid(a: list, b: list, ia: np.ndarray, ib: np.ndarray) -> bool:
    return (len(ia) == len(ib) and all(a[i] == b[j] for i, j in zip(ia, ib, strict=True))
            and bool(np.all(np.diff(ia) > 0)) and bool(np.all(np.diff(ib) > 0)))


@pytest.mark.parametrize("seed", range(5))
def test_myers_finds_a_longest_common_subsequence(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        k = rng.randint(1, 4)
        a = [rng.randint(0, k) for _ in range(rng.randint(1, 25))]
        b = [rng.randint(0, k) for _ in range(rng.randint(1, 25))]
        ia, ib = join._myers(np.array(a), np.array(b), 100)
        assert valid(a, b, np.array(ia), np.array(ib)) and len(ia) == lcs_length(a, b), (a, b)


def test_myers_gives_up_past_its_edit_budget() -> None:
    assert join._myers(np.arange(50), np.arange(50, 100), 10) is None


def test_prefix_and_suffix_are_matched_as_they_are() -> None:
    a = list("xxxxabcyyyy")
    b = list("xxxxacbyyyy")
    ia, ib = join.match_sequences(a, b)
    assert valid(a, b, ia, ib) and len(ia) == 10


def test_the_real_deepspeech_step_is_aligned() -> None:
    """23,387 runtime calls of 10 names, 65 of them at other places in the attribution step: difflib took 95 s on
    the GPU machine (325 s here) on this pair; the alignment must match all but the moved calls."""
    doc = json.loads(gzip.open(DATA, "rt").read())
    a, b = doc["timing"], doc["attribution"]
    assert len(a) == len(b) == 23387 and a != b
    ia, ib = join.match_sequences(a, b)
    assert valid(a, b, ia, ib)
    assert len(ia) >= len(a) - 65


def test_many_differences_fall_back_to_the_greedy_walk() -> None:
    rng = random.Random(0)
    a = [rng.randint(0, 9) for _ in range(3000)]
    b = list(a)
    for _ in range(800):
        b.insert(rng.randrange(len(b)), b.pop(rng.randrange(len(b))))
    ia, ib = join.match_sequences(a, b)
    assert valid(a, b, ia, ib) and len(ia) > len(a) // 3
