"""`dnnprof analyze` on real traces other projects recorded (``../shared/foreign``, see its README): a rank-N file,
legacy torch 1.8/1.9 categories, traces without GPU activity records, MTIA and AMD devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dnnprof.cli.main import main

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
pytestmark = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"the foreign trace corpus ({FOREIGN}) is not here")


def summary(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / "s.json"
    assert main(["analyze", str(FOREIGN / name), "--json", str(out), "--quiet", *args]) == 0
    return json.loads(out.read_text())


def report(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> str:
    assert main(["analyze", str(FOREIGN / name), *args]) == 0
    return capsys.readouterr().out


# --- a single file of rank N ≠ 0 -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "rank", "world"), [("hta__cpu_only_rank34.json.gz", 34, 300),
                                                     ("hta__df_index_resolver.json.gz", 1, 2)])
def test_single_rank_file_reports_its_rank(tmp_path: Path, name: str, rank: int, world: int) -> None:
    doc = summary(tmp_path, name)
    assert (doc["rank"], doc["world_size"]) == (rank, world)
    assert doc["steps"]["count"] >= 1


def test_single_rank_file_header_names_the_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert "rank 34 of 300" in report(capsys, "hta__cpu_only_rank34.json.gz")


def test_rank_option_still_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(FOREIGN / "hta__cpu_only_rank34.json.gz"), "--rank", "0"]) == 2
    assert "no rank 0 (ranks in the trace: [34])" in capsys.readouterr().err


def test_several_ranks_default_to_rank_0(tmp_path: Path) -> None:
    assert summary(tmp_path, "hta__trace_filter_2ranks")["rank"] == 0
    assert summary(tmp_path, "hta__trace_filter_2ranks", "--rank", "1")["rank"] == 1
