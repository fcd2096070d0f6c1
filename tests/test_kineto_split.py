"""Reading a plain-JSON trace on two cores gives exactly the one-piece reader's profile.

Every Kineto fixture in tests/data, the foreign traces and the H200 traces are gunzipped into a temporary file and
read both ways with the two-process threshold at 0 bytes, so each one is cut in the middle.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import DATA
from dnnprof.ingest import kineto, kineto_split
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
def test_two_halves_and_the_spill_give_the_one_piece_in_memory_profile(path: Path, tmp_path: Path) -> None:
    plain = _plain(path, tmp_path)
    ways = [{"parallel_min_bytes": 0, "spill_min_bytes": NEVER}, {"parallel_min_bytes": 0, "spill_min_bytes": 0},
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


def test_the_split_really_happens(tmp_path: Path) -> None:
    """Not a silent fallback to one piece: the second process read events."""
    src = SHARED / "traces" / "deepspeech_train_h200.json.gz"
    if not src.is_file():
        pytest.skip(f"{src} is absent (the shared traces folder sits beside the repository)")
    plain = _plain(src, tmp_path)
    seen: list[tuple[int, int]] = []
    done = kineto_split.read_in_two(plain, kineto._decode_events, kineto._add_events, kineto.CHUNK_BYTES, Counter(),
                                    lambda b, e: seen.append((b, e)))
    assert done is not None
    assert seen[-1] == (plain.stat().st_size, 184_404)


def test_a_cut_inside_a_string_falls_back_to_one_piece(tmp_path: Path) -> None:
    """The middle of the file holds '}, {' inside a name: the first half's proof fails, the reader reads it whole."""
    name = "x" * 3000 + "}, {" + "y" * 3000
    ev = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}]
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps({"traceEvents": ev, "x": 1}))
    assert kineto_split.read_in_two(plain, kineto._decode_events, kineto._add_events, 1 << 19, Counter()) is None
    assert kineto._read_profile(plain, None, parallel_min_bytes=0).strings == [name]


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
    assert kineto_split.worth_splitting(plain, min_bytes=0)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert not kineto_split.worth_splitting(gz, min_bytes=0)


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
