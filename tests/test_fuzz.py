"""A short seeded fuzz batch (benchmarks/fuzz.py): mutated real inputs of every format end in a success or one
clean error line, never a traceback or a hang. The long batch and its counts are in benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz.py"


def _fuzz() -> object:
    spec = importlib.util.spec_from_file_location("dnnprof_fuzz", FUZZ)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_150_mutated_inputs_give_no_traceback_and_no_hang(tmp_path: Path) -> None:
    fuzz = _fuzz()
    result = fuzz.run_batch(seed=20261127, inputs=150, timeout_s=20.0, workdir=tmp_path)  # type: ignore[attr-defined]
    counts = result.to_dict()
    report = json.dumps({k: counts[k] for k in ("per_format", "distinct_tracebacks", "hangs")}, indent=1)[:6000]
    assert counts["inputs"] == 150
    assert counts["traceback"] == 0 and counts["hang"] == 0, report
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
    result = fuzz.run_batch(seed=1, inputs=2, formats=("summary",), workdir=tmp_path)  # type: ignore[attr-defined]
    assert result.total("traceback") == 2
    assert next(iter(result.tracebacks)).startswith("IndexError at ")
