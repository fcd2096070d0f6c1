"""The canonical profile: save/load round trip, SQL over it, invariants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import DEEPSPEECH
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile, ProfileError
from dnnprof.model.schema import TABLES, schema_markdown


def test_save_load_round_trip(tmp_path: Path) -> None:
    p = read_kineto(DEEPSPEECH)
    p.save(tmp_path / "p")
    q = Profile.load(tmp_path / "p")
    assert q.strings == p.strings
    assert q.devices == p.devices
    for name in TABLES:
        for col, arr in p.tables[name].items():
            np.testing.assert_array_equal(q.tables[name][col], arr, err_msg=f"{name}.{col}")
    assert q.self_check() == []


def test_save_is_atomic_and_replaces(tmp_path: Path) -> None:
    p = read_kineto(DEEPSPEECH)
    target = tmp_path / "p"
    p.save(target)
    p.save(target)  # overwrite in place
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p"]


def test_duckdb_query_decodes_names() -> None:
    p = read_kineto(DEEPSPEECH)
    rows = p.query("SELECT name, count(*) AS n, sum(dur_ns) AS t FROM kernels GROUP BY name ORDER BY t DESC").fetchall()
    assert rows[0][0].startswith("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm")
    assert sum(r[1] for r in rows) == p.rows("kernels")


def test_self_check_finds_broken_invariants() -> None:
    p = read_kineto(DEEPSPEECH)
    p.tables["kernels"]["dur_ns"][0] = -5
    p.tables["kernels"]["op_row"][1] = 10**8
    problems = p.self_check()
    assert any("negative duration" in s for s in problems)
    assert any("op_row" in s for s in problems)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not a dnnprof profile"):
        Profile.load(tmp_path)
    (tmp_path / "profile.json").write_text('{"format": "something/9"}')
    with pytest.raises(ProfileError, match="profile format"):
        Profile.load(tmp_path)


def test_schema_doc_is_current() -> None:
    doc = Path(__file__).parents[1] / "docs" / "profile-schema.md"
    assert doc.read_text() == schema_markdown(), "regenerate: python -m dnnprof.model.schema > docs/profile-schema.md"


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_self_check_reads_a_block_of_rows_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.model import profile as mod

    monkeypatch.setattr(mod, "_CHECK_ROWS", block)
    for n in range(0, 9):
        up = np.arange(n)
        assert mod.in_order(up)
        for i in range(1, n):  # one step down anywhere, block boundaries included
            down = up.copy()
            down[i] = down[i - 1] - 1
            assert not mod.in_order(down), (n, i)
    col = np.array([3, -1, 3, 7, 0, -1, 7, 2])
    assert mod._distinct(col).tolist() == np.unique(col).tolist()
    assert mod._distinct(col[:0]).size == 0


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_name_tests_a_block_of_ids_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are read a block at a time (a big trace's mapped column gives back its pages): the same answers, ids
    outside the strings in any block read as "" (-1)."""
    from dnnprof.model import profile as profile_module

    p = Profile(strings=["aten::mm", "ProfilerStep#1", "aten::add"])
    ids = np.array([0, 1, -1, 2, 0, 7, 1, -5, 2], dtype=np.int32)
    monkeypatch.setattr(profile_module, "_ID_BLOCK", block)
    test = p.name_tests(ids)
    assert test(lambda s: s.startswith("aten::")).tolist() == [True, False, False, True, True, False, False, False,
                                                               True]
    assert test(lambda s: s == "").tolist() == [False, False, True, False, False, True, False, True, False]
    assert p.distinct_names(ids) == ["aten::mm", "ProfilerStep#1", "aten::add", ""]
    assert p.distinct_names(ids[:5]) == ["aten::mm", "ProfilerStep#1", "aten::add", ""]
    assert p.distinct_names(ids[:2]) == ["aten::mm", "ProfilerStep#1"]
    assert p.distinct_names(ids[:0]) == []
