"""A folder of per-rank traces analysed over worker processes (``runs.rank_folder``): the same summary serially,
in a process pool and on Dask; the per-rank cache; bad ``--workers``/``--dask``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.ingest.detect import trace_files
from dnnprof.runs.rank_folder import report_folder
from dnnprof.runs.report import report_path

DATA = Path(__file__).parent / "data"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
DDP = DATA / "ddp_h100" / "straggler"
TWO_RANKS = FOREIGN / "hta__trace_filter_2ranks"


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _doc(folder: Path, rank: int, **how: object) -> str:
    return json.dumps(report_folder(folder, trace_files(folder), rank, **how)[1], sort_keys=True, default=str)


def _folders() -> list[Path]:
    if not TWO_RANKS.is_dir():
        pytest.skip(f"{TWO_RANKS}: the shared folder of foreign traces is not here")
    return [DDP, TWO_RANKS]


def test_serial_pool_and_merged_give_the_same_summary() -> None:
    for folder in _folders():
        for rank in (0, 1):
            serial = report_path(folder, rank)[1]
            assert serial["collectives"]["instances"] > 0  # compared below with the pool's, as every key is
            today = json.dumps(serial, sort_keys=True, default=str)
            assert _doc(folder, rank, workers=1) == today, (folder, rank)
            assert _doc(folder, rank, workers=2) == today, (folder, rank)  # read back from the cache
    shutil.rmtree(Path(os.environ["XDG_CACHE_HOME"]))
    assert _doc(DDP, 1, workers=2) == json.dumps(report_path(DDP, 1)[1], sort_keys=True, default=str)


def test_dask_local_cluster_gives_the_same_summary() -> None:
    pytest.importorskip("dask.distributed")
    folders = _folders()
    for folder in folders:
        today = json.dumps(report_path(folder, 1)[1], sort_keys=True, default=str)
        assert _doc(folder, 1, dask="local:2") == today, folder


def test_every_rank_outputs_merge_the_cached_ranks() -> None:
    analysis, doc, _ = report_folder(DDP, trace_files(DDP), 0, workers=1, every_rank=True)
    assert analysis.profile.ranks == [0, 1]
    assert json.dumps(doc, sort_keys=True, default=str) == json.dumps(report_path(DDP, 0)[1], sort_keys=True,
                                                                      default=str)


def test_a_rank_is_read_once_and_again_when_its_trace_changes(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    shutil.copytree(DDP, folder)
    first = report_folder(folder, trace_files(folder), 0, workers=1)[2]
    assert [p["cached"] for p in first] == [False, False]
    again = report_folder(folder, trace_files(folder), 0, workers=1)[2]
    assert [p["cached"] for p in again] == [True, True]
    assert again[0]["cache"] == first[0]["cache"]
    assert Path(again[0]["cache"]).is_relative_to(tmp_path / "cache" / "dnnprof" / "ranks")
    st = (folder / "rank1.json.gz").stat()
    os.utime(folder / "rank1.json.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touch
    third = report_folder(folder, trace_files(folder), 0, workers=1)[2]
    assert [p["cached"] for p in third] == [True, False]
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]  # nothing beside them


def test_cli_workers_and_dask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert main(["analyze", str(DDP), "--workers", "2", "--json", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["critical_path"]["verdict"]["rank"] == 1
    capsys.readouterr()
    assert main(["analyze", str(DDP), "--workers", "0", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--workers 0" in err and "at least 1" in err and len(err.splitlines()) == 1


def test_a_scheduler_that_cannot_be_reached_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("dask.distributed")
    assert main(["analyze", str(DDP), "--dask", "tcp://127.0.0.1:9", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot reach a Dask scheduler" in err and len(err.splitlines()) == 1
    assert main(["analyze", str(DDP), "--dask", "local:0", "-q"]) == 2
    assert "local:N" in capsys.readouterr().err


def test_without_dask_the_option_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails as if not installed
    assert main(["analyze", str(DDP), "--dask", "local:1", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "dnnprof[scale]" in err and len(err.splitlines()) == 1


def test_the_cache_drops_entries_of_traces_gone_or_changed_and_stays_bounded(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.runs.rank_map import cache_root

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(DDP, a)
    shutil.copytree(DDP, b)
    report_folder(a, trace_files(a), 0, workers=1)
    root = cache_root()
    assert len(list(root.iterdir())) == 2
    (a / "rank1.json.gz").unlink()  # gone
    st = (a / "rank0.json.gz").stat()
    os.utime(a / "rank0.json.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # changed
    used = report_folder(b, trace_files(b), 0, workers=1)[2]
    assert sorted(p.name for p in root.iterdir()) == sorted(Path(p["cache"]).name for p in used)
    # bounded: a second folder's entries push out the least recently used ones, never those just used
    monkeypatch.setenv("DNNPROF_RANK_CACHE_MB", "0")
    shutil.copytree(DDP, a, dirs_exist_ok=True)
    again = report_folder(a, trace_files(a), 0, workers=1)[2]
    assert sorted(p.name for p in root.iterdir()) == sorted(Path(p["cache"]).name for p in again)


def test_a_bad_cache_bound_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DNNPROF_RANK_CACHE_MB", "lots")
    assert main(["analyze", str(DDP), "--workers", "1", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "DNNPROF_RANK_CACHE_MB=lots" in err and len(err.splitlines()) == 1


def test_a_run_directory_of_four_gpu_ranks_through_the_pool_is_the_serial_answer(tmp_path: Path) -> None:
    """``dnnprof analyze RUN --workers 2`` on a run directory of every rank (`dnnprof run -- torchrun`, 4 H100s,
    rank 1 stalled in backward): each rank's timing and attribution windows joined in a worker, the same summary
    as one process."""
    run = DATA / "ddp_runs_h100_4gpu" / "backward_hook"
    docs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        assert main(["analyze", str(run), "--workers", workers, "--json", str(out), "--quiet"]) == 0
        docs.append(json.loads(out.read_text()))
    assert docs[0] == docs[1]
    v = docs[1]["critical_path"]["verdict"]
    assert (v["rank"], v["phase"]) == (1, "backward") and docs[1]["collectives"]["instances"] == 84
