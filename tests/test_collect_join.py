"""Joining the attribution window onto the timing window, checked against ground truth on a real H200 trace.

The fixture has two GPT-2 training steps recorded with CPU ops (ProfilerStep#4, #5). A "timing" profile is made
by dropping every CPU-side event (what a CUDA-only window records); joining step 5's ops onto it must give each
step-4 kernel the same launching op the real trace says it had.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import GPT2
from dnnprof.ingest.join import join_attribution, match_sequences
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile
from dnnprof.model.schema import empty_table


def _keep_steps(p: Profile, numbers: list[int]) -> None:
    st = p.tables["steps"]
    keep = np.isin(st["number"], numbers)
    p.tables["steps"] = {c: v[keep] for c, v in st.items()}
    for t in ("kernels", "memcpy", "memset", "runtime", "ops"):
        col = p.tables[t]["step"]
        col[~np.isin(col, numbers)] = -1


@pytest.fixture(scope="module")
def truth() -> Profile:
    return read_kineto(GPT2)


def _timing_and_attrib() -> tuple[Profile, Profile]:
    timing = read_kineto(GPT2)
    timing.tables["ops"] = empty_table("ops")
    for t in ("kernels", "memcpy", "memset", "runtime"):
        timing.tables[t]["op_row"][:] = -1
    _keep_steps(timing, [4])
    attrib = read_kineto(GPT2)
    _keep_steps(attrib, [5])
    return timing, attrib


def test_join_restores_the_launching_ops_of_the_timed_step(truth: Profile) -> None:
    timing, attrib = _timing_and_attrib()
    stats = join_attribution(timing, attrib)
    k = timing.tables["kernels"]
    timed = np.flatnonzero(k["step"] == 4)
    assert timed.size > 1000
    assert stats["matched_kernels_pct"] == 100.0
    assert stats["reference_step"] == 5
    assert stats["per_step"] == [{"step": 4, "reference_step": 5, "kernels": int(timed.size), "matched_pct": 100.0}]
    joined = timing.names(timing.tables["ops"]["name_id"][k["op_row"][timed]])
    real = truth.names(truth.tables["ops"]["name_id"][truth.tables["kernels"]["op_row"][timed]])
    has_op = truth.tables["kernels"]["op_row"][timed] >= 0
    assert has_op.mean() > 0.9
    assert (joined[has_op] == real[has_op]).all()
    # Runtime calls get their ops too, and every op row is valid.
    assert stats["matched_runtime_pct"] == 100.0
    assert timing.self_check() == []
    # The joined ops are the attribution step's, not timed: outside every step.
    assert (timing.tables["ops"]["step"] == -1).all()
    assert timing.meta["attribution"] is stats


def test_join_tolerates_an_extra_kernel_and_records_the_match_rate() -> None:
    timing, attrib = _timing_and_attrib()
    # Drop one kernel launch from the attribution step: one timed kernel has no partner.
    k = attrib.tables["kernels"]
    rows = np.flatnonzero(k["step"] == 5)
    victim = rows[np.argsort(k["correlation"][rows])][100]
    k["name_id"][victim] = attrib.intern("a_kernel_only_the_attribution_step_ran")
    stats = join_attribution(timing, attrib)
    n = stats["kernels_in_timed_steps"]
    assert stats["matched_kernels_pct"] == round(100.0 * (n - 1) / n, 2)
    assert (timing.tables["kernels"]["op_row"][timing.tables["kernels"]["step"] == 4] == -1).sum() >= 1


def test_join_with_no_steps_says_so() -> None:
    timing, attrib = _timing_and_attrib()
    _keep_steps(attrib, [])
    stats = join_attribution(timing, attrib)
    assert stats["matched_kernels_pct"] == 0.0
    assert stats["note"] == "no steps to join"


@pytest.mark.parametrize("a, b, expect", [
    (list("abcd"), list("abcd"), ([0, 1, 2, 3], [0, 1, 2, 3])),
    (list("abxcd"), list("abcd"), ([0, 1, 3, 4], [0, 1, 2, 3])),
    (list("abcd"), list("abyyycd"), ([0, 1, 2, 3], [0, 1, 5, 6])),
    (list("ab"), list("cd"), ([], [])),
])
def test_match_sequences_aligns_in_order(a: list[str], b: list[str], expect: tuple[list[int], list[int]]) -> None:
    ia, ib = match_sequences(a, b)
    assert (ia.tolist(), ib.tolist()) == expect
