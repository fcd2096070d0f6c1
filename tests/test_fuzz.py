"""A short seeded fuzz batch (benchmarks/fuzz.py): mutated real inputs of every format end in a success or one
clean error line, never a traceback or a hang. The long batch and its counts are in benchmarks/RESULTS.md."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz.py"


def _fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("dnnprof_fuzz", FUZZ)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_150_mutated_inputs_give_no_traceback_and_no_hang(tmp_path: Path) -> None:
    fuzz = _fuzz()
    result = fuzz.run_batch(seed=20261127, inputs=150, timeout_s=20.0, workdir=tmp_path)
    counts = result.to_dict()
    report = json.dumps({k: counts[k] for k in ("per_format", "distinct_tracebacks", "hangs", "input_changed")},
                        indent=1)[:6000]
    assert counts["inputs"] == 150
    assert counts["traceback"] == 0 and counts["hang"] == 0 and not counts["input_changed"], report
    assert counts["other_exit"] == 0, report
    # Every format ran, and the mutations both broke inputs and left some readable (the batch tests something).
    assert set(counts["per_format"]) == {"kineto", "ncu", "profile", "rundir", "summary"}
    assert counts["success"] > 0 and counts["clean_error"] > 0


def test_the_harness_counts_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input that escapes ``main`` is counted as a traceback with its place, not lost."""
    fuzz = _fuzz()
    import dnnprof.cli.main as cli

    def broken(argv: list[str]) -> int:
        raise IndexError("planted")

    monkeypatch.setattr(cli, "main", broken)
    result = fuzz.run_batch(seed=1, inputs=2, formats=("summary",), workdir=tmp_path)
    assert result.total("traceback") == 2
    place, entry = next(iter(result.tracebacks.items()))
    assert place.startswith("IndexError at ")
    assert entry["example"] == "--seed 1 --replay 0"  # how to make the input again


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_input_is_the_same_whatever_came_before_it(tmp_path: Path) -> None:
    """Input N of a seed depends on the seed and N only: workers can share a batch and ``--replay N`` remakes it."""
    fuzz = _fuzz()
    seeds = fuzz.Seeds(tmp_path / "work")
    made = {}
    for n in (7, 3, 7, 12, 3):  # out of order and again
        case = tmp_path / f"case{len(made)}-{n}"
        case.mkdir()
        fmt, args = fuzz.make_case(5, n, fuzz.FORMATS, seeds, case)
        made.setdefault(n, []).append((fmt, [a.replace(str(case), "") for a in args], _tree(case)))
    assert made[7][0] == made[7][1] and made[3][0] == made[3][1]
    assert made[7][0] != made[3][0]


def test_folder_inputs_share_the_seed_files_but_never_change_them(tmp_path: Path) -> None:
    """Run directories and saved profiles are hard links to one pristine copy; a mutated file is detached first."""
    fuzz = _fuzz()
    seeds = fuzz.Seeds(tmp_path / "work")
    bases = seeds.folders("rundir") + seeds.folders("profile")
    before = {b: _tree(b) for b in bases}
    linked = 0
    for n in range(40):
        case = tmp_path / f"case{n}"
        case.mkdir()
        fuzz.make_case(11, n, ("rundir", "profile"), seeds, case)
        linked += sum(p.stat().st_nlink > 1 for p in case.rglob("*") if p.is_file())
    assert linked > 0  # files left alone are links, not copies
    assert {b: _tree(b) for b in bases} == before
    assert seeds.check_pristine() == []


def test_a_seed_written_by_the_command_is_reported(tmp_path: Path) -> None:
    fuzz = _fuzz()
    seeds = fuzz.Seeds(tmp_path / "work")
    base = seeds.folders("rundir")[0]
    (base / "meta.json").write_text("{}")
    changed = seeds.check_pristine()
    assert changed == [str(base / "meta.json")]
    assert seeds.folders("rundir")[0].joinpath("meta.json").read_text() != "{}"  # made again from its source


def _sleep_past_the_alarm(argv: list[str]) -> int:
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # a hang the in-process time limit cannot end
    time.sleep(60)
    return 0


def _die(argv: list[str]) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


@pytest.mark.parametrize(("planted", "kind"), [(_sleep_past_the_alarm, "hang"), (_die, "crash")])
def test_a_worker_that_hangs_or_dies_is_counted_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               planted: Any, kind: str) -> None:
    fuzz = _fuzz()
    import dnnprof.cli.main as cli

    monkeypatch.setattr(cli, "main", planted)
    monkeypatch.setattr(fuzz, "GRACE_S", 1.0)
    keep = tmp_path / "keep"
    keep.mkdir()
    checkpoint = tmp_path / "fuzz.json"
    t0 = time.monotonic()
    result = fuzz.run_batch(seed=1, inputs=2, formats=("summary",), timeout_s=0.5, workdir=tmp_path / "w",
                            keep=keep, workers=1, checkpoint=checkpoint)
    assert time.monotonic() - t0 < 30
    assert result.total(kind) == 2 and result.failures() == 2
    assert sorted(p.name for p in keep.iterdir()) == ["seed1-input0", "seed1-input1"]  # kept to look at
    saved = json.loads(checkpoint.read_text())
    assert saved[kind] == 2 and saved["running"] is False


def test_kineto_inputs_never_change_the_parsed_seed(tmp_path: Path) -> None:
    """Mutations work on copies: the seed parsed once per process stays as read (each input starts from it)."""
    fuzz = _fuzz()
    import fuzz_inputs

    seeds = fuzz.Seeds(tmp_path / "work")
    for n in range(60):
        case = tmp_path / f"case{n}"
        case.mkdir()
        fuzz.make_case(3, n, ("kineto",), seeds, case)
    assert seeds._kineto
    for path, seed in seeds._kineto.items():
        fresh = fuzz_inputs.KinetoSeed(path)
        assert seed.top == fresh.top and seed.events == fresh.events, path


def _processes_naming(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc to find the workers")
def test_sigterm_ends_a_batch_with_its_counts_and_no_worker_left(tmp_path: Path) -> None:
    import subprocess

    checkpoint, work = tmp_path / "fuzz.json", tmp_path / "work-for-sigterm"
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.Popen([sys.executable, str(FUZZ), "--formats", "summary", "--minutes", "5", "--workers", "1",
                             "--checkpoint", str(checkpoint), "--checkpoint-s", "0.2", "--workdir", str(work)],
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(src)})
    deadline = time.monotonic() + 60
    while not (checkpoint.exists() and json.loads(checkpoint.read_text())["inputs"] > 0):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    summary = json.loads(out)
    assert proc.returncode == 0 and summary["stopped"] is True and summary["inputs"] > 0
    assert json.loads(checkpoint.read_text())["inputs"] == summary["inputs"]
    time.sleep(0.5)  # the kernel's SIGKILL of an orphan is asynchronous
    assert _processes_naming(str(work)) == []


def _touch_the_input(argv: list[str]) -> int:
    Path(argv[1]).write_text("{}")  # 'diff A B': A written over
    (Path(argv[1]).parent / ".x.tmp").write_text("")  # and a temporary file left behind
    return 0


def test_a_command_that_writes_into_its_input_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fuzz = _fuzz()
    import dnnprof.cli.main as cli

    monkeypatch.setattr(cli, "main", _touch_the_input)
    result = fuzz.run_batch(seed=1, inputs=1, formats=("summary",), workdir=tmp_path)
    assert result.failures() == 1 and result.total("success") == 1
    assert any(": changed" in c for c in result.input_changed)
    assert any(".x.tmp: left behind" in c for c in result.input_changed)


def _allocate_without_bound(argv: list[str]) -> int:
    _ = [0] * (2**31)  # 16 GiB of pointers
    return 0


def test_a_worker_s_memory_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input that allocates without bound is a MemoryError traceback in its worker, not the machine's memory."""
    fuzz = _fuzz()
    import dnnprof.cli.main as cli

    monkeypatch.setattr(cli, "main", _allocate_without_bound)
    import mmap

    # The cap is on top of what the forked worker holds: a parent as big as a long test run's (several GB of
    # address space) left its worker over the cap from the start, unable to start its queue's thread.
    held = mmap.mmap(-1, 3 * 2**30)
    result = fuzz.run_batch(seed=1, inputs=1, formats=("summary",), workdir=tmp_path, workers=1, memory_mb=2048)
    held.close()
    assert result.total("traceback") == 1
    assert next(iter(result.tracebacks)).startswith("MemoryError at ")
