"""Throughputs from their parts (dnnprof's cheaper ncu collection) against ncu's own, on a real H100 capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dnnprof.analysis.bounds import compute_bounds
from dnnprof.ingest.ncu_csv import read_ncu_csv
from dnnprof.model.sol_metrics import (
    MEMORY_THROUGHPUT,
    MEMORY_THROUGHPUT_PARTS,
    SM_THROUGHPUT,
    SM_THROUGHPUT_PARTS,
)

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h100_breakdown"


@pytest.fixture(scope="module")
def metrics() -> dict[str, np.ndarray]:
    return dict(read_ncu_csv(DATA / "ncu.csv.gz").metrics)


def test_the_capture_has_both_forms(metrics: dict[str, np.ndarray]) -> None:
    assert len(metrics[SM_THROUGHPUT]) == 75
    missing = [m for m in (*SM_THROUGHPUT_PARTS, *MEMORY_THROUGHPUT_PARTS) if m not in metrics]
    assert not missing, f"not in ncu's breakdown on sm_90: {missing}"


def test_parts_give_ncus_throughputs_and_bound_classes(metrics: dict[str, np.ndarray]) -> None:
    ncu = compute_bounds(metrics)
    parts_only = {k: v for k, v in metrics.items() if k not in (SM_THROUGHPUT, MEMORY_THROUGHPUT)}
    ours = compute_bounds(parts_only)
    assert ncu.throughput_source == {"sm": "ncu", "memory": "ncu"}
    assert ours.throughput_source == {"sm": "parts", "memory": "parts"}
    np.testing.assert_allclose(ours.sm_throughput_pct, ncu.sm_throughput_pct, atol=0.05)
    np.testing.assert_allclose(ours.memory_throughput_pct, ncu.memory_throughput_pct, atol=0.05)
    assert (ours.bound == ncu.bound).all()
    assert set(ncu.bound) >= {"compute", "memory"}  # the fixture exercises more than one class


def test_a_maximum_over_fewer_parts_is_never_above_ncus(metrics: dict[str, np.ndarray]) -> None:
    few = {k: v for k, v in metrics.items() if k not in (SM_THROUGHPUT, MEMORY_THROUGHPUT)
           and k not in SM_THROUGHPUT_PARTS[2:] and k not in MEMORY_THROUGHPUT_PARTS[1:]}
    ours, ncu = compute_bounds(few), compute_bounds(metrics)
    assert (ours.sm_throughput_pct <= ncu.sm_throughput_pct + 1e-9).all()
    assert (ours.memory_throughput_pct <= ncu.memory_throughput_pct + 1e-9).all()
    assert (ours.sm_throughput_pct < ncu.sm_throughput_pct - 1).any()  # the tensor pipe was the maximum somewhere


def test_without_either_form_the_throughputs_are_unknown() -> None:
    b = compute_bounds({"gpu__time_duration.sum": np.array([1000.0, 2000.0])})
    assert b.throughput_source == {"sm": "none", "memory": "none"}
    assert np.isnan(b.sm_throughput_pct).all() and (b.bound == "").all()


def test_a_row_without_ncus_value_takes_the_parts(metrics: dict[str, np.ndarray]) -> None:
    mixed = dict(metrics)
    mixed[SM_THROUGHPUT] = metrics[SM_THROUGHPUT].copy()
    mixed[SM_THROUGHPUT][:5] = np.nan
    b = compute_bounds(mixed)
    assert b.throughput_source["sm"] == "mixed"
    np.testing.assert_allclose(b.sm_throughput_pct, compute_bounds(metrics).sm_throughput_pct, atol=0.05)
