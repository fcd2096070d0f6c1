"""Big traces' tables in mapped files (model.mapped_columns): the same summary as tables in memory, on every
Kineto fixture, the foreign corpus and the shared traces; pages given back keep their values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest import kineto
from dnnprof.ingest.errors import TraceError
from dnnprof.model import mapped_columns
from dnnprof.model.schema import empty_table
from dnnprof.runs.report import report
from test_kineto_split import FILES, NEVER

pytestmark = pytest.mark.skipif(not mapped_columns.SUPPORTED, reason="columns are mapped on POSIX systems only")


def _summary(path: Path, spill_min_bytes: int) -> str:
    profile = kineto._read_profile(path, None, spill_min_bytes=spill_min_bytes)
    return json.dumps(report(profile)[1], sort_keys=True)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_mapped_tables_give_the_in_memory_summary(path: Path) -> None:
    try:
        in_memory = _summary(path, NEVER)
    except TraceError:
        return  # the reader's errors are the same either way (test_kineto_split)
    assert _summary(path, 0) == in_memory


def test_a_spilled_read_maps_its_tables_and_a_small_one_does_not(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
           "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(100)]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": ev}))
    small = kineto._read_profile(trace, None, spill_min_bytes=NEVER)
    assert isinstance(small.tables["kernels"]["start_ns"].base, np.ndarray | type(None))
    before = mapped_columns.mapped_bytes()
    big = kineto._read_profile(trace, None, spill_min_bytes=0)
    assert isinstance(big.tables["kernels"]["start_ns"].base, memoryview)  # a view of the mapped file
    assert mapped_columns.mapped_bytes() > before
    assert big.tables["kernels"]["start_ns"].tolist() == [i * 1000 for i in range(100)]
    assert not list(tmp_path.glob("column-*"))


def test_mapped_tables_start_with_the_fill_values_and_released_pages_keep_theirs(tmp_path: Path) -> None:
    for table in ("runtime", "kernels"):
        mapped, plain = empty_table(table, 100_000, mapped=tmp_path), empty_table(table, 100_000)
        for col, a in plain.items():
            assert mapped[col].dtype == a.dtype and np.array_equal(mapped[col], a, equal_nan=a.dtype.kind == "f"), col
    t = empty_table("runtime", 100_000, mapped=tmp_path)
    t["start_ns"][:] = np.arange(100_000)
    mapped_columns.release_pages()
    assert (t["start_ns"] == np.arange(100_000)).all()
    t["start_ns"][5] = -7  # still writable after a release
    mapped_columns.release_pages()
    assert t["start_ns"][5] == -7
    assert not list(tmp_path.iterdir())  # the files are unlinked from the start


def _resident_kb(column: np.ndarray) -> int:
    """Resident KiB of the mapping that holds ``column`` (from /proc/self/smaps: not swayed by the rest of the
    process)."""
    at = column.ctypes.data
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's address range starts its block
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= at < hi
        elif inside and head == "Rss:":
            return int(line.split()[1])
    raise AssertionError("no mapping holds the column")


def test_the_pages_of_the_columns_named_go_back_and_no_others(tmp_path: Path) -> None:
    a = mapped_columns.mapped_column(tmp_path, np.dtype(np.int64), 4 << 20, 0)  # 32 MiB each
    b = mapped_columns.mapped_column(tmp_path, np.dtype(np.int64), 4 << 20, 0)
    a[:], b[:] = 3, 4
    assert min(_resident_kb(a), _resident_kb(b)) > 30 << 10  # written: resident
    mapped_columns.release_pages_of(a.reshape(-1, 2)[:, 1], np.ones(10))  # a view of one, and a plain array
    assert _resident_kb(a) == 0 and _resident_kb(b) > 30 << 10
    assert (a == 3).all() and (b == 4).all()


def test_a_table_made_for_writing_is_zeros_where_mapped(tmp_path: Path) -> None:
    mapped = empty_table("kernels", 1000, mapped=tmp_path, prefill=False)
    assert all(not c.any() for c in mapped.values())
    plain = empty_table("kernels", 1000, prefill=False)  # in memory: the fill values, as always
    assert (plain["grid_x"] == -1).all() and np.isnan(plain["est_occupancy_pct"]).all()


def test_empty_and_in_memory_tables_are_plain_arrays() -> None:
    assert empty_table("kernels", 0, mapped=Path(".")).keys() == empty_table("kernels", 0).keys()
    for col, a in empty_table("runtime", 3).items():
        assert a.flags.owndata, col


def test_a_profile_of_mapped_tables_saves_and_loads_as_the_in_memory_one(tmp_path: Path) -> None:
    from conftest import DEEPSPEECH
    from dnnprof.model.profile import Profile
    from test_kineto_stream import assert_same_profile

    mapped = kineto._read_profile(DEEPSPEECH, None, spill_min_bytes=0)
    assert isinstance(mapped.tables["kernels"]["start_ns"].base, memoryview)
    mapped.save(tmp_path / "p")
    assert_same_profile(Profile.load(tmp_path / "p"), kineto._read_profile(DEEPSPEECH, None, spill_min_bytes=NEVER))


_HEAP_PROBE = """
import ctypes, sys
import numpy as np
from dnnprof.model import mapped_columns

def anon_mb():
    with open("/proc/self/statm") as f:
        v = f.read().split()
    return (int(v[1]) - int(v[2])) * 4096 / 1e6

if sys.argv[1] == "big":
    mapped_columns.large_blocks_returned_on_free()
blocks = [np.ones(8192) for _ in range(1500)]  # 64 KiB each: from malloc's heap, below the mapping threshold
kept = blocks[::50]  # live blocks spread through the heap: freeing the rest leaves holes, not a shorter heap
del blocks
before = anon_mb()
mapped_columns.release_pages()
print(before - anon_mb(), len(kept))
"""


@pytest.mark.parametrize("big", [True, False])
def test_released_pages_include_the_free_pages_of_the_heap_for_big_traces(big: bool) -> None:
    """A stage's medium-sized temporaries, freed between live ones, stay resident in malloc's heap unless it is
    trimmed: release_pages() trims it once the process reads a big trace (glibc only), and leaves it alone else."""
    import subprocess
    import sys

    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("malloc is not glibc's")
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, "big" if big else "small"], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parent).stdout.split()
    given_back_mb = float(out[0])
    if big:
        assert given_back_mb > 50  # of the ~96 MB freed
    else:
        assert given_back_mb < 10


@pytest.mark.parametrize("block", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("order", ["ascending", "shuffled", "repeated"])
def test_gather_reads_the_rows_asked_for(tmp_path: Path, block: int, order: str) -> None:
    col = mapped_columns.mapped_column(tmp_path, np.dtype(np.int64), 1000, 0)
    col[:] = np.arange(1000) * 7
    rng = np.random.default_rng(5)
    rows = np.sort(rng.choice(1000, 300, replace=False))
    if order == "shuffled":
        rows = rng.permutation(rows)
    elif order == "repeated":
        rows = np.sort(np.concatenate([rows, rows[:50]]))
    assert np.array_equal(mapped_columns.gather(col, rows, block_rows=block), col[rows])
    assert mapped_columns.gather(col, rows[:0], block_rows=block).size == 0


def test_gather_of_rows_spread_over_a_column_keeps_a_block_of_it_resident(tmp_path: Path) -> None:
    """A read maps its neighbours' pages too (fault-around): ascending rows are cut where they pass each block of
    the column's rows, so a few rows spread over all of it never map it all at once."""
    n, block = 1 << 22, 1 << 16  # 32 MiB of int64, blocks of 512 KiB
    col = mapped_columns.mapped_column(tmp_path, np.dtype(np.int64), n, 0)
    col[::512] = 1  # every page written once, then given back
    mapped_columns.release_pages_of(col)
    rows = np.arange(0, n, 4096)  # one row in every eight pages: every fault maps the pages around it
    seen = []
    real = mapped_columns.release_pages_of

    def measuring(*columns: np.ndarray) -> None:
        seen.append(_resident_kb(col))
        real(*columns)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(mapped_columns, "release_pages_of", measuring)
        assert (mapped_columns.gather(col, rows, block_rows=block) == 1).all()
    assert len(seen) == n // block and max(seen) <= 2 * block * 8 // 1024

