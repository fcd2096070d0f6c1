"""The idle-gap timeline of the rules is made a block of gaps at a time (a big trace's gaps are millions): the same
gaps, causes, blame and calls whatever the block, on real traces; the launch lead before each gap as a whole-array
reduction gives it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.analysis.intervals import gaps, merge
from dnnprof.analysis.rules import prepare, timeline
from dnnprof.analysis.summary import analyse
from dnnprof.ingest.kineto import read_kineto


def _lead_before_whole(act_s: np.ndarray, lead: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """The definition, over whole arrays: the largest lead among activities starting in [previous gap end, gs)."""
    out = np.full(gs.size, -1, dtype=np.int64)
    for g in range(gs.size):
        lo = 0 if g == 0 else np.searchsorted(act_s, ge[g - 1], side="left")
        hi = np.searchsorted(act_s, gs[g], side="left")
        if hi > lo:
            out[g] = lead[lo:hi].max()
    return out


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 18])
@pytest.mark.parametrize("seed", range(6))
def test_lead_before_a_block_of_gaps_at_a_time(block: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    act_s = np.sort(rng.integers(0, 1000, rng.integers(1, 60)))
    act_e = act_s + rng.integers(1, 30, act_s.size)
    lead = rng.integers(-1, 50, act_s.size)
    # the idle gaps of a window around the activities, as the timeline finds them: no activity starts in one
    ms, me = merge(act_s, act_e)
    gs, ge = gaps(ms, me, -20, 1100)
    monkeypatch.setattr(timeline, "_GAP_BLOCK", block)
    assert np.array_equal(timeline._lead_before(act_s, lead, gs, ge), _lead_before_whole(act_s, lead, gs, ge))


@pytest.mark.parametrize(("path", "blocking"), [(GPT2, False), (DEEPSPEECH, True)], ids=["gpt2", "deepspeech"])
def test_the_timeline_is_the_same_whatever_the_blocks(path: object, blocking: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = analyse(read_kineto(path))
    whole = timeline.build_timeline(prepare(analysis))
    assert whole.gap_start.size > 10 and bool(whole.calls) == blocking  # DeepSpeech's CTC loss syncs
    assert (whole.blamed_ns > 0).any() == blocking
    monkeypatch.setattr(timeline, "_GAP_BLOCK", 3)
    real_each = timeline._each
    monkeypatch.setattr(timeline, "_each", lambda idx: real_each(idx, block=2))
    blocks = timeline.build_timeline(prepare(analysis))
    for f in dataclasses.fields(whole):
        a, b = getattr(whole, f.name), getattr(blocks, f.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, f.name
