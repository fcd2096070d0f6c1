"""GPU-side step windows on other people's real traces: positive, disjoint, ordered, inside the GPU span, and the
busy % they give equal to the documented definition computed here independently from the raw GPU intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
pytestmark = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"real foreign traces not present ({FOREIGN})")

#: Traces with GPU work and ProfilerStep markers: the A100 one has 872 GPU events without a launch record and
#: work of one step still running on other streams when the next step's work starts.
STEPPED = ["hta__negative_queue_length_rank0.json.gz", "hta__mi250_minitoy_train.json.gz", "hta__nccl_data.json.gz",
           "hta__ns_resolution_rank0.json.gz", "hta__df_index_resolver.json.gz", "hta__trace_diff_control.json.gz"]


def _union_ns(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """Length of the union of [s, e) clipped to [lo, hi): a plain sweep, independent of analysis.intervals."""
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(np.clip(s, lo, hi).tolist(), np.clip(e, lo, hi).tolist(), strict=True)):
        if b <= a:
            continue
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + (cur_e - cur_s if cur_e is not None else 0)


@pytest.mark.parametrize("name", STEPPED)
def test_gpu_windows_disjoint_inside_span_and_busy_as_documented(name: str) -> None:
    from dnnprof.analysis.summary import analyse
    from dnnprof.ingest.detect import open_profile

    profile = open_profile(FOREIGN / name)
    rank = profile.ranks[0]
    a = analyse(profile, rank)
    p, u = a.profile, a.utilization
    steps = p.tables["steps"]
    sel = np.flatnonzero((steps["rank"] == rank) & (steps["gpu_start_ns"] >= 0))
    sel = sel[np.argsort(steps["start_ns"][sel], kind="stable")]
    lo, hi = steps["gpu_start_ns"][sel], steps["gpu_end_ns"][sel]
    assert sel.size and (hi > lo).all(), "every GPU window is positive"
    assert (lo[1:] >= hi[:-1]).all(), "windows are ordered and disjoint"

    # The GPU span of the device's launched step work, from the raw tables.
    rt_step = p.tables["runtime"]["step"]
    s_all, e_all, s_step, e_step = [], [], [], []
    for table in ("kernels", "memcpy", "memset"):
        t = p.tables[table]
        mine = (t["rank"] == rank) & (t["device"] == u.device)
        s, e = t["start_ns"][mine], t["start_ns"][mine] + t["dur_ns"][mine]
        s_all.append(s)
        e_all.append(e)
        lr = t["launch_row"][mine]
        in_step = (lr >= 0) & (rt_step[np.clip(lr, 0, None)] >= 0) if rt_step.size else lr < -1
        s_step.append(s[in_step])
        e_step.append(e[in_step])
    span_lo, span_hi = int(np.concatenate(s_step).min()), int(np.concatenate(e_step).max())
    assert lo[0] >= span_lo and hi[-1] <= span_hi
    assert int((hi - lo).sum()) <= span_hi - span_lo
    assert u.total("window_ns") == int((hi - lo).sum())
    busy = _union_ns(np.concatenate(s_all), np.concatenate(e_all), int(lo[0]), int(hi[-1]))
    assert u.busy_pct == pytest.approx(100.0 * busy / (int(hi[-1]) - int(lo[0])), abs=1e-6)


def test_gpu_events_without_launch_placed_by_gpu_time() -> None:
    """872 GPU events of the A100 trace have no launch record: each belongs to the GPU window its start falls in
    (windows built from launched work), never to a step by host time; 4 memsets run before the first launched
    GPU work of the first step (in its host window): they are in no step."""
    from dnnprof.analysis.summary import analyse
    from dnnprof.ingest.detect import open_profile

    a = analyse(open_profile(FOREIGN / "hta__negative_queue_length_rank0.json.gz"), 0)
    p = a.profile
    steps = p.tables["steps"]
    first = min(int(p.tables[tb]["start_ns"][(p.tables[tb]["launch_row"] >= 0) & (p.tables[tb]["step"] >= 0)].min())
                for tb in ("kernels", "memcpy", "memset"))
    assert int(steps["gpu_start_ns"].min()) == first
    n, outside = 0, 0
    for table in ("kernels", "memcpy", "memset"):
        t = p.tables[table]
        orphan = np.flatnonzero(t["launch_row"] < 0)
        n += orphan.size
        for r in orphan.tolist():
            s = int(t["start_ns"][r])
            inside = np.flatnonzero((steps["gpu_start_ns"] <= s) & (s < steps["gpu_end_ns"]))
            expect = int(steps["number"][inside[0]]) if inside.size else -1
            assert int(t["step"][r]) == expect
            outside += expect == -1
    assert (n, outside) == (872, 4)


def test_step_positions_match_a_lookup_in_file_order() -> None:
    """The search that places GPU rows in steps gives what a dict from step number to position gives, repeated
    and missing numbers included."""
    from dnnprof.model.steps import _positions

    rng = np.random.default_rng(7)
    for _ in range(50):
        nums = rng.integers(-3, 12, size=int(rng.integers(0, 9))).astype(np.int32)
        values = rng.integers(-5, 15, size=40).astype(np.int32)
        lookup = {int(v): i for i, v in enumerate(nums.tolist())}
        by_num = np.argsort(nums, kind="stable")
        got = _positions(values, nums[by_num], by_num)
        assert got.tolist() == [lookup.get(int(v), -1) for v in values.tolist()]


@pytest.mark.parametrize("name", STEPPED[:3])
def test_host_rows_placed_in_steps_a_block_at_a_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host rows are placed in steps a block of rows at a time (memory bounded by the block): any block size gives
    the same step of every row."""
    from dnnprof.ingest.kineto import read_kineto
    from dnnprof.model import steps

    whole = read_kineto(FOREIGN / name)
    monkeypatch.setattr(steps, "_BLOCK_ROWS", 7)
    blocks = read_kineto(FOREIGN / name)
    for table in ("ops", "runtime", "memory_events", "kernels"):
        assert blocks.tables[table]["step"].tolist() == whole.tables[table]["step"].tolist()
    assert (whole.tables["ops"]["step"] >= 0).any()
