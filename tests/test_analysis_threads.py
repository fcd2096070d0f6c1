"""The analysis computes the GPU's busy time and the occupancy in a second thread, beside the attribution: the same
results as one after the other, errors raised in the caller, and the profile's string index built once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.analysis import summary
from dnnprof.analysis.attribution import attribute
from dnnprof.analysis.steps import with_steps
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.name)
def test_the_threaded_analysis_is_the_serial_one(path) -> None:
    threaded = summary.analyse(read_kineto(path))
    profile = with_steps(read_kineto(path), 0)
    attribution = attribute(profile)
    device = summary.primary_device(profile, 0)
    occupancy = summary._occupancy(profile, device, 0)
    util = summary.utilization(profile, 0)
    assert threaded.utilization == util
    assert threaded.profile.strings == profile.strings  # the attribution's labels, interned in the same order
    assert occupancy is not None and np.isfinite(occupancy["theoretical_occupancy_pct"]).any()
    for a, b in zip(threaded.kernels, summary.kernel_summary(profile, attribution, 0, occupancy), strict=True):
        assert (a.name, a.total_ns, a.layer, a.phase, a.theoretical_occupancy_pct) == \
            (b.name, b.total_ns, b.layer, b.phase, b.theoretical_occupancy_pct)


def test_an_error_beside_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object) -> None:
        raise ArithmeticError(f"boom in {threading.current_thread().name}")

    monkeypatch.setattr(summary, "utilization", failing)
    with pytest.raises(ArithmeticError, match="boom in dnnprof-analysis"):
        summary.analyse(read_kineto(DEEPSPEECH))


def test_the_string_index_is_built_once_whichever_threads_ask() -> None:
    profile = Profile(strings=[f"s{i}" for i in range(200_000)])
    start = threading.Barrier(8)
    seen: list[int] = []
    indexes: set[int] = set()

    def ask() -> None:
        start.wait()
        seen.append(profile.string_id("s199999"))
        indexes.add(id(profile._index()))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    new = profile.intern("new")  # while they build it, or after
    for t in threads:
        t.join()
    assert seen == [199_999] * 8
    assert len(indexes) == 1  # one dict, built once: a second build would have dropped "new"
    assert new == 200_000 and profile.string_id("new") == 200_000 and profile.strings[-1] == "new"


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.name)
def test_the_rules_prepared_beside_the_summary_find_the_same(path) -> None:
    from dnnprof.analysis.rules import findings_from_analysis, prepare
    from dnnprof.runs.report import report

    analysis, doc = report(read_kineto(path))  # prepared beside the summary
    assert doc["findings"]
    fresh = summary.summary_of(summary.analyse(read_kineto(path)))
    fresh["findings"] = findings_from_analysis(summary.analyse(read_kineto(path)), fresh)  # no preparation
    assert doc == fresh
    again = summary.summary_of(analysis)
    assert findings_from_analysis(analysis, again, prepare(analysis)) == doc["findings"]


def test_a_context_asked_for_the_document_before_it_exists_says_so() -> None:
    from dnnprof.analysis.rules import prepare

    ctx = prepare(summary.analyse(read_kineto(DEEPSPEECH)))
    with pytest.raises(RuntimeError, match="before it was made"):
        ctx.vendor  # noqa: B018 - reads the document's device
    assert ctx.with_doc({"device": {"vendor": "nvidia"}}).vendor == "nvidia"


def test_a_huge_trace_is_analysed_one_part_after_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    utilization = summary.utilization

    def recorded(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return utilization(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(summary, "utilization", recorded)
    summary.analyse(read_kineto(DEEPSPEECH))
    monkeypatch.setattr(summary, "SIDE_BY_SIDE_MAX_ROWS", 1000)  # fewer than its kernels
    summary.analyse(read_kineto(DEEPSPEECH))
    assert threads == ["dnnprof-analysis", threading.current_thread().name]


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.name)
def test_checks_made_before_the_summary_are_the_checks_made_after(path) -> None:
    from dnnprof.analysis.checks import analysis_checks, profile_checks

    a = summary.analyse(read_kineto(path))
    doc = summary.summary_of(a)  # made its checks in another thread
    made = analysis_checks(a)
    assert set(made) == {"profile_invariants", "step_durations", "step_windows", "forward_present", "busy_vs_nvml"}
    assert [c.to_dict() for c in profile_checks(a, doc, made)] == [c.to_dict() for c in profile_checks(a, doc)] \
        == doc["checks"]


def test_names_read_while_another_thread_interns() -> None:
    profile = Profile(strings=["a"])
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not done.is_set():
            try:
                assert profile.names(np.array([-1, 0])).tolist() == ["", "a"]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(100_000):
        profile.intern(f"s{i}")
    done.set()
    reader.join()
    assert not errors, errors[0]


def test_the_caller_failing_first_waits_for_the_thread() -> None:
    from dnnprof.analysis.beside import Beside

    started, finished = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        threading.Event().wait(0.2)
        finished.set()
        raise ValueError("the thread's own error")

    with pytest.raises(ZeroDivisionError), Beside(slow) as later:
        started.wait()
        1 / 0  # noqa: B018 - the caller fails before asking for the result
    assert finished.is_set()  # the block did not end before the thread
    assert not [t for t in threading.enumerate() if t.name == "dnnprof-analysis"]
    with pytest.raises(ValueError, match="own error"):
        later()  # its error is kept for whoever asks


@pytest.mark.parametrize("path", [DEEPSPEECH, GPT2], ids=lambda p: p.name)
def test_a_mapped_profile_analysed_side_by_side_is_the_in_memory_one(path) -> None:
    import json

    from dnnprof.ingest import kineto
    from dnnprof.runs.report import report

    mapped = kineto._read_profile(path, None, spill_min_bytes=0)  # tables in mapped files, pages given back
    assert isinstance(mapped.tables["kernels"]["start_ns"].base, memoryview)
    assert summary.side_by_side(mapped)
    plain = kineto._read_profile(path, None, spill_min_bytes=1 << 62)
    assert json.dumps(report(mapped)[1], sort_keys=True) == json.dumps(report(plain)[1], sort_keys=True)
