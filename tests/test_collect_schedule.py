"""The capture schedule is a pure function of the number of completed steps."""

from __future__ import annotations

import pytest

from dnnprof.collect.config import CollectorConfig
from dnnprof.collect.schedule import Plan


def _timeline(plan: Plan, upto: int) -> dict[int, tuple[str, ...]]:
    return {k: a for k in range(1, upto + 1) if (a := plan.actions(k))}


def test_default_mode_windows_in_order() -> None:
    plan = Plan(warmup=5, steps=10, attribution=2, baseline_after=3)
    assert plan.main == range(5, 15)
    # One unprofiled step between profiler sessions (CUPTI teardown), and before the baseline after them.
    assert plan.attribution_window == range(16, 18)
    assert plan.pre_baseline == range(2, 5)
    assert plan.post_baseline == range(19, 22)
    assert _timeline(plan, 30) == {
        2: ("start_sampling",),
        5: ("start_main",),
        15: ("stop_main",),
        16: ("start_attribution",),
        18: ("stop_attribution", "stop_sampling", "export"),
        22: ("finish",),
    }
    assert plan.total_steps == 22
    assert [plan.window_of(s) for s in (0, 4, 5, 14, 15, 16, 17, 18, 19, 21, 22)] == [
        "warmup", "warmup", "main", "main", "gap", "attribution", "attribution", "gap", "baseline_after",
        "baseline_after", "after"]


def test_full_mode_has_one_window_and_exports_when_it_stops() -> None:
    plan = Plan(warmup=1, steps=2, attribution=0, baseline_after=0)
    assert plan.pre_baseline == range(1, 1)
    assert _timeline(plan, 10) == {1: ("start_sampling", "start_main"), 3: ("stop_main", "stop_sampling", "export",
                                                                             "finish")}


def test_baseline_uses_at_most_the_later_warmup_steps() -> None:
    assert Plan(warmup=20, steps=1).pre_baseline == range(15, 20)
    assert Plan(warmup=3, steps=1).pre_baseline == range(2, 3)
    assert Plan(warmup=2, steps=1).pre_baseline == range(2, 2)  # step 1 pays for the first profiler's teardown
    assert Plan(warmup=3, steps=4, baseline_after=2).is_baseline(2)
    assert not Plan(warmup=3, steps=4, baseline_after=2).is_baseline(3)
    assert Plan(warmup=3, steps=4, baseline_after=2).post_baseline == range(8, 10)


@pytest.mark.parametrize("kwargs, message", [
    ({"warmup": 0, "steps": 3}, "warm-up must be at least 1"),
    ({"warmup": 2, "steps": 0}, "at least 1 step"),
    ({"warmup": 2, "steps": 2, "attribution": -1}, "cannot be negative"),
])
def test_bad_plans_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plan(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "fast"}, "unknown capture mode 'fast'; modes: default, full, counters"),
    ({"warmup_steps": 1}, "--warmup-steps must be at least 2"),
    ({"steps": 0}, "--steps must be at least 1"),
    ({"nvml_period_s": 5.0}, r"outside 0\.005–1 s"),
    ({"step_marker": " "}, "non-empty range name"),
])
def test_bad_capture_settings_name_the_setting(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CollectorConfig(**kwargs).validate()


def test_config_round_trips_through_json(tmp_path) -> None:
    cfg = CollectorConfig(mode="full", steps=7, step_marker="train_step", workload={"name": "gpt2-tiny"})
    (tmp_path / "collector_config.json").write_text(cfg.to_json())
    assert CollectorConfig.load(tmp_path) == cfg


MS = 1_000_000


def test_warm_up_waits_for_time_and_settled_steps() -> None:
    from dnnprof.collect.schedule import STEADY_MAX_EXTRA_S, STEADY_MAX_EXTRA_STEPS, warm

    steady = [10 * MS] * 8
    assert warm(steady, 2000 * MS, 0, 0) == (True, "steady")
    assert warm(steady, 500 * MS, 0, 0) == (False, "short")  # under a second since step 1
    # The resnet50 inference profile on an H100: steps still twice as slow as later ones.
    assert warm([20 * MS, 19 * MS, 12 * MS, 11 * MS], 2000 * MS, 0, 0) == (False, "changing")
    assert warm([20 * MS, 19 * MS, 12 * MS, 11 * MS, 11 * MS, 11 * MS, 11 * MS], 2000 * MS, 3, 0)[0]
    assert warm([10 * MS, 10.5 * MS, 11 * MS, 10 * MS], 2000 * MS, 0, 0) == (True, "steady")  # within 10 %
    assert warm([10 * MS], 2000 * MS, 0, 0) == (False, "changing")  # too few steps to tell
    # Never forever: a run that keeps changing starts its window at the limit.
    assert warm([10 * MS, 20 * MS] * 4, 2000 * MS, STEADY_MAX_EXTRA_STEPS, 0) == (True, "cap")
    assert warm([10 * MS, 20 * MS] * 4, 2000 * MS, 3, int(STEADY_MAX_EXTRA_S * 1e9)) == (True, "cap")
