"""The Python API on the CPU: dnnprof.profile() writes the run directory dnnprof run writes; dnnprof.load() reads
every input kind analyze reads, as pandas tables; its summary is runs.report's; the notebook card escapes names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
torch = pytest.importorskip("torch")

import dnnprof  # noqa: E402
from dnnprof.ingest.errors import TraceError  # noqa: E402

DATA = Path(__file__).parent / "data"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
needs_foreign = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"{FOREIGN} (shared foreign traces) is absent")


def train(prof: object, n: int = 10, batch: int = 8) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 16), torch.randint(0, 4, (batch,))
    for _ in range(n):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step(batch)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api") / "run"
    with dnnprof.profile(warmup_steps=2, steps=3, out=out, quiet=True) as prof:
        train(prof)
    assert prof.path == out
    return out


def test_profile_writes_the_run_directory_of_dnnprof_run(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["complete"] and meta["status"] == "complete" and meta["in_process"] is True
    assert meta["capture"]["step_source"] == "explicit" and meta["capture"]["kinds"] == ["cpu"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["schema"] == "dnnprof.summary/1" and summary["steps"]["count"] == 3
    assert summary["throughput"]["items_per_step"] == 8 and summary["overhead"]["baseline"]["count"] >= 1
    assert (run_dir / "profile" / "kernels.parquet").is_file()
    assert not any(p.name.endswith(".partial") for p in run_dir.parent.iterdir())
    # The collector's hooks are gone: dnnprof.step() is a no-op again outside the block.
    assert dnnprof._step_hook is None


def test_profile_prints_the_run_directory_and_marks_an_early_end_incomplete(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ZeroDivisionError), dnnprof.profile(warmup_steps=2, steps=5, out=tmp_path / "r") as prof:
        train(prof, n=3)
        raise ZeroDivisionError("boom")
    err = capsys.readouterr().err
    assert prof.path == tmp_path / "r.incomplete"
    assert f"dnnprof: run directory (INCOMPLETE): {prof.path}" in err
    meta = json.loads((prof.path / "meta.json").read_text())
    assert meta["exit_code"] == 1 and meta["script"]["exception"]["type"] == "ZeroDivisionError"


def test_profile_bad_settings_and_nesting_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="warmup-steps must be at least 2"):
        dnnprof.profile(warmup_steps=1)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(ValueError, match="already exists and is not an empty directory"):
        dnnprof.profile(out=tmp_path / "full").start()
    with dnnprof.profile(warmup_steps=2, steps=1, out=tmp_path / "a", quiet=True), \
            pytest.raises(RuntimeError, match="already running"):
        dnnprof.profile(out=tmp_path / "b").start()


def test_load_run_directory_tables_summary_and_findings(run_dir: Path) -> None:
    p = dnnprof.load(run_dir)
    for name in ("kernels", "ops", "layers", "steps", "samples", "memcpy"):
        assert isinstance(getattr(p, name), pd.DataFrame), name
    assert list(p.steps["number"]) == [2, 3, 4] and set(p.steps["source"]) == {"marker"}
    assert "name" in p.ops and "name_id" not in p.ops and "dur_ns" in p.ops
    assert p.ops["name"].str.startswith("aten::").any()
    assert {"layer", "phase", "op", "dur_ns"} <= set(p.kernels.columns)
    # The summary is the run's own summary.json (runs/report.py rebuilds it the same way).
    doc = p.summary()
    saved = json.loads((run_dir / "summary.json").read_text())
    assert doc["steps"] == saved["steps"] and doc["throughput"] == saved["throughput"]
    assert [f["id"] for f in p.findings] == [f["id"] for f in saved["findings"]]
    doc["steps"] = None  # a copy: the profile's own document is unchanged
    assert p.summary()["steps"]["count"] == 3


def test_load_exports_and_diff(run_dir: Path, tmp_path: Path) -> None:
    p = dnnprof.load(run_dir)
    assert p.html(tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")
    trace = json.loads(p.to_perfetto(tmp_path / "r.json").read_text())
    assert trace["traceEvents"]
    d = p.diff(DATA / "cpu_mlp_train" / "trace.json.gz")
    assert d["schema"].startswith("dnnprof.diff/") and d["step_time_median_us"]["base"] > 0


def test_load_kineto_gpu_trace_decodes_kernels_layers_and_memcpy() -> None:
    p = dnnprof.load(DATA / "h100_recorded" / "transformer_train_with_modules.json.gz")
    k = p.kernels
    assert len(k) == p.canonical.rows("kernels") > 0
    assert (k["name"] != "").all() and set(k["phase"]) <= {"forward", "backward", "optimizer", "other"}
    layers = p.layers
    assert layers["kernel_time_ns"].sum() == k["dur_ns"].sum()
    assert np.isclose(layers["kernel_time_pct"].sum(), 100.0)
    assert layers["kernel_time_ns"].is_monotonic_decreasing
    assert set(p.memcpy["kind"]) <= {"unknown", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"}
    # op_row is a position in ops
    launched = k[k["op_row"] >= 0]
    assert (p.ops["name"].to_numpy()[launched["op_row"].to_numpy()] == launched["op"].to_numpy()).mean() > 0.5


@needs_foreign
@pytest.mark.parametrize("name", ["hta__trace_filter_2ranks", "memfusion__rtx3090_trt_conv_nsys.sqlite",
                                  "hta__cpu_only_rank34.json.gz"])
def test_load_foreign_inputs(name: str) -> None:
    p = dnnprof.load(FOREIGN / name)
    assert p.summary()["schema"] == "dnnprof.summary/1"
    assert len(p.kernels) + len(p.ops) > 0
    if name == "hta__trace_filter_2ranks":
        assert sorted(p.kernels["rank"].unique()) == p.canonical.ranks and len(p.canonical.ranks) == 2
        assert set(p.layers["rank"]) <= set(p.canonical.ranks)
    if name == "hta__cpu_only_rank34.json.gz":
        assert p.rank == 34 and p.kernels.empty and p.layers.empty


def test_load_saved_profile_nvprof_and_raw_run(tmp_path: Path) -> None:
    saved = dnnprof.load(DATA / "cpu_mlp_train" / "trace.json.gz")
    saved.canonical.save(tmp_path / "saved")
    again = dnnprof.load(tmp_path / "saved")
    assert again.ops.equals(saved.ops)
    assert len(dnnprof.load(DATA / "nvprof_csv" / "gpu_trace.csv").kernels) > 0
    raw = dnnprof.load(DATA / "run_gpt2_infer_h100")  # collector results and traces, profile assembled here
    assert len(raw.kernels) > 0 and "throughput" in raw.summary()


@pytest.mark.parametrize("path,what", [
    (DATA / "nvprof_csv" / "summary.csv", "nvprof --print-summary CSV"),
    (DATA / "ncu_gpt2_h100" / "ncu_details_names.csv.gz", None),
])
def test_load_without_timeline_is_one_clear_line(path: Path, what: str | None) -> None:
    with pytest.raises(TraceError) as e:
        dnnprof.load(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    assert "dnnprof analyze" in str(e.value) or "not a trace" in str(e.value)
    if what:
        assert what in str(e.value)


def test_load_missing_path_and_bad_rank(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        dnnprof.load(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="no rank 3"):
        dnnprof.load(DATA / "cpu_mlp_train" / "trace.json.gz", rank=3)


def test_repr_html_renders_and_escapes_names() -> None:
    p = dnnprof.load(DATA / "h100_recorded" / "transformer_train_with_modules.json.gz")
    doc = p.summary()
    evil = "<script>alert(1)</script>"
    p._reported()[1]["kernels"][0]["short_name"] = evil  # a kernel name is the trace's text, not ours
    html = p._repr_html_()
    assert "<table>" in html and "Kernels" in html and doc["device"]["name"] in html
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<dnnprof.Profile" in repr(p)


@pytest.mark.gpu
def test_profile_on_the_gpu_records_kernels_and_attributes_them(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    with dnnprof.profile(warmup_steps=3, steps=5, out=tmp_path / "run", quiet=True) as prof:
        for _ in range(20):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step(64)
    meta = json.loads((prof.path / "meta.json").read_text())
    assert meta["complete"] and "timing" in meta["capture"]["kinds"]
    p = dnnprof.load(prof.path)
    assert len(p.kernels) > 0 and p.summary()["gpu"]["busy_pct"] is not None
    assert (p.kernels["layer"] != "").mean() > 0.5 and set(p.kernels["phase"]) >= {"forward", "backward"}
    assert p.layers["kernel_time_ns"].sum() == p.kernels["dur_ns"].sum()
