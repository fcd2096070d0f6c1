"""A big trace's tables are filled by several threads, and are the tables one thread fills."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.ingest import kineto, kineto_tables, nesting
from test_kineto_stream import assert_same_profile

NEVER = 1 << 62


@pytest.fixture
def trace() -> Path:
    return DEEPSPEECH


def _threads_of(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> set[str]:
    """Names of the threads that call ``module.name`` from now on."""
    seen: set[str] = set()
    original = getattr(module, name)

    def recorded(*args: object, **kwargs: object) -> object:
        seen.add(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return seen


def test_threads_fill_the_tables_one_thread_fills(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = kineto._read_profile(trace, None, spill_min_bytes=NEVER)
    fills = _threads_of(monkeypatch, kineto_tables, "_fill_blocks")
    lookups = _threads_of(monkeypatch, nesting, "_innermost")
    monkeypatch.setattr(kineto_tables, "PARALLEL_ROWS", 1 << 12)  # the fixture's 13k launches count as many
    monkeypatch.setattr(nesting, "_POOL_QUERY_ROWS", 1 << 10)  # and are looked up in many blocks
    threaded = kineto._read_profile(trace, None, spill_min_bytes=0, workers=4)
    assert one.tables["runtime"]["start_ns"].size >= kineto_tables.PARALLEL_ROWS  # big enough for the threads
    assert {n for n in fills if n.startswith("dnnprof-fill")}, fills
    assert {n for n in lookups if n.startswith("dnnprof-fill")}, lookups
    assert threading.current_thread().name in fills  # names are interned here, in order
    assert_same_profile(one, threaded)


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.parent.name)
def test_every_table_filled_by_threads_in_small_blocks_is_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    one = kineto._read_profile(path, None, spill_min_bytes=NEVER)
    monkeypatch.setattr(kineto_tables, "PARALLEL_ROWS", 0)
    for blocks in ("_BLOCK_ROWS", "_THREAD_BLOCK_ROWS", "_NAME_BLOCK_ROWS"):
        monkeypatch.setattr(kineto_tables, blocks, 1 << 10)
    monkeypatch.setattr(nesting, "_POOL_QUERY_ROWS", 1 << 9)
    assert_same_profile(one, kineto._read_profile(path, None, spill_min_bytes=0, workers=3))


def test_one_process_means_one_thread(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_tables, "PARALLEL_ROWS", 0)
    fills = _threads_of(monkeypatch, kineto_tables, "_fill_blocks")
    kineto._read_profile(trace, None, spill_min_bytes=0, workers=1)
    assert fills == {threading.current_thread().name}


def test_an_error_in_a_fill_thread_reaches_the_caller(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(values: np.ndarray) -> np.ndarray:
        raise ArithmeticError("boom in " + threading.current_thread().name)

    monkeypatch.setattr(kineto_tables, "_duration_ns", failing)
    monkeypatch.setattr(kineto_tables, "PARALLEL_ROWS", 0)  # the first table, the ops, has threads too
    with pytest.raises(ArithmeticError, match="boom in dnnprof-fill"):
        kineto._read_profile(trace, None, spill_min_bytes=0, workers=2)
    assert not [t for t in threading.enumerate() if t.name.startswith("dnnprof-fill")]  # none left running


@pytest.mark.parametrize("block", [1, 2, 1 << 20])
def test_activities_linked_to_their_launches_a_block_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_tables, "_BLOCK_ROWS", block)
    runtime = {"correlation": np.array([5, 3, 9, -1]), "op_row": np.array([10, 11, 12, 13], dtype=np.int32)}
    gpu = {"correlation": np.array([3, 4, 9, -1, 5, 3, 100]), "launch_row": np.zeros(7, dtype=np.int32),
           "op_row": np.zeros(7, dtype=np.int32)}
    kineto_tables.link_by_correlation(gpu, runtime)
    assert gpu["launch_row"].tolist() == [1, -1, 2, -1, 0, 1, -1]  # no call of that id, or a negative id: none
    assert gpu["op_row"].tolist() == [11, -1, 12, -1, 10, 11, -1]
