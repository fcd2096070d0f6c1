"""fwdbwd flow points as columns: the pairs a dict per phase, filled in file order, gives."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import numpy as np
import pytest

from dnnprof.ingest.flow_points import FlowPoints
from dnnprof.ingest.kineto_tables import tid_of


def _reference(points: list[tuple[bool, Any, Any, float]]) -> list[tuple[int, int, int, int]]:
    """The pairing written plainly: last usable start and end per id, pairs by the file position of the end."""
    start: dict[Any, tuple[int, int]] = {}
    end: dict[Any, tuple[int, int, int]] = {}
    for pos, (is_start, fid, tid, ts) in enumerate(points):
        ns = ts * 1000
        if not -(2.0**62) <= ns <= 2.0**62:
            continue
        if is_start:
            start[fid] = (tid_of(tid), round(ns))
        else:
            end[fid] = (pos, tid_of(tid), round(ns))
    both = sorted((end[k][0], start[k], end[k][1:]) for k in start.keys() & end.keys())
    return [(s[0], s[1], e[0], e[1]) for _, s, e in both]


def _pairs(points: list[tuple[bool, Any, Any, float]], chunks: int = 1) -> list[tuple[int, int, int, int]]:
    flows = FlowPoints()
    bounds = np.linspace(0, len(points), chunks + 1).astype(int)
    for a, b in itertools.pairwise(bounds.tolist()):
        part = FlowPoints()  # as a second process's columns would come: extended in file order
        chunk = points[a:b]
        part.add([p[0] for p in chunk], [p[1] for p in chunk],
                 np.array([tid_of(p[2]) for p in chunk], dtype=np.int64), [p[3] for p in chunk])
        flows.extend(part)
    return list(zip(*(c.tolist() for c in flows.pairs()), strict=True))


def test_pairs_by_id_with_the_last_point_of_each_phase() -> None:
    points = [(True, 1, 7, 1.0), (True, 2, 7, 2.0), (False, 1, 9, 10.0), (True, 1, 7, 3.0), (False, 3, 9, 11.0),
              (False, 2, "stream 9", 12.5)]
    assert _pairs(points) == [(7, 3000, 9, 10000), (7, 2000, 9, 12500)]
    assert _pairs(points) == _reference(points)


def test_unusable_times_are_ignored_not_overriding() -> None:
    points = [(True, 5, 1, 1.0), (True, 5, 1, math.nan), (False, 5, 2, 2.0), (False, 5, 2, 1e300),
              (True, 6, 1, -1e300), (False, 6, 2, 3.0)]
    assert _pairs(points) == [(1, 1000, 2, 2000)]


def test_ids_of_every_kind_pair_as_a_dict_keys_them() -> None:
    points = [(True, "a", 1, 1.0), (False, "a", 2, 2.0), (True, None, 1, 3.0), (False, None, 2, 4.0),
              (True, 2**70, 1, 5.0), (False, 2**70, 2, 6.0), (True, 1, 1, 7.0), (False, "1", 2, 8.0)]
    assert _pairs(points) == _reference(points)
    assert len(_pairs(points)) == 3


def test_half_nanoseconds_round_to_even_as_python_does() -> None:
    points = [(True, 1, 1, 0.0005), (False, 1, 2, 0.0015), (True, 2, 1, 0.0025), (False, 2, 2, 2.5e-3)]
    assert _pairs(points) == _reference(points)


def test_no_points_and_no_pairs() -> None:
    assert _pairs([]) == []
    assert _pairs([(True, 1, 1, 1.0), (True, 2, 1, 2.0)]) == []
    assert len(FlowPoints()) == 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunks", [1, 3])
def test_random_points_give_the_reference_pairs(seed: int, chunks: int) -> None:
    rng = random.Random(seed)
    ids: list[Any] = list(range(40)) if seed % 2 else [*range(20), *map(str, range(10)), None, 2**64]
    points = [(rng.random() < 0.5, rng.choice(ids), rng.choice([1, 2, "stream 3", "x"]),
               rng.choice([rng.uniform(0, 1e6), math.nan, 1e20])) for _ in range(400)]
    assert _pairs(points, chunks) == _reference(points)
