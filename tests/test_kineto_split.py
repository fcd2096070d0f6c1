"""Reading a plain-JSON trace with several processes gives exactly the one-piece reader's profile.

Every Kineto fixture in tests/data, the foreign traces and the H200 traces are gunzipped into a temporary file and
read every way with the several-process threshold at 0 bytes: two processes, and three processes taking segments
as small as 64 KiB, so a big fixture is cut dozens of times. The spilled reads fill every table's columns with
threads, in small blocks.
"""

from __future__ import annotations

import gzip
import itertools
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import DATA
from dnnprof.ingest import kineto, kineto_split, kineto_tables, nesting
from dnnprof.ingest.errors import TraceError
from test_kineto_stream import assert_same_profile

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _kineto_files() -> list[Path]:
    files = [p for p in sorted(DATA.rglob("*.json*")) if _is_kineto(p)]
    for folder in (SHARED / "foreign", SHARED / "traces"):
        if folder.is_dir():
            files += [p for p in sorted(folder.rglob("*.json*")) if _is_kineto(p)]
    return files


def _is_kineto(path: Path) -> bool:
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return b'"traceEvents"' in text[:1 << 16] and text.lstrip()[:1] == b"{"


FILES = _kineto_files()


def _plain(path: Path, tmp_path: Path) -> Path:
    raw = path.read_bytes()
    out = tmp_path / "trace.json"
    out.write_bytes(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return out


NEVER = 1 << 62


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_segments_and_the_spill_give_the_one_piece_in_memory_profile(path: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_split, "SEGMENT_BYTES", 1 << 16)
    monkeypatch.setattr(kineto_tables, "PARALLEL_ROWS", 0)  # only the spilled reads have several threads
    for blocks in ("_BLOCK_ROWS", "_THREAD_BLOCK_ROWS", "_NAME_BLOCK_ROWS"):
        monkeypatch.setattr(kineto_tables, blocks, 1 << 12)
    monkeypatch.setattr(nesting, "_POOL_QUERY_ROWS", 1 << 8)
    plain = _plain(path, tmp_path)
    ways = [{"parallel_min_bytes": 0, "spill_min_bytes": NEVER, "workers": 2},
            {"parallel_min_bytes": 0, "spill_min_bytes": 0, "workers": 3},
            {"parallel_min_bytes": NEVER, "spill_min_bytes": 0}]
    try:
        one = kineto._read_profile(plain, None, parallel_min_bytes=NEVER, spill_min_bytes=NEVER)
    except TraceError as e:
        for way in ways:
            with pytest.raises(TraceError) as other:
                kineto._read_profile(plain, None, **way)
            assert str(other.value) == str(e)
        return
    for way in ways:
        assert_same_profile(one, kineto._read_profile(plain, None, **way))


def test_the_split_really_happens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a silent fallback to one piece: this process read some segments, the helpers the others, and every
    event is counted once."""
    src = SHARED / "traces" / "deepspeech_train_h200.json.gz"
    if not src.is_file():
        pytest.skip(f"{src} is absent (the shared traces folder sits beside the repository)")
    plain = _plain(src, tmp_path)
    mine: list[int] = []
    work = kineto_split._work

    def recorded(*args: object, **kwargs: object) -> object:
        parts = work(*args, **kwargs)  # type: ignore[arg-type]
        mine.extend(parts or {})
        return parts

    def slow(chunk: memoryview, tally: Counter[str]) -> list[object]:  # this process only: the helper surely starts
        time.sleep(0.05)                                                 # before this one has read everything
        return kineto._decode_events(chunk, tally)

    monkeypatch.setattr(kineto_split, "_work", recorded)
    seen: list[tuple[int, int]] = []
    done = kineto_split.read_in_parallel(plain, slow, kineto._add_events, kineto.CHUNK_BYTES,
                                         Counter(), lambda b, e: seen.append((b, e)), workers=2,
                                         segment_bytes=1 << 18)
    assert done is not None
    assert seen[-1] == (plain.stat().st_size, 184_404)
    count = len(kineto_split.segments(plain, plain.stat().st_size,
                                      kineto_split.cut_points(plain.stat().st_size, 2, 1 << 18)))
    assert 0 < len(mine) < count, (mine, count)  # a helper read the segments this process did not


def test_segments_cover_the_file_at_event_boundaries(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev, "x": [{"a": 1}, {"b": 2}]}))
    size = plain.stat().st_size
    cuts = kineto_split.cut_points(size, 3, 4096)
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, size], strict=True)]
    assert sizes[0] == size // 6 and all(s >= 4096 for s in sizes[:-1])
    assert all(a >= b for a, b in itertools.pairwise(sizes[:-1]))  # big segments first, then smaller ones
    ranges = kineto_split.segments(plain, size, cuts)
    text = plain.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] == size and len(ranges) == len(cuts) + 1
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert text[end - 1:end] == b"}" and text[start:start + 1] == b"{"
        assert text[end:start].strip() == b","
    assert kineto_split.cut_points(size, 2, size) == []  # one segment: no split
    assert kineto_split.read_in_parallel(plain, kineto._decode_events, kineto._add_events, 1 << 19, Counter(),
                                         workers=2, segment_bytes=size) is None


def test_a_cut_inside_a_string_falls_back_to_one_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The middle of the file holds '}, {' inside a name: the proof of the segment before fails, the reader reads
    the file whole. Also when the string lies in a later segment, and with more processes."""
    monkeypatch.setattr(kineto_split, "SEGMENT_BYTES", 1 << 11)
    name = "x" * 3000 + "}, {" + "y" * 3000
    ev = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev, "x": 1}))
    size = plain.stat().st_size
    assert len(kineto_split.segments(plain, size, kineto_split.cut_points(size, 2, 1 << 11))) > 1  # it is cut
    assert kineto_split.read_in_parallel(plain, kineto._decode_events, kineto._add_events, 1 << 19, Counter(),
                                         workers=2) is None
    assert kineto._read_profile(plain, None, parallel_min_bytes=0, workers=2).strings == [name]
    short = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
             for i in range(400)]
    long_name = "x" * 20_000 + "}, {" + "y" * 100
    plain.write_text(json.dumps({"traceEvents": [*short, {**ev[0], "name": long_name}, *short]}))
    size, text = plain.stat().st_size, plain.read_bytes()
    first, after = text.index(b"x"), text.index(b"}, {" + b"y") + 4
    for workers in (2, 3):
        ranges = kineto_split.segments(plain, size, kineto_split.cut_points(size, workers, 1 << 12))
        assert any(first < start < after for start, _ in ranges)  # a cut falls inside the name
        assert kineto_split.read_in_parallel(plain, kineto._decode_events, kineto._add_events, 1 << 12, Counter(),
                                             workers=workers, segment_bytes=1 << 12) is None
    whole = kineto._read_profile(plain, None, parallel_min_bytes=NEVER)
    assert_same_profile(whole, kineto._read_profile(plain, None, parallel_min_bytes=0, workers=3))


def test_an_error_in_the_second_half_is_the_one_piece_error(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(2000)]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev})[:-30] + "garbage")
    with pytest.raises(TraceError) as one:
        kineto._read_profile(plain, None, parallel_min_bytes=1 << 62)
    with pytest.raises(TraceError) as two:
        kineto._read_profile(plain, None, parallel_min_bytes=0)
    assert str(one.value) == str(two.value)


def test_gzip_and_small_files_are_read_in_one_piece(tmp_path: Path) -> None:
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": []}))
    assert not kineto_split.worth_splitting(plain)  # below the threshold
    assert kineto_split.worth_splitting(plain, min_bytes=0, workers=2)
    assert not kineto_split.worth_splitting(plain, min_bytes=0, workers=1)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert not kineto_split.worth_splitting(gz, min_bytes=0, workers=2)


def test_the_number_of_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(kineto_split.WORKERS_ENV, raising=False)
    assert 1 <= kineto_split.read_workers() <= kineto_split.MAX_WORKERS
    monkeypatch.setenv(kineto_split.WORKERS_ENV, "1")
    assert kineto_split.read_workers() == 1
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": []}))
    assert not kineto_split.worth_splitting(plain, min_bytes=0)  # one process: read in one piece
    monkeypatch.setenv(kineto_split.WORKERS_ENV, "12")
    assert kineto_split.read_workers() == 12  # asked for: more than the cores is allowed
    for bad in ("two", "1.5"):
        monkeypatch.setenv(kineto_split.WORKERS_ENV, bad)
        with pytest.raises(TraceError, match=r"DNNPROF_READ_WORKERS=.*whole number"):
            kineto_split.read_workers()


def test_the_spill_folder_goes_with_the_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spilled columns live in a private temporary folder that is removed after the read, also after an error."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(50)]
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"traceEvents": ev}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traceEvents": ev})[:-10])
    profile = kineto._read_profile(good, None, parallel_min_bytes=0, spill_min_bytes=0)
    assert profile.rows("ops") == 50
    with pytest.raises(TraceError):
        kineto._read_profile(bad, None, parallel_min_bytes=0, spill_min_bytes=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "good.json"]


def test_progress_counts_every_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes and events told to a listener never go back, and end at the file's size and its event count."""
    from dnnprof.ingest import progress

    monkeypatch.setattr(kineto_split, "SEGMENT_BYTES", 1 << 12)
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev}))
    seen: list[tuple[int, int, int]] = []
    with progress.listening(lambda path, done, total, events: seen.append((done, total, events))):
        profile = kineto._read_profile(plain, None, parallel_min_bytes=0, workers=3)
    assert profile.rows("ops") == 5000
    size = plain.stat().st_size
    assert seen[-1] == (size, size, 5000)
    assert all(a[0] <= b[0] and a[2] <= b[2] for a, b in itertools.pairwise(seen))
