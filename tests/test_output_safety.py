"""dnnprof never destroys what it did not write: ``analyze --save/--json/--html/--perfetto`` on real traces.

Every refusal is one line on stderr naming the path, exit code 2, and leaves the user's files byte for byte as
they were; an earlier saved profile is replaced atomically (a failure in the middle leaves it loadable).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import CPU_MLP, GPT2
from dnnprof.cli.main import main
from dnnprof.ingest.detect import open_profile
from dnnprof.model import outputs
from dnnprof.model.outputs import OutputError
from dnnprof.model.profile import Profile, ProfileError, check_save_target

USER_FILES = {"important.txt": b"results of three weeks\n", "model.pt": bytes(range(256)) * 64}


def _user_folder(folder: Path) -> dict[str, object]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in USER_FILES.items():
        (folder / name).write_bytes(data)
    return dict(USER_FILES)


def _contents(folder: Path) -> dict[str, object]:
    """Every file under ``folder`` and its bytes (a sub-folder as a nested dict)."""
    return {p.name: _contents(p) if p.is_dir() else p.read_bytes() for p in sorted(folder.iterdir())}


def _one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dnnprof: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _no_leftovers(parent: Path) -> None:
    """No temporary or set-aside sibling is left next to an output."""
    assert not [p.name for p in parent.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def gpt2() -> Profile:
    return open_profile(GPT2)


def _kernels(folder: Path) -> int:
    return Profile.load(folder).rows("kernels")


# --- --save -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("force", [False, True])
def test_save_refuses_a_folder_holding_user_files(tmp_path: Path, force: bool, capsys) -> None:
    folder = tmp_path / "work"
    before = _user_folder(folder)
    argv = ["analyze", str(CPU_MLP), "--save", str(folder), "--quiet"] + (["--force"] if force else [])
    assert main(argv) == 2
    _one_error_line(capsys, str(folder), "important.txt", "new or empty folder")
    assert _contents(folder) == before
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("force", [False, True])
def test_save_refuses_a_file(tmp_path: Path, force: bool, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_bytes(b"# my project\n")
    argv = ["analyze", str(CPU_MLP), "--save", str(readme), "--quiet"] + (["--force"] if force else [])
    assert main(argv) == 2
    _one_error_line(capsys, str(readme), "is a file")
    assert readme.is_file() and readme.read_bytes() == b"# my project\n"
    _no_leftovers(tmp_path)


def test_save_refuses_a_profile_folder_the_user_added_files_to(tmp_path: Path, gpt2: Profile, capsys) -> None:
    saved = gpt2.save(tmp_path / "prof")
    (saved / "notes.txt").write_bytes(b"the run with lr 3e-4\n")
    before = _contents(saved)
    for force in (False, True):
        argv = ["analyze", str(CPU_MLP), "--save", str(saved), "--quiet"] + (["--force"] if force else [])
        assert main(argv) == 2
        _one_error_line(capsys, str(saved), "notes.txt")
        assert _contents(saved) == before
    assert _kernels(saved) == gpt2.rows("kernels")


def test_resave_replaces_an_earlier_profile(tmp_path: Path, gpt2: Profile) -> None:
    saved = tmp_path / "prof"
    assert main(["analyze", str(CPU_MLP), "--save", str(saved), "--quiet"]) == 0
    cpu_files = set(_contents(saved))
    assert main(["analyze", str(GPT2), "--save", str(saved), "--quiet"]) == 0
    assert _kernels(saved) == gpt2.rows("kernels") > 0
    assert set(_contents(saved)) == cpu_files
    _no_leftovers(tmp_path)


def test_save_into_an_empty_or_new_nested_folder(tmp_path: Path, gpt2: Profile) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(GPT2), "--save", str(tmp_path / "empty"), "--quiet"]) == 0
    assert _kernels(tmp_path / "empty") == gpt2.rows("kernels")
    assert main(["analyze", str(GPT2), "--save", str(tmp_path / "a" / "b" / "prof"), "--quiet"]) == 0
    assert _kernels(tmp_path / "a" / "b" / "prof") == gpt2.rows("kernels")


def test_a_profile_of_another_version_is_replaced_only_with_force(tmp_path: Path, gpt2: Profile, capsys) -> None:
    saved = gpt2.save(tmp_path / "prof")
    meta = saved / "profile.json"
    meta.write_text(meta.read_text().replace("dnnprof.profile/1", "dnnprof.profile/9"))
    before = _contents(saved)
    assert main(["analyze", str(CPU_MLP), "--save", str(saved), "--quiet"]) == 2
    _one_error_line(capsys, str(saved), "dnnprof.profile/9", "--force")
    assert _contents(saved) == before
    assert main(["analyze", str(CPU_MLP), "--save", str(saved), "--quiet", "--force"]) == 0
    assert Profile.load(saved).meta["source"]["path"] == str(CPU_MLP)


def test_a_run_directory_is_not_replaced_by_save(tmp_path: Path, gpt2: Profile, capsys) -> None:
    run = tmp_path / "run"
    gpt2.save(run / "profile")
    (run / "meta.json").write_text('{"format": "dnnprof.run/1"}')
    assert main(["analyze", str(CPU_MLP), "--save", str(run), "--quiet", "--force"]) == 2
    _one_error_line(capsys, str(run), "meta.json")
    assert _kernels(run / "profile") == gpt2.rows("kernels")


def test_saved_folder_has_plain_permissions(tmp_path: Path, gpt2: Profile) -> None:
    old = os.umask(0o022)
    try:
        saved = gpt2.save(tmp_path / "prof")
    finally:
        os.umask(old)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o755  # not mkdtemp's private 0700


# --- atomic replacement -------------------------------------------------------------------------------------------
def test_a_failure_while_writing_leaves_the_earlier_profile(tmp_path: Path, gpt2: Profile, monkeypatch) -> None:
    import pyarrow.parquet as pq

    saved = gpt2.save(tmp_path / "prof")
    before = _contents(saved)
    real, calls = pq.ParquetWriter.write_table, []

    def failing(*args, **kwargs):  # the third slice of rows written fails
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", failing)
    with pytest.raises(OutputError, match="No space left"):
        open_profile(CPU_MLP).save(saved)
    assert _contents(saved) == before
    assert _kernels(saved) == gpt2.rows("kernels")
    _no_leftovers(tmp_path)


def _fail_renames_of_the_new_folder(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """Make putting the new folder in place fail (as a crash at that instant would), by any rename call."""
    def guard(src: object) -> None:
        name = Path(str(src)).name
        if name.startswith(f".{target.name}.") and ".old" not in name:
            raise OSError(5, "Input/output error")

    real_os_rename, real_path_rename = os.rename, Path.rename
    monkeypatch.setattr(os, "rename", lambda s, d: (guard(s), real_os_rename(s, d))[1])
    monkeypatch.setattr(Path, "rename", lambda s, d: (guard(s), real_path_rename(s, d))[1])


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "two-renames"])
def test_the_swap_never_leaves_the_path_without_a_profile(tmp_path: Path, gpt2: Profile, monkeypatch,
                                                          exchange: bool) -> None:
    saved = gpt2.save(tmp_path / "prof")
    before = _contents(saved)
    if not exchange:
        monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    _fail_renames_of_the_new_folder(monkeypatch, saved)
    cpu = open_profile(CPU_MLP)
    try:
        cpu.save(saved)
    except OutputError:
        assert _contents(saved) == before  # the rename failed: the earlier profile is still there, whole
        assert _kernels(saved) == gpt2.rows("kernels")
    else:
        assert exchange  # one atomic exchange: no rename to fail
        assert _kernels(saved) == cpu.rows("kernels")
    _no_leftovers(tmp_path)


def test_exchange_swaps_two_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not outputs._exchange(a, b):
        pytest.skip("this system has no renameat2(RENAME_EXCHANGE); replace_dir uses two renames")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_loading_after_an_interrupted_swap_points_at_the_set_aside_profile(tmp_path: Path, gpt2: Profile) -> None:
    saved = gpt2.save(tmp_path / "prof")
    saved.rename(tmp_path / ".prof.old-k2j4")  # a kill between the fallback's two renames
    with pytest.raises(ProfileError, match=r"\.prof\.old-k2j4"):
        Profile.load(saved)


def test_check_save_target_is_the_api_s_guard_too(tmp_path: Path, gpt2: Profile) -> None:
    before = _user_folder(tmp_path / "work")
    with pytest.raises(OutputError, match=r"important\.txt"):
        gpt2.save(tmp_path / "work", force=True)
    assert _contents(tmp_path / "work") == before
    assert check_save_target(tmp_path / "new") == tmp_path / "new"


# --- --json, --html, --perfetto -----------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--json", "--html", "--html-report", "--perfetto"])
def test_an_output_never_overwrites_the_input(tmp_path: Path, option: str, capsys) -> None:
    trace = tmp_path / "trace.json.gz"
    shutil.copyfile(CPU_MLP, trace)
    assert main(["analyze", str(trace), option, str(trace), "--quiet"]) == 2
    _one_error_line(capsys, str(trace), "input", option)
    assert trace.read_bytes() == CPU_MLP.read_bytes()


def test_an_output_never_overwrites_a_trace_of_an_input_folder(tmp_path: Path, capsys) -> None:
    shutil.copyfile(CPU_MLP, tmp_path / "rank0.json.gz")
    assert main(["analyze", str(tmp_path), "--json", str(tmp_path / "rank0.json.gz"), "--quiet"]) == 2
    _one_error_line(capsys, "rank0.json.gz", "input folder")
    assert (tmp_path / "rank0.json.gz").read_bytes() == CPU_MLP.read_bytes()


@pytest.mark.parametrize("option", ["--json", "--html", "--perfetto"])
def test_an_output_that_is_a_folder_is_refused(tmp_path: Path, option: str, capsys) -> None:
    before = _user_folder(tmp_path / "work")
    assert main(["analyze", str(CPU_MLP), option, str(tmp_path / "work"), "--quiet"]) == 2
    _one_error_line(capsys, str(tmp_path / "work"), "is a folder")
    assert _contents(tmp_path / "work") == before


@pytest.mark.parametrize("option", ["--json", "--html", "--perfetto", "--save"])
def test_an_output_under_a_file_is_refused(tmp_path: Path, option: str, capsys) -> None:
    (tmp_path / "README.md").write_bytes(b"# my project\n")
    out = tmp_path / "README.md" / "out.json"
    assert main(["analyze", str(CPU_MLP), option, str(out), "--quiet"]) == 2
    _one_error_line(capsys, str(out), "is a file, not a folder")
    assert (tmp_path / "README.md").read_bytes() == b"# my project\n"


@pytest.mark.parametrize("option", ["--json", "--html", "--perfetto"])
def test_outputs_go_into_new_folders_and_replace_earlier_files(tmp_path: Path, option: str) -> None:
    out = tmp_path / "new" / "dir" / "out"
    assert main(["analyze", str(CPU_MLP), option, str(out), "--quiet"]) == 0
    first = out.read_bytes()
    assert first
    out.write_bytes(b"stale")
    assert main(["analyze", str(CPU_MLP), option, str(out), "--quiet"]) == 0
    assert out.read_bytes() == first
    _no_leftovers(out.parent)


def test_a_failed_html_write_leaves_the_earlier_file(tmp_path: Path, monkeypatch) -> None:
    import dnnprof.render.html_report as html_report

    out = tmp_path / "report.html"
    out.write_bytes(b"<html>yesterday's report</html>")
    # A page that cannot be encoded: the write fails after the file would have been opened.
    monkeypatch.setattr(html_report, "render_html", lambda doc, top: "<html>" + "\ud800")
    with pytest.raises(UnicodeEncodeError):
        main(["analyze", str(CPU_MLP), "--html-report", str(out), "--quiet"])
    assert out.read_bytes() == b"<html>yesterday's report</html>"
    _no_leftovers(tmp_path)


# --- diff, counters, report, sweep, run directories ---------------------------------------------------------------
def test_diff_json_never_overwrites_one_of_the_runs(tmp_path: Path, capsys) -> None:
    base = tmp_path / "base.json"
    assert main(["analyze", str(CPU_MLP), "--json", str(base), "--quiet"]) == 0
    before = base.read_bytes()
    assert main(["diff", str(base), str(GPT2), "--json", str(base), "--quiet"]) == 2
    _one_error_line(capsys, str(base), "input")
    assert base.read_bytes() == before


def test_counters_json_never_overwrites_a_file_of_the_run(tmp_path: Path, gpt2: Profile, capsys) -> None:
    run = tmp_path / "run"
    gpt2.save(run / "profile")
    (run / "meta.json").write_text('{"format": "dnnprof.run/1", "complete": true}')
    before = (run / "meta.json").read_bytes()
    assert main(["counters", str(run), "--json", str(run / "meta.json")]) == 2
    _one_error_line(capsys, "meta.json", "input folder")
    assert (run / "meta.json").read_bytes() == before


def _sweep_dir(tmp_path: Path) -> Path:
    import json

    from test_sweep_report import make_sweep

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps(make_sweep()))
    return sweep


def test_report_out_refuses_a_folder_of_other_files(tmp_path: Path, capsys) -> None:
    sweep = _sweep_dir(tmp_path)
    mine = tmp_path / "mine"
    before = _user_folder(mine)
    (mine / "report.md").write_bytes(b"# my own report\n")
    before["report.md"] = b"# my own report\n"
    assert main(["report", str(sweep), "--out", str(mine), "--quiet"]) == 2
    _one_error_line(capsys, str(mine), "important.txt")
    assert _contents(mine) == before
    # A new folder, then the same one again (it holds only an earlier report), and the sweep folder itself.
    for out in (tmp_path / "new", tmp_path / "new", sweep):
        assert main(["report", str(sweep), "--out", str(out), "--quiet"]) == 0
        assert {"report.md", "report.html", "report.json", "plots"} <= set(_contents_names(out))
        _no_leftovers(out)


def _contents_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_sweep_out_refuses_a_folder_of_other_files(tmp_path: Path, capsys) -> None:
    import sys

    from test_sweep_runner import FAKE

    mine = tmp_path / "mine"
    before = _user_folder(mine)
    (mine / "trials").mkdir()  # someone's own "trials" folder: never cleared
    (mine / "trials" / "notes.txt").write_bytes(b"keep\n")
    rc = main(["sweep", "--device", "cpu", "--batch-sizes", "1", "--out", str(mine), "--profile-points", "none",
               "--no-report", "--quiet", "--", sys.executable, str(FAKE), "{batch_size}"])
    assert rc == 2
    _one_error_line(capsys, str(mine), "no sweep to resume", "important.txt")
    assert _contents(mine) == {**before, "trials": {"notes.txt": b"keep\n"}}


def test_a_sweep_stopped_before_its_first_trial_still_resumes(tmp_path: Path) -> None:
    import json

    from dnnprof.runs.sweep.store import SweepStore
    from test_sweep_runner import fake_spec

    spec = fake_spec(tmp_path / "sw", "1").validate()
    SweepStore(spec.out, spec).open()  # then killed: no trial finished, no trials.jsonl
    assert json.loads((spec.out / "sweep.json").read_text())["status"] == "running"
    from dnnprof.runs.sweep import run_sweep

    doc = run_sweep(fake_spec(tmp_path / "sw", "1"))
    assert doc["status"] == "complete" and [p["batch_size"] for p in doc["points"]] == [1]


def test_a_run_never_lands_in_a_folder_that_was_filled_meanwhile(tmp_path: Path) -> None:
    from dnnprof.runs.rundir import RunDir

    rd = RunDir.create("train", out=tmp_path / "run")
    before = _user_folder(tmp_path / "run.incomplete")  # someone's folder with the incomplete run's name
    (rd.staging / "meta.json").write_text("{}")
    got = rd.finish(False, "interrupted")
    assert got.name == "run.incomplete-2" and (got / "meta.json").is_file()
    assert _contents(tmp_path / "run.incomplete") == before
    rd = RunDir.create("train", out=tmp_path / "run")
    before = _user_folder(tmp_path / "run")  # filled while the run ran
    (rd.staging / "meta.json").write_text("{}")
    got = rd.finish(True)
    assert got.name == "run-2" and (got / "meta.json").is_file()
    assert _contents(tmp_path / "run") == before


def test_links_are_written_through_never_replaced(tmp_path: Path, capsys) -> None:
    real = tmp_path / "runs" / "latest.json"
    real.parent.mkdir()
    real.write_bytes(b"{}")
    (tmp_path / "latest.json").symlink_to(real)
    assert main(["analyze", str(CPU_MLP), "--json", str(tmp_path / "latest.json"), "--quiet"]) == 0
    assert (tmp_path / "latest.json").is_symlink() and real.read_bytes().startswith(b"{\n")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert main(["analyze", str(CPU_MLP), "--save", str(tmp_path / "gone"), "--quiet"]) == 2
    _one_error_line(capsys, "broken symbolic link")
    assert (tmp_path / "gone").is_symlink()


# --- a full disk, leftovers of a killed dnnprof ---------------------------------------------------------------------
def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_full_disk_during_save_is_one_error_line(tmp_path: Path, monkeypatch, capsys) -> None:
    import pyarrow.parquet as pq

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    assert main(["analyze", str(CPU_MLP), "--save", str(tmp_path / "prof"), "--quiet"]) == 2
    _one_error_line(capsys, str(tmp_path / "prof"), "No space left on device")
    assert not (tmp_path / "prof").exists()
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("option", ["--json", "--perfetto", "--html"])
def test_a_full_disk_during_a_file_output_is_one_error_line(tmp_path: Path, option: str, monkeypatch,
                                                          capsys) -> None:
    out = tmp_path / "out.file"
    out.write_bytes(b"the earlier output\n")
    real = os.fsync

    def full(fd: int) -> None:
        real(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["analyze", str(CPU_MLP), option, str(out), "--quiet"]) == 2
    _one_error_line(capsys, str(out), "No space left on device")
    assert out.read_bytes() == b"the earlier output\n"
    _no_leftovers(tmp_path)


def test_a_killed_save_s_staging_folder_is_removed_on_the_next_save(tmp_path: Path, gpt2: Profile) -> None:
    dead = tmp_path / f".prof.{_dead_pid()}-abc123.tmp"
    dead.mkdir()
    (dead / "kernels.parquet").write_bytes(b"half")
    dead_file = tmp_path / f".prof.{_dead_pid()}-xyz.tmp"
    dead_file.write_bytes(b"half")
    live = tmp_path / f".prof.{os.getpid()}-def456.tmp"  # a save still running in this very process
    live.mkdir()
    other = tmp_path / ".prof.notes.tmp"  # not named like ours: left alone
    other.write_text("mine")
    gpt2.save(tmp_path / "prof")
    assert not dead.exists() and not dead_file.exists()
    assert live.is_dir() and other.read_text() == "mine"


def test_a_killed_file_write_s_temporary_file_is_removed_on_the_next_write(tmp_path: Path) -> None:
    stale = tmp_path / f".out.json.{_dead_pid()}-q1w2e3.tmp"
    stale.write_bytes(b"{\"half")
    outputs.write_text_atomic(tmp_path / "out.json", "{}")
    assert not stale.exists()
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_outputs_and_run_folders_follow_the_umask(tmp_path: Path, gpt2: Profile, umask: int) -> None:
    from dnnprof.runs.rundir import RunDir

    old = os.umask(umask)
    try:
        saved = gpt2.save(tmp_path / "prof")
        written = outputs.write_text_atomic(tmp_path / "out.html", "<p>")
        run = RunDir.create("train", out=tmp_path / "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE(written.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(run.staging.stat().st_mode) == 0o777 & ~umask


def test_numpy_strings_and_numbers_in_a_document_are_written_as_json() -> None:
    import numpy as np

    from dnnprof.render.json_out import dumps

    doc = {"name": np.str_("Torch-Compiled Region: 0/0"), "us": np.float64(1.5), "n": np.int32(3),
           "nan": np.float64("nan"), np.str_("key"): [np.str_("é")]}
    assert json.loads(dumps(doc)) == {"name": "Torch-Compiled Region: 0/0", "us": 1.5, "n": 3, "nan": None,
                                      "key": ["é"]}
