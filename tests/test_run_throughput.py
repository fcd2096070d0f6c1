"""``dnnprof run``'s throughput: each rate goes with the median step time printed beside it, and a stall among the
steps shows as the rate over all of them, said so, instead of silently dragging the figure down."""

from __future__ import annotations

from typing import Any

import pytest

from dnnprof.analysis import run_metrics as metrics
from dnnprof.render.run_lines import throughput_line

MS = 1_000_000


def collector(durations_ms: list[float], timed: range, baseline: tuple[range, range], batch: int = 8) -> dict[str, Any]:
    """Collector results for back-to-back steps of these durations (1 ms between steps), ``batch`` items each."""
    starts, ends, t = [], [], 0
    for d in durations_ms:
        starts.append(t)
        ends.append(t + int(d * MS))
        t = ends[-1] + MS
    return {"step_start_ns": starts, "step_end_ns": ends, "step_items": [batch] * len(durations_ms),
            "plan": {"pre_baseline": [baseline[0].start, baseline[0].stop],
                     "post_baseline": [baseline[1].start, baseline[1].stop]},
            "windows": [{"kind": "timing", "first_step": timed.start, "last_step": timed.stop - 1}]}


# Steps 0-1 warm-up, 2-5 unprofiled (one stalls 2 s: a checkpoint), 6-15 profiled at 200 ms (one at 1.2 s),
# 16-17 unprofiled again.
DURATIONS = [900, 400, 169.4, 169.4, 2000, 169.4, *([200] * 9), 1200, 169.4, 169.4]
COL = collector(DURATIONS, range(6, 16), (range(2, 6), range(16, 18)))


def test_rates_go_with_the_median_step() -> None:
    t = metrics.throughput(COL, None)
    assert t["step_time_median_us"] == pytest.approx(200_000)
    assert t["items_per_s"] == pytest.approx(8 / 0.2) and t["steps_per_s"] == pytest.approx(5.0)
    assert t["wall_items_per_s"] == pytest.approx(80 / 3.0, rel=1e-4)
    assert t["wall_steps_per_s"] == pytest.approx(10 / 3.0, rel=1e-4)
    assert t["unprofiled_steps"] == 6 and t["unprofiled_step_time_median_us"] == pytest.approx(169_400)
    assert t["unprofiled_items_per_s"] == pytest.approx(8 / 0.1694, rel=1e-4)
    assert t["unprofiled_wall_items_per_s"] == pytest.approx(48 / (5 * 0.1694 + 2.0), rel=1e-4)


def test_the_run_line_prints_each_rate_beside_its_step_time() -> None:
    line = throughput_line(metrics.throughput(COL, None))
    assert line == ("10 steps profiled, step time median 200.00 ms, 40.0 samples/s (26.7 samples/s over all 10 steps, "
                    "slow ones included) (unprofiled: median 169.40 ms, 47.2 samples/s; 16.9 samples/s over all 6 "
                    "steps, slow ones included)")


def test_steady_steps_print_one_rate() -> None:
    steady = collector([300, 300, *([100] * 16)], range(6, 16), (range(2, 6), range(16, 18)))
    line = throughput_line(metrics.throughput(steady, None))
    assert line == ("10 steps profiled, step time median 100.00 ms, 80.0 samples/s (unprofiled: median 100.00 ms, "
                    "80.0 samples/s)")


def test_unknown_items_give_no_rate() -> None:
    col = {**COL, "step_items": [8] * 16 + [None, None]}  # the baseline steps after the window have no count
    t = metrics.throughput(col, None)
    assert t["items_per_s"] == pytest.approx(40.0)
    assert t["unprofiled_items_per_s"] is None and t["unprofiled_wall_items_per_s"] is None
    assert metrics.rates([], []) == {"steps_per_s": None, "items_per_s": None, "wall_steps_per_s": None,
                                     "wall_items_per_s": None}
