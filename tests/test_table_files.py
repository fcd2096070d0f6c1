"""A saved profile's tables are written a slice of rows at a time and big ones read back a row group at a time into
mapped columns: the same tables as the whole write and read, and the same clear errors for a damaged file."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import DATA
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model import mapped_columns, table_files
from dnnprof.model.profile import Profile, ProfileError
from dnnprof.model.schema import TABLES
from test_kineto_split import FILES
from test_kineto_stream import assert_same_profile

TRACE = DATA / "deepspeech_train_h200" / "trace.json.gz"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return read_kineto(TRACE)


def _mapped(column: np.ndarray) -> bool:
    base = column
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(getattr(base, "obj", base), mmap.mmap)


@pytest.mark.parametrize("slice_rows", [1, 997, 1 << 18])
@pytest.mark.parametrize("mapped_min_rows", [1, 1 << 40])
def test_sliced_write_and_mapped_read_give_the_same_tables(profile: Profile, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, slice_rows: int,
                                                           mapped_min_rows: int) -> None:
    if slice_rows == 1:  # a row group a row: a small table will do
        profile = Profile(tables={"steps": profile.tables["steps"]}, strings=profile.strings)
    monkeypatch.setattr(table_files, "SLICE_ROWS", slice_rows)
    monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", mapped_min_rows)
    saved = profile.save(tmp_path / "prof")
    ops = profile.rows("ops")
    assert pq.ParquetFile(saved / "ops.parquet").num_row_groups == max(1, -(-ops // slice_rows))
    back = Profile.load(saved)
    assert_same_profile(back, profile)
    kernels = back.tables["kernels"]["start_ns"]
    assert _mapped(kernels) == (mapped_min_rows == 1 and kernels.size > 0 and mapped_columns.SUPPORTED)


def test_a_profile_is_mapped_by_its_rows_in_all(profile: Profile, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    saved = profile.save(tmp_path / "prof")
    rows = sum(profile.rows(t) for t in TABLES)
    for at_least, mapped in ((rows, True), (rows + 1, False)):
        monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", at_least)
        back = Profile.load(saved)
        assert _mapped(back.tables["ops"]["start_ns"]) == (mapped and mapped_columns.SUPPORTED)
        assert back.rows("syncs") == 0 and not any(_mapped(c) for c in back.tables["syncs"].values())  # no rows


def test_an_empty_table_keeps_its_schema(tmp_path: Path) -> None:
    empty = Profile()
    back = Profile.load(empty.save(tmp_path / "prof"))
    assert pq.ParquetFile(tmp_path / "prof" / "kernels.parquet").schema_arrow.names == \
        [c.name for c in TABLES["kernels"]]
    assert_same_profile(back, empty)


def _damage_last_group(path: Path, column: str, value: object, typ: pa.DataType) -> None:
    """Rewrite ``path`` in row groups of 100 rows with ``column``'s last value replaced."""
    t = pq.read_table(path)
    values = t.column(column).to_pylist()
    values[-1] = value
    i = t.column_names.index(column)
    pq.write_table(t.set_column(i, pa.field(column, typ), pa.array(values, type=typ)), path, row_group_size=100)


@pytest.mark.parametrize(("value", "typ", "message"), [
    (1.5, pa.float64(), "column dur_ns holds values that are not whole numbers"),
    (None, pa.int64(), "column dur_ns has 1 nulls"),
    (2**40, pa.int64(), None),  # fits int64: not an error
])
def test_a_damaged_value_in_a_later_row_group_is_named(profile: Profile, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, value: object,
                                                        typ: pa.DataType, message: str | None) -> None:
    monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", 1)
    saved = profile.save(tmp_path / "prof")
    _damage_last_group(saved / "kernels.parquet", "dur_ns", value, typ)
    assert pq.ParquetFile(saved / "kernels.parquet").num_row_groups > 2
    if message is None:
        assert Profile.load(saved).tables["kernels"]["dur_ns"][-1] == value
        return
    with pytest.raises(ProfileError, match=f"kernels.parquet: {message}$"):
        Profile.load(saved)


def test_a_narrower_column_out_of_range_in_a_later_row_group_is_named(profile: Profile, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", 1)
    saved = profile.save(tmp_path / "prof")
    _damage_last_group(saved / "kernels.parquet", "stream", 2**40, pa.int64())
    with pytest.raises(ProfileError, match=r"kernels.parquet: column stream holds values beyond int32 "):
        Profile.load(saved)


@pytest.mark.parametrize("typ", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(),
                                 pa.float16(), pa.float32(), pa.float64(), pa.bool_()])
@pytest.mark.parametrize("nulls", [False, True])
def test_numpy_of_gives_what_pyarrow_gives(typ: pa.DataType, nulls: bool) -> None:
    """Arrow columns as numpy without pyarrow's conversion (which imports pandas): values, types, nulls as NaN,
    sliced chunks (offsets inside a byte of a bitmap) and several chunks."""
    rng = np.random.default_rng(3)
    if pa.types.is_boolean(typ):
        values = rng.random(70) < 0.5
    elif pa.types.is_floating(typ):
        values = rng.normal(size=70).astype(typ.to_pandas_dtype())
    else:
        values = rng.integers(0, 100, 70).astype(typ.to_pandas_dtype())
    mask = (rng.random(70) < 0.2) if nulls else None
    whole = pa.array(values, type=typ, mask=mask)
    cases = [pa.chunked_array([whole]), pa.chunked_array([whole.slice(3, 50)]),
             pa.chunked_array([whole.slice(0, 13), whole.slice(13, 0), whole.slice(13)]),
             pa.chunked_array([], type=typ), pa.chunked_array([whole.slice(5, 0)])]
    for column in cases:
        got, want = table_files.numpy_of(column), column.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert all(a is b or a == b or (a != a and b != b) for a, b in zip(got.tolist(), want.tolist(), strict=True))


def test_a_saved_profile_loads_without_pandas(profile: Profile, tmp_path: Path) -> None:
    import subprocess
    import sys

    saved = profile.save(tmp_path / "prof")
    code = ("import sys; from dnnprof.model.profile import Profile; p = Profile.load(sys.argv[1]); "
            "print(p.rows('kernels'), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(profile.rows("kernels")), "False"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_trace_saves_in_slices_and_loads_mapped_as_it_was_read(path: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Kineto fixture, foreign trace and shared trace: saved in row groups of 997 rows and read back a row
    group at a time into mapped columns, the profile is the one read, nothing lost."""
    try:
        read = read_kineto(path)
    except TraceError:
        return  # an unreadable input has nothing to save
    monkeypatch.setattr(table_files, "SLICE_ROWS", 997)
    monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", 1)
    assert_same_profile(Profile.load(read.save(tmp_path / "prof")), read)


@pytest.mark.parametrize("mapped_min_rows", [1, 1 << 40])
def test_a_column_the_file_lacks_reads_as_unknown(profile: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  mapped_min_rows: int) -> None:
    monkeypatch.setattr(table_files, "MAPPED_MIN_ROWS", mapped_min_rows)
    saved = profile.save(tmp_path / "prof")
    t = pq.read_table(saved / "kernels.parquet")
    pq.write_table(t.drop(["grid_x", "est_occupancy_pct"]), saved / "kernels.parquet", row_group_size=100)
    k = Profile.load(saved).tables["kernels"]
    assert (k["grid_x"] == -1).all() and np.isnan(k["est_occupancy_pct"]).all()
    assert np.array_equal(k["dur_ns"], profile.tables["kernels"]["dur_ns"])
