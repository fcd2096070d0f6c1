"""Analysis on real traces, checked against simple reference implementations."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import CPU_MLP, DEEPSPEECH, GPT2, load_raw
from dnnprof.analysis.attribution import PHASES, attribute
from dnnprof.analysis.intervals import covered, covered_per_window, gaps, merge
from dnnprof.analysis.steps import with_steps
from dnnprof.analysis.summary import summarize
from dnnprof.analysis.utilization import utilization
from dnnprof.ingest.kineto import read_kineto


def _reference_union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH])
def test_busy_pct_matches_naive_reference(path) -> None:
    p = read_kineto(path)
    u = utilization(p)
    raw = load_raw(path)
    acts = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in raw["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    steps = p.tables["steps"]
    for i, st in enumerate(u.steps):
        lo, hi = int(steps["gpu_start_ns"][i]), int(steps["gpu_end_ns"][i])
        assert st.window_ns == hi - lo
        assert st.busy_ns == pytest.approx(_reference_union(acts, lo, hi), abs=2)
        assert st.kernel_ns + st.memcpy_ns + st.memset_ns + st.idle_ns == st.window_ns
        assert sum(st.idle_by_cause_ns.values()) == st.idle_ns


def test_interval_helpers_against_reference() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 10_000, 500)
    e = s + rng.integers(0, 300, 500)
    ref = _reference_union(list(zip(s.tolist(), e.tolist(), strict=True)), 2_000, 7_000)
    assert covered(s, e, 2_000, 7_000) == ref
    ms, me = merge(s, e)
    assert np.all(ms[1:] > me[:-1])
    lo = np.array([0, 2_000, 5_000])
    hi = np.array([10_300, 7_000, 5_001])
    got = covered_per_window(ms, me, lo, hi)
    for i in range(3):
        assert got[i] == _reference_union(list(zip(s.tolist(), e.tolist(), strict=True)), lo[i], hi[i])
    gs, ge = gaps(ms, me, 2_000, 7_000)
    assert (ge - gs).sum() == 5_000 - ref


def test_deepspeech_numbers() -> None:
    doc = summarize(read_kineto(DEEPSPEECH))
    assert doc["steps"]["count"] == 1
    # Real DeepSpeech on an H200: GEMM-dominated, cuDNN RNN GEMMs on TF32 tensor cores, pageable copies and syncs.
    assert doc["families"][0]["family"] == "gemm"
    assert 40 < doc["gpu"]["tensor_core_pct"] < 60
    assert doc["gpu"]["idle_breakdown_us"]["sync"] > 0
    assert {(m["kind"], m["host_memory"]) for m in doc["memcpy"]} >= {("HtoD", "pageable"), ("DtoH", "pageable")}
    assert doc["layers"][0]["name"] == "aten::rnn_relu"
    assert doc["attribution"]["attributed_pct"] > 95


def test_gpt2_phases_and_layers() -> None:
    p = read_kineto(GPT2)
    a = attribute(p)
    k = p.tables["kernels"]
    by_phase = {ph: int(k["dur_ns"][a.phase == i].sum()) for i, ph in enumerate(PHASES)}
    assert by_phase["backward"] > by_phase["forward"] > by_phase["optimizer"] > 0
    names = p.names(k["name_id"]).astype(str)
    # AdamW (foreach) runs multi_tensor_apply kernels: all of them are optimizer-phase.
    mta = np.char.find(names, "multi_tensor_apply_kernel") >= 0
    assert np.all(a.phase[mta] == PHASES.index("optimizer"))
    # Backward GEMMs of nn.Linear land on the forward op through the fwdbwd link.
    doc = summarize(p)
    gemm_layers = {x["layer"] for x in doc["kernels"] if x["family"] == "gemm" and x["phase"] == "backward"}
    assert "aten::linear" in gemm_layers or "aten::addmm" in gemm_layers
    assert doc["attribution"]["attributed_pct"] >= 95


def _strip(names: tuple[str, ...]):
    def edit(doc: dict) -> None:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith(names)]
    return edit


def test_steps_from_optimizer_when_no_profiler_steps(variant) -> None:
    p = with_steps(read_kineto(variant(GPT2, _strip(("ProfilerStep#",)))))
    steps = p.tables["steps"]
    assert steps["number"].size == 1  # two optimizer steps bound one full iteration
    assert steps["source"][0] == 2
    ref = read_kineto(GPT2).tables["steps"]["dur_ns"]
    assert steps["dur_ns"][0] == pytest.approx(ref.mean(), rel=0.15)


def test_steps_from_launch_pattern_when_no_markers(variant) -> None:
    def repeat_without_markers(doc: dict) -> None:
        # Two real GPT-2 steps, played twice more later on the same clock: four iterations, no markers at all.
        events = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith(("ProfilerStep#", "Optimizer."))]
        span = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e) - min(e["ts"] for e in events if "ts" in e)
        shifted = []
        for e in events:
            if e.get("ph") == "M":
                continue
            c = dict(e)
            c["ts"] = e["ts"] + span + 1000.0
            if "args" in c:
                c["args"] = dict(c["args"])
                for key in ("correlation", "External id"):
                    if key in c["args"]:
                        c["args"][key] += 10_000_000
            if "id" in c and c.get("cat") in ("ac2g", "fwdbwd"):
                c["id"] = c["id"] + 10_000_000
            shifted.append(c)
        doc["traceEvents"] = events + shifted

    p = with_steps(read_kineto(variant(GPT2, repeat_without_markers)))
    steps = p.tables["steps"]
    assert steps["source"].tolist() and steps["source"][0] == 3  # "pattern"
    assert steps["number"].size == 3  # four iterations found; three complete windows between their starts
    ref = read_kineto(GPT2).tables["steps"]["dur_ns"].mean()
    assert np.median(steps["dur_ns"]) == pytest.approx(ref, rel=0.1)


def test_single_iteration_without_markers_is_one_window(variant) -> None:
    doc = summarize(read_kineto(variant(DEEPSPEECH, _strip(("ProfilerStep#", "Optimizer.")))))
    assert doc["steps"]["count"] == 0
    assert doc["gpu"]["window"] == "whole_trace"


def test_no_steps_whole_trace(variant) -> None:
    def keep_few_kernels(doc: dict) -> None:
        seen = 0
        out = []
        for e in doc["traceEvents"]:
            if str(e.get("name", "")).startswith(("ProfilerStep#", "Optimizer.")):
                continue
            if e.get("cat") == "kernel":
                seen += 1
                if seen > 3:
                    continue
            out.append(e)
        doc["traceEvents"] = out

    doc = summarize(read_kineto(variant(GPT2, keep_few_kernels)))
    assert doc["steps"]["count"] == 0
    assert doc["gpu"]["window"] == "whole_trace"
    assert doc["gpu"]["window_us"] > 0


def test_cpu_only_summary() -> None:
    doc = summarize(read_kineto(CPU_MLP))
    assert doc["gpu"]["has_activity"] is False
    assert doc["kernels"] == []
    assert doc["steps"]["count"] == 3


def test_host_ops_self_time_against_raw_nesting() -> None:
    from dnnprof.analysis.host_ops import host_ops

    p = read_kineto(CPU_MLP)
    rows = host_ops(p)
    assert rows and rows[0].self_ns <= rows[0].total_ns
    by = {r.name: r for r in rows}
    # aten::linear only wraps aten::t and aten::addmm: its self time is its duration minus theirs.
    ops = p.tables["ops"]
    names = p.names(ops["name_id"]).astype(str)
    lin = np.flatnonzero((names == "aten::linear") & (ops["step"] >= 0))
    kids = np.isin(ops["parent_row"], lin)
    expected = ops["dur_ns"][lin].sum() - ops["dur_ns"][kids].sum()
    assert by["aten::linear"].self_ns == expected
    assert by["aten::linear"].calls == lin.size
    assert sum(r.self_pct for r in rows) == pytest.approx(100)


@pytest.mark.parametrize("block", [1, 5, 64])
def test_host_ops_summed_a_block_of_rows_at_a_time(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Children's time is added to their parents a block of ops at a time (a big trace's temporaries are a block's):
    the same rows, to the nanosecond, whatever the block."""
    from dnnprof.analysis import host_ops as mod

    p = read_kineto(CPU_MLP)
    whole = mod.host_ops(p)
    monkeypatch.setattr(mod, "_BLOCK_ROWS", block)
    assert p.tables["ops"]["start_ns"].size > 4 * block
    assert mod.host_ops(p) == whole


@pytest.mark.parametrize("block", [1, 5, 64, 1 << 20])
def test_host_ops_with_parents_after_their_children(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved profile's rows may come in any order: children's time reaches parents in any block, before or
    after theirs."""
    from dnnprof.analysis import host_ops as mod

    p = read_kineto(CPU_MLP)
    whole = mod.host_ops(p)
    ops = p.tables["ops"]
    order = np.arange(ops["start_ns"].size)[::-1]  # every parent after its children
    new_row = np.empty_like(order)
    new_row[order] = np.arange(order.size)
    flipped = {c: v[order] for c, v in ops.items()}
    flipped["parent_row"] = np.where(flipped["parent_row"] >= 0, new_row[flipped["parent_row"]], -1)
    assert (flipped["parent_row"] > np.arange(order.size)).any()
    p.tables["ops"] = flipped
    monkeypatch.setattr(mod, "_BLOCK_ROWS", block)
    assert mod.host_ops(p) == whole


@pytest.mark.parametrize("block", [1, 2, 5, 1 << 20])
@pytest.mark.parametrize("seed", range(6))
def test_inherit_gives_the_nearest_labelled_ancestor_whatever_the_block(block: int, seed: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The value of each op's nearest labelled ancestor-or-self, as a walk in row order (parents come first) gives
    it, when rows are updated a block at a time."""
    from dnnprof.analysis import attribution as mod

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    parent = np.array([-1 if i == 0 or rng.random() < 0.1 else int(rng.integers(max(0, i - [3, 50][seed % 2]), i))
                       for i in range(n)], dtype=np.int32)
    own = np.where(rng.random(n) < [0.05, 0.3, 0.0][seed % 3], rng.integers(0, 1000, n), -1)
    want = []
    for i in range(n):
        want.append(int(own[i]) if own[i] >= 0 else (want[parent[i]] if parent[i] >= 0 else -1))
    monkeypatch.setattr(mod, "_INHERIT_ROWS", block)
    own_before, parent_before = own.copy(), parent.copy()
    got = mod.inherit(own, parent)
    assert got.tolist() == want and got.dtype == np.int32  # rows and string ids: 32 bits, as the tables keep them
    assert (own == own_before).all() and (parent == parent_before).all()  # the caller's columns are not written


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(6))
def test_inherit_where_a_parent_comes_after_its_child(block: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows in any order (a profile built elsewhere than the nested tables): the same answers as a walk up each
    row's ancestors, and the row-order method is not taken."""
    from dnnprof.analysis import attribution as mod

    rng = np.random.default_rng(50 + seed)
    n = int(rng.integers(2, 300))
    ordered = np.array([-1 if i == 0 or rng.random() < 0.1 else int(rng.integers(0, i)) for i in range(n)])
    perm = rng.permutation(n)  # row perm[i] holds the op i of the ordered forest
    where = np.argsort(perm)
    parent = np.full(n, -1, dtype=np.int32)
    parent[where] = np.where(ordered >= 0, where[np.maximum(ordered, 0)], -1)
    own = np.where(rng.random(n) < 0.2, rng.integers(0, 1000, n), -1)
    want = []
    for i in range(n):
        j = i
        while j >= 0 and own[j] < 0:
            j = int(parent[j])
        want.append(int(own[j]) if j >= 0 else -1)
    monkeypatch.setattr(mod, "_INHERIT_ROWS", block)
    if not (parent < np.arange(n)).all():  # some parent after its child: the row-order method must not run

        def refuse(*_: object) -> None:
            raise AssertionError("rows answered in row order though a parent comes after its child")

        monkeypatch.setattr(mod, "_inherit_block", refuse)
    got = mod.inherit(own, parent)
    assert got.tolist() == want


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("block", [1, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(4))
def test_inherit_in_row_order_is_the_pointer_jumping(dtype: type, block: int, seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Parents first, labels of any width (below -1 too, which count as unlabelled): the row-order blocks give what
    pointer jumping over the whole table gives, in the same type."""
    from dnnprof.analysis import attribution as mod

    rng = np.random.default_rng(70 + seed)
    n = int(rng.integers(1, 300))
    parent = np.array([int(rng.integers(-3, i)) if i else -1 for i in range(n)], dtype=np.int32)  # -3, -2: none
    own = np.where(rng.random(n) < 0.2, rng.integers(0, 100, n), rng.choice([-1, -1, -1, -7], n)).astype(dtype)
    monkeypatch.setattr(mod, "_INHERIT_ROWS", block)
    want = mod._jump_pointers(own.astype(np.int64), parent.astype(np.int64))
    got = mod.inherit(own, parent)
    assert mod.parents_first(parent) and got.tolist() == want.tolist()
    assert got.dtype == (np.int64 if (own < -1).any() else (dtype if dtype != np.int64 else np.int32))


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_inherit_in_place_writes_the_labels_it_was_given(dtype: type) -> None:
    """A spent column of labels takes the answer (no second column of every op); narrow flags stay narrow."""
    from dnnprof.analysis.attribution import inherit

    own = np.array([1, -1, -1, -1, 2, -1], dtype=dtype)
    parent = np.array([-1, 0, 1, -1, 3, 4], dtype=np.int32)
    got = inherit(own, parent, in_place=True)
    assert got is own and got.dtype == dtype and got.tolist() == [1, 1, 1, -1, 2, 2]
    kept = np.array([1, -1], dtype=dtype)
    assert inherit(kept, np.array([-1, 0], dtype=np.int32)) is not kept and kept.tolist() == [1, -1]
    table_column = np.array([5, -1, -1, 6], dtype=dtype)[1:]  # a view (a table's column): never written
    assert inherit(table_column, np.array([-1, 0, -1], dtype=np.int32), in_place=True).tolist() == [-1, -1, 6]
    assert table_column.tolist() == [-1, -1, 6] and table_column.base is not None
    unlabelled = np.full(4, -1, dtype=dtype)
    assert inherit(unlabelled, np.array([-1, 0, 1, 2], dtype=np.int32)).tolist() == [-1] * 4


def test_inherit_keeps_values_beyond_32_bits() -> None:
    from dnnprof.analysis.attribution import inherit

    got = inherit(np.array([2**40, -1, -1, -5]), np.array([-1, 0, 1, 2], dtype=np.int32))
    assert got.tolist() == [2**40] * 4 and got.dtype == np.int64
