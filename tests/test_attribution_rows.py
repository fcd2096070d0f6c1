"""The attribution reads the features of the ops that launched work and of their ancestors and forward ops only
(``_op_features(profile, launching)``): on real traces those features are the every-op features at those rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import CPU_MLP, DATA, DEEPSPEECH, GPT2
from dnnprof.analysis import attribution
from dnnprof.analysis.attribution import _op_features, attribute
from dnnprof.ingest.assemble import assemble, load_collector
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
TRACES = [GPT2, DEEPSPEECH, CPU_MLP, DATA / "graph_replay_h100" / "trace.json.gz",
          *sorted((DATA / "h100_recorded").glob("*.json.gz"))]
FOREIGN_TRACES = ["hta__alexnet_critical_path.json.gz", "hta__mi250_minitoy_train.json.gz",
                  "kineto__tbplugin_resnet50_autograd_api_2021-01.json.gz", "hta__trace_diff_control.json.gz"]
RUNS = ("hf_fused", "lightning", "cuda_fp16")


def _same_features(p: Profile, table: str = "kernels") -> int:
    every = _op_features(p)
    launching = p.tables[table]["op_row"]
    some = _op_features(p, launching)
    rows = some.pop("row")
    assert np.all(np.diff(rows) > 0)
    assert set(launching[launching >= 0].tolist()) <= set(rows.tolist())
    for key, col in some.items():
        want = every[key][rows]
        if key == "top_op":  # a feature row, there as here
            col = np.where(col >= 0, rows[np.clip(col, 0, None)], -1)
        assert np.array_equal(col, want), key
    return rows.size


def _attributions_equal(p: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    got = attribute(p)
    with monkeypatch.context() as m:  # every op's features, as before
        full = attribution._op_features
        m.setattr(attribution, "_op_features", lambda prof, launching=None: full(prof))
        want = attribute(p)
    for name in ("layer", "op_name", "source", "phase"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.level == want.level


@pytest.mark.parametrize("path", TRACES, ids=lambda x: f"{x.parent.name}/{x.name}")
def test_feature_rows_of_a_recorded_trace(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = read_kineto(path)
    n = _same_features(p)
    if p.tables["kernels"]["start_ns"].size and p.tables["ops"]["start_ns"].size:
        assert n < p.tables["ops"]["start_ns"].size  # Python frames and host-only ops are not read
    _attributions_equal(p, monkeypatch)


@pytest.mark.parametrize("name", FOREIGN_TRACES)
def test_feature_rows_of_a_foreign_trace(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = FOREIGN / name
    if not path.exists():
        pytest.skip("the foreign traces are not beside this checkout")
    p = read_kineto(path)
    _same_features(p)
    _attributions_equal(p, monkeypatch)


@pytest.mark.parametrize("name", RUNS)
def test_feature_rows_of_user_scripts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's closure: backward ops on the autograd thread begin inside Optimizer.step# without being under it
    d = tmp_path / name
    shutil.copytree(DATA / "run_user_h100" / name, d)
    p, _ = assemble(d, load_collector(d))
    _same_features(p)
    _attributions_equal(p, monkeypatch)


def test_a_node_op_that_launched_nothing_still_lifts_its_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bias-gradient sum beside ``AddmmBackward0`` under one ``evaluate_function`` takes the forward op's layer,
    also when the node op itself launched nothing (so is no feature row)."""
    p = read_kineto(GPT2)
    ops = p.tables["ops"]
    names = p.names(ops["name_id"])
    engine = np.flatnonzero([s.startswith("autograd::engine::evaluate_function") for s in names])
    node = np.flatnonzero(ops["fwd_row"] >= 0)
    node = node[np.isin(ops["parent_row"][node], engine)]
    launching = p.tables["kernels"]["op_row"]
    quiet = node[~np.isin(node, launching)]
    assert quiet.size  # the trace has such nodes: the case is real
    rows = _op_features(p, launching)["row"]
    assert not np.isin(quiet, rows).all()
    _same_features(p)
    _attributions_equal(p, monkeypatch)


def _strings_of_features(p: Profile) -> dict[str, np.ndarray]:
    """Each kernel's layer, launching op and source line as strings, from every op's features."""
    f = _op_features(p)
    op_row = p.tables["kernels"]["op_row"]
    has = op_row >= 0
    r = np.clip(op_row, 0, None)
    names = p.names(f["name_id"])
    strings = np.asarray([*p.strings, ""], dtype=object)
    module = np.where(has, f["module"][r], -1)
    top = np.where(has, f["top_op"][r], -1)
    layer = np.where(module >= 0, strings[module], np.where(top >= 0, names[top], ""))
    src = np.where(has, f["source"][r], -1)
    return {"layer": layer, "op_name": np.where(has, names[r], ""), "source": np.where(src >= 0, strings[src], "")}


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH, DATA / "h100_recorded" / "transformer_train_modules.json.gz"],
                         ids=lambda x: x.parent.name)
def test_the_columns_kept_as_codes_read_as_the_strings(path: Path) -> None:
    p = read_kineto(path)
    a = attribute(p)
    assert not {"layer", "op_name", "source"} & set(vars(a))  # codes only, until read
    assert a.known("source") and a.known("layer")
    want = _strings_of_features(p)
    for name, col in want.items():
        got = getattr(a, name)
        assert got.dtype == object and not got.flags.writeable
        assert got.tolist() == col.tolist(), name
        uniq, inv = a.codes(name)
        ref_u, ref_inv = np.unique(col.astype(object), return_inverse=True)
        assert uniq.tolist() == ref_u.tolist() and np.array_equal(inv, ref_inv.reshape(-1)), name


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_linked_rows_a_block_at_a_time(block: int) -> None:
    from dnnprof.analysis.attribution import _rows_where_linked

    fwd = np.array([-1, 4, -1, -1, 0, 7, -1, 2, -1], dtype=np.int32)
    np.testing.assert_array_equal(_rows_where_linked(fwd, block), np.flatnonzero(fwd >= 0))
    assert _rows_where_linked(fwd[:0], block).size == 0
