"""Saved profiles, run directories and summaries are validated on load: a damaged file is one line naming the file
and the problem (exit 2), never a traceback from the analysis that trusted it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import CPU_MLP, DATA
from dnnprof.cli.main import main
from dnnprof.ingest.kineto import read_kineto

GRAPH = DATA / "graph_replay_h100" / "trace.json.gz"
RUN = DATA / "run_gpt2_infer_h100"
SUMMARY = RUN / "expected_summary.json"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace with kernels launched from ops, saved as a profile."""
    p = read_kineto(DATA / "deepspeech_train_h200" / "trace.json.gz")
    assert (p.tables["kernels"]["op_row"] >= 0).any()
    return p.save(tmp_path_factory.mktemp("saved") / "profile")


def _one_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprof: error: "), err
    return err[0]


def _rewrite(path: Path, column: str, make: Callable[[pa.ChunkedArray], pa.Array]) -> None:
    t = pq.read_table(path)
    i = t.column_names.index(column)
    pq.write_table(t.set_column(i, column, make(t.column(column))), path)


def _nulls(col: pa.ChunkedArray) -> pa.Array:
    values = col.to_pylist()
    values[0] = None
    return pa.array(values, type=col.type)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing ops.parquet": (lambda d: (d / "ops.parquet").unlink(),
                            "kernels.parquet: op_row refers to row"),
    "truncated strings.parquet": (lambda d: (d / "strings.parquet").write_bytes(
        (d / "strings.parquet").read_bytes()[:300]), "strings.parquet: unreadable Parquet"),
    "a null string": (lambda d: _rewrite(d / "strings.parquet", "value", _nulls), "1 null strings"),
    "strings that are not UTF-8": (lambda d: _rewrite(d / "strings.parquet", "value", lambda c: pa.array(
        [b"\xaf\xfe", *(v.encode() for v in c.to_pylist()[1:])], pa.binary()).view(pa.string())),
        "column value is not valid text"),
    "a column rewritten as text": (lambda d: _rewrite(d / "kernels.parquet", "dur_ns", lambda c: pa.array(
        [str(x) for x in c.to_pylist()])), "kernels.parquet: column dur_ns is string, not numbers"),
    "a name id past the strings": (lambda d: _rewrite(d / "kernels.parquet", "name_id", lambda c: pa.array(
        [10**6] * len(c), type=pa.int32())), "kernels.parquet: name_id refers to row 1000000 of strings.parquet"),
    "nulls in a number column": (lambda d: _rewrite(d / "kernels.parquet", "start_ns", _nulls),
                                 "kernels.parquet: column start_ns has 1 nulls"),
    "profile.json a list": (lambda d: (d / "profile.json").write_text("[1, 2]"),
                            "profile.json: is a JSON list, not an object"),
    "a device that is a number": (lambda d: (d / "profile.json").write_text(json.dumps(
        {**json.loads((d / "profile.json").read_text()), "devices": [1]})), "device 0: a JSON int"),
    "a device without its id": (lambda d: (d / "profile.json").write_text(json.dumps(
        {**json.loads((d / "profile.json").read_text()), "devices": [{"name": "GPU"}]})), "device 0: no id"),
    "a step source that is no source": (lambda d: _rewrite(d / "steps.parquet", "source", lambda c: pa.array(
        [-7] * len(c), type=pa.int8())), "steps.parquet: source holds -7, which is none of the 6 codes"),
    "an op category past the list": (lambda d: _rewrite(d / "ops.parquet", "category", lambda c: pa.array(
        [3] * len(c), type=pa.int8())), "ops.parquet: category holds 3, which is none of the 3 codes"),
    "event counts that are text": (lambda d: (d / "profile.json").write_text(json.dumps(
        {**json.loads((d / "profile.json").read_text()), "meta": {"event_counts": {"kernel": "x"}}})),
        "meta.event_counts holds something other than counts"),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_damaged_saved_profile_is_one_line(tmp_path: Path, saved: Path, capsys: pytest.CaptureFixture[str],
                                             name: str) -> None:
    damage, expected = DAMAGE[name]
    d = tmp_path / "p"
    shutil.copytree(saved, d)
    damage(d)
    line = _one_error(capsys, ["analyze", str(d)])
    assert expected in line and str(d) in line


def test_a_profile_missing_a_table_nothing_refers_to_still_loads(tmp_path: Path) -> None:
    d = read_kineto(CPU_MLP).save(tmp_path / "p")
    (d / "memory_events.parquet").unlink()
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


def _run_copy(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    return d


RUN_DAMAGE: dict[str, tuple[str, Callable[[dict], object], str]] = {
    "collector.json a list": ("collector.json", lambda doc: [doc], "collector.json: a JSON list"),
    "steps as text": ("collector.json", lambda doc: {**doc, "step_start_ns": "x"}, "step_start_ns is 'x'"),
    "a window without its steps": ("collector.json", lambda doc: {**doc, "windows": [
        {k: v for k, v in w.items() if k != "last_step"} for w in doc["windows"]]}, "has no first_step and last_step"),
    "a samples file outside the run": ("collector.json", lambda doc: {**doc, "samples_file": "../../etc/passwd"},
                                       "samples_file is '../../etc/passwd', not a file name or null"),
    "a samples file name longer than a file system takes": ("collector.json", lambda doc: {
        **doc, "samples_file": "[" * 5000 + ".json"}, "samples_file is '[[[["),
    "a trace path longer than a file system takes": ("collector.json", lambda doc: {**doc, "windows": [
        {**w, "trace": "trace/" + "x" * 300 + ".json.gz"} for w in doc["windows"]]}, "trace is 'trace/xxx"),
    "memory peaks as objects": ("collector.json", lambda doc: {**doc, "memory": {
        **doc["memory"], "per_step": {**doc["memory"]["per_step"], "peak_allocated_bytes": [{}]}}},
        "memory.per_step.peak_allocated_bytes"),
    "a window without its kind": ("collector.json", lambda doc: {**doc, "windows": [
        {k: v for k, v in w.items() if k != "kind"} for w in doc["windows"]]}, "windows[0] has no kind"),
    "traces only of the attribution window": ("collector.json", lambda doc: {**doc, "windows": [
        w for w in doc["windows"] if w["kind"] == "attribution"]}, "traces only of attribution windows"),
    "samples columns of different lengths": ("samples.json", lambda doc: {**doc, "value": doc["value"][:-1]},
                                             "columns of different lengths"),
    "meta.json a number": ("meta.json", lambda doc: 7, "meta.json: a JSON int"),
    "meta.json complete as text": ("meta.json", lambda doc: {**doc, "complete": "yes"}, "complete is 'yes'"),
}


@pytest.mark.parametrize("name", list(RUN_DAMAGE))
def test_a_garbled_run_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    file, change, expected = RUN_DAMAGE[name]
    d = _run_copy(tmp_path)
    (d / file).write_text(json.dumps(change(json.loads((d / file).read_text()))))
    line = _one_error(capsys, ["analyze", str(d)])
    assert expected in line and str(d / file) in line


def test_a_window_other_than_the_timed_ones_without_its_last_step_is_no_window(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An attribution window with a first step and no last one (a run cut short in it): the overhead figures skip it
    instead of failing."""
    d = _run_copy(tmp_path)
    doc = json.loads((d / "collector.json").read_text())
    doc["windows"] = [{k: v for k, v in w.items() if not (w["kind"] == "attribution" and k == "last_step")}
                      for w in doc["windows"]]
    assert any(w["kind"] == "attribution" and "last_step" not in w for w in doc["windows"])
    (d / "collector.json").write_text(json.dumps(doc))
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


@pytest.mark.parametrize("raw", [b"{\"status\": \"ok\xed\xa0\x80\"}", b"\xff\xfe{}", b"[" * 100_000])
def test_run_json_that_is_not_utf8_or_too_deep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          raw: bytes) -> None:
    d = _run_copy(tmp_path)
    (d / "meta.json").write_bytes(raw)
    line = _one_error(capsys, ["analyze", str(d)])
    assert str(d / "meta.json") in line and "invalid JSON" in line


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: {**s, "steps": "x"}, "'steps' is 'x', not an object"),
    (lambda s: {**s, "steps": {**s["steps"], "count": "x"}}, "'steps.count' is 'x'"),
    (lambda s: {**s, "kernels": [{"name": "k"}]}, "'kernels[0]' has no total_us"),
    (lambda s: {**s, "findings": [1]}, "'findings[0]' is '1', not an object"),
    (lambda s: {**s, "gpu": {**s["gpu"], "busy_pct": "high"}}, "'gpu.busy_pct' is 'high', not a number"),
], ids=["steps-text", "count-text", "row-without-time", "finding-number", "busy-text"])
def test_diff_refuses_a_summary_it_cannot_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 change: Callable[[dict], dict], expected: str) -> None:
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps(change(json.loads(SUMMARY.read_text()))))
    line = _one_error(capsys, ["diff", str(SUMMARY), str(bad)])
    assert expected in line and str(bad) in line


def test_a_lone_surrogate_in_a_name_is_written_as_replacement_characters(tmp_path: Path) -> None:
    doc = json.loads(SUMMARY.read_text())
    doc["kernels"][0]["name"] = "k\ud800"
    (tmp_path / "n.json").write_text(json.dumps(doc))
    assert main(["diff", str(SUMMARY), str(tmp_path / "n.json"), "--quiet", "--json", str(tmp_path / "d.json")]) == 0
    assert "k\ufffd" in (tmp_path / "d.json").read_text(encoding="utf-8")


def _huge_plan(doc: dict) -> dict:
    return {**doc, "plan": {**doc["plan"], "pre_baseline": [-(2**63), 3], "post_baseline": [17, 2**63 - 1]}}


def _huge_windows(doc: dict) -> dict:
    return {**doc, "windows": [{**w, "first_step": -(2**63), "last_step": 2**63 - 1} if w["kind"] == "attribution"
                               else {**w, "last_step": 2**63 - 1} if w["kind"] == "timing" else w
                               for w in doc["windows"]]}


@pytest.mark.parametrize("change", [_huge_plan, _huge_windows, lambda doc: {**doc, "plan": None}],
                         ids=["baselines-2**63-wide", "windows-2**63-wide", "no-plan"])
def test_step_ranges_of_collector_json_cost_what_the_run_recorded(tmp_path: Path,
                                                                  change: Callable[[dict], dict]) -> None:
    """A plan or a window claiming 2**63 steps (a garbled collector.json): the run report walks the steps that were
    recorded, not the range (before: a list of 2**63 steps, MemoryError or the machine's memory; or a hang)."""
    import signal

    d = _run_copy(tmp_path)
    doc = json.loads((d / "collector.json").read_text())
    recorded = len(doc["step_end_ns"])
    (d / "collector.json").write_text(json.dumps(change(doc)))

    def too_long(*_: object) -> None:
        raise TimeoutError("the run report walked the range, not the recorded steps")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    summary = json.loads((tmp_path / "s.json").read_text())
    overhead = summary.get("overhead") or summary["run"]["overhead"]
    assert all(0 <= s < recorded for s in overhead["baseline_steps"])


def test_a_window_never_stopped_is_read_to_its_start(tmp_path: Path) -> None:
    """``stopped_ns`` may be absent (a window the run never stopped): the samples are kept up to the windows' ends
    that are known, not a KeyError."""
    d = _run_copy(tmp_path)
    doc = json.loads((d / "collector.json").read_text())
    assert doc.get("samples_file")
    doc["windows"] = [{k: v for k, v in w.items() if k != "stopped_ns"} for w in doc["windows"]]
    (d / "collector.json").write_text(json.dumps(doc))
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


def test_a_decode_loop_without_runtime_durations_has_no_work_inside_its_iterations(tmp_path: Path) -> None:
    """A saved decode loop whose ``runtime.parquet`` lacks ``dur_ns`` (loading fills a missing column with zeros):
    the replays' launch calls, the iterations' host windows, are 0 ns long, so no kernel is launched inside one; the
    serving section is computed without them, not an IndexError."""
    d = read_kineto(GRAPH).save(tmp_path / "p")
    t = pq.read_table(d / "runtime.parquet")
    pq.write_table(t.drop(["dur_ns"]), d / "runtime.parquet")
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


def test_a_step_peak_that_was_not_read_is_left_out_of_the_peak(tmp_path: Path) -> None:
    """``memory.per_step`` peaks may be null (collector.json allows it): the run's peak is of the steps that have
    one (before: a TypeError comparing None with a number)."""
    from dnnprof.analysis.run_metrics import summarize_memory

    out = summarize_memory({"step": [0, 1, 2], "peak_allocated_bytes": [None, 7, 5],
                            "peak_reserved_bytes": [9, None, None]}, {"weights": 3, "grads": None}, 100, range(3))
    assert out["peak_allocated_bytes"] == 7 and out["peak_reserved_bytes"] == 9
    assert out["breakdown"]["activations_other_bytes"] == 4
    assert summarize_memory({"step": [0], "peak_allocated_bytes": [None]}, {"w": 1}, None, [0])[
        "peak_allocated_bytes"] is None
    d = _run_copy(tmp_path)
    doc = json.loads((d / "collector.json").read_text())
    per_step = doc["memory"]["per_step"]
    per_step["peak_allocated_bytes"] = [None] * len(per_step["peak_allocated_bytes"])
    (d / "collector.json").write_text(json.dumps(doc))
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


def test_a_memory_event_without_its_device_type_saves_and_loads(tmp_path: Path) -> None:
    """The reader keeps -1 (unknown) in a code column when the trace does not say (a ``[memory]`` event without
    "Device Type"); the saved profile loads again: -1 is no damage."""
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12, "s": "t",
         "args": {"Addr": 1, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048}}]}))
    p = read_kineto(src)
    assert (p.tables["memory_events"]["device_type"] == -1).all() and p.tables["memory_events"]["device_type"].size
    d = p.save(tmp_path / "p")
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("key", ["source", "base_time_ns", "ranks", "per_rank", "distributed", "event_counts",
                                 "notes"])
def test_null_metadata_of_a_saved_profile_reads_as_absent(tmp_path: Path, saved: Path, key: str,
                                                           missing: bool) -> None:
    """A key of profile.json's meta written as null is read as absent, with or without tables missing (which adds
    a note to meta.source; fuzz: AttributeError on a null source)."""
    d = tmp_path / "p"
    shutil.copytree(saved, d)
    doc = json.loads((d / "profile.json").read_text())
    if key == "notes":
        doc["meta"]["source"]["notes"] = None
    else:
        doc["meta"][key] = None
    (d / "profile.json").write_text(json.dumps(doc))
    if missing:
        (d / "memory_events.parquet").unlink()
    assert main(["analyze", str(d), "--quiet", "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["kernels"]
    if missing:
        assert any("memory_events" in n for n in summary["source"]["notes"])
