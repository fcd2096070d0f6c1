"""``dnnprof bench`` on the CPU: backends measured and checked against eager, the JSON schema, clean skips, a wrong
backend caught, one-line errors for bad inputs. No assertion depends on how fast anything ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dnnprof.analysis.bench_report import LATENCY_KEYS, bench_document, diagnoses, knees, latency_stats  # noqa: E402
from dnnprof.bench import backends_torch  # noqa: E402
from dnnprof.bench.backends import Runner, unavailable  # noqa: E402
from dnnprof.bench.session import run_bench  # noqa: E402
from dnnprof.bench.sources import build_source, workload_spec  # noqa: E402
from dnnprof.bench.trial import Settings, reference_outputs  # noqa: E402
from dnnprof.cli.main import main  # noqa: E402

SCHEMA = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "bench-1.schema.json"
FAST = ["--device", "cpu", "--warmup", "1", "--iterations", "5", "-q"]


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: the test machine's cores are shared, and oversubscription makes tiny models crawl."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _validate(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def _ordered(lat: dict) -> None:
    values = [lat[k] for k in ("min", "p50", "p90", "p95", "p99", "max")]
    assert values == sorted(values)
    assert lat["min"] <= lat["mean"] <= lat["max"]


def test_cpu_backends_measured_checked_and_valid_json(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    backends = "eager,compile,onnxruntime,openvino,cuda-graph,tensorrt"
    out = tmp_path / "bench.json"
    rc = main(["bench", "resnet50-tiny", "--batch-sizes", "1,2", "--backends", backends, "--json", str(out), *FAST])
    assert rc == 0
    doc = json.loads(out.read_text())
    _validate(doc)
    assert doc["schema"] == "dnnprof.bench/1" and doc["device"]["type"] == "cpu"
    by = {(r["backend"], r["batch_size"]): r for r in doc["results"]}
    assert len(by) == 12
    expect_ok = ["eager", "compile", "onnxruntime"] + (["openvino"] if unavailable("openvino", _Src()) is None else [])
    for name in expect_ok:
        for b in (1, 2):
            r = by[(name, b)]
            assert r["status"] == "ok", r["reason"]
            assert r["iterations"] == 5 and r["throughput_samples_per_s"] == pytest.approx(b * r["throughput_qps"])
            _ordered(r["latency_ms"])
            assert r["gpu_compute_ms"] is None and r["h2d_ms"] is None and r["null_reasons"]["h2d_ms"]
            assert r["compute_ms"] is not None
            if name != "eager":
                assert r["max_rel_error"] <= r["tolerance"] and r["reference_backend"] == "eager"
    for b in (1, 2):
        assert by[("cuda-graph", b)]["status"] == "skipped" and "cuda" in by[("cuda-graph", b)]["reason"]
        assert by[("tensorrt", b)]["status"] == "skipped"
    assert {k["backend"] for k in doc["knee"]} >= set(expect_ok)


class _Src:
    """Enough of a Source for ``unavailable``: fp32 on the CPU with a PyTorch model."""

    model = object()
    device = "cpu"
    precision = "fp32"


def test_token_workload_reports_tokens_per_second() -> None:
    src = build_source(workload_spec("gpt2-tiny", device="cpu", precision="fp32", max_batch=2))
    raw = run_bench(src, ["eager"], [2], Settings(warmup=1, iterations=3))
    (r,) = bench_document(raw)["results"]
    assert r["status"] == "ok"
    assert r["throughput_tokens_per_s"] == pytest.approx(r["throughput_samples_per_s"] * 64)


def test_backend_returning_wrong_values_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def off_by_one(source, buffers, mode):
        runner = backends_torch.eager(source, buffers)
        return Runner(run=lambda: [o + 1.0 for o in runner.run()])

    monkeypatch.setattr(backends_torch, "compiled", off_by_one)
    src = build_source(workload_spec("resnet50-tiny", device="cpu", precision="fp32", max_batch=1))
    (logits,) = reference_outputs(src, 1)
    assert logits.shape == (1, 10)  # compared on the scores, not on argmax labels
    doc = bench_document(run_bench(src, ["eager", "compile"], [1], Settings(warmup=1, iterations=3)))
    eager, wrong = doc["results"]
    assert eager["status"] == "ok"
    assert wrong["status"] == "wrong" and "differ from eager" in wrong["reason"]
    assert wrong["max_rel_error"] > wrong["tolerance"]


def test_missing_backend_is_a_clean_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    src = build_source(workload_spec("resnet50-tiny", device="cpu", precision="fp32", max_batch=1))
    doc = bench_document(run_bench(src, ["openvino"], [1], Settings(warmup=1, iterations=2)))
    (r,) = doc["results"]
    assert r["status"] == "skipped" and "openvino is not installed" in r["reason"]
    assert r["latency_ms"] is None and r["throughput_qps"] is None and r["diagnoses"] == []
    _validate(doc)
    from dnnprof.render.bench_table import markdown

    text = markdown(doc)
    assert "| openvino | 1 | skipped |" in text and "openvino is not installed" in text


def _tiny_onnx(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(__import__("numpy").ones((4, 3), dtype="float32"), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_onnx_file_runs_on_onnx_backends_only(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    path = _tiny_onnx(tmp_path / "tiny.onnx")
    out = tmp_path / "b.json"
    assert main(["bench", "--onnx", str(path), "--backends", "eager,onnxruntime,openvino", "--batch-sizes", "3",
                 "--json", str(out), *FAST]) == 0
    doc = json.loads(out.read_text())
    _validate(doc)
    by = {r["backend"]: r for r in doc["results"]}
    assert by["eager"]["status"] == "skipped" and "ONNX file" in by["eager"]["reason"]
    assert by["onnxruntime"]["status"] == "ok"
    if by["openvino"]["status"] != "skipped":
        assert by["openvino"]["status"] == "ok" and by["openvino"]["reference_backend"] == "onnxruntime"


SCRIPT = """
import sys

import torch

def dnnprof_bench(batch_size):
    torch.manual_seed(0)
    width = int(sys.argv[1])  # the script's own arguments reach the hook
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU()), torch.randn(batch_size, 8)

if __name__ == "__main__":
    raise SystemExit("the script's own main must not run under dnnprof bench")
"""


def test_script_hook(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "b.json"
    assert main(["bench", "--backends", "eager", "--batch-sizes", "1,4", "--json", str(out), *FAST, "--",
                 "python", str(script), "16"]) == 0
    doc = json.loads(out.read_text())
    assert doc["workload"] == "model.py" and doc["source_kind"] == "script"
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"]
    assert main(["bench", "--backends", "eager", "--batch-sizes", "2", "--json", str(out), "--device", "cpu",
                 "--warmup", "0", "--duration", "0.05", "-q", "--", str(script), "4"]) == 0
    (r,) = json.loads(out.read_text())["results"]
    assert r["status"] == "ok" and r["iterations"] >= 5 and r["wall_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["bench", "resnet50-tiny", "--backends", "eager,warp-drive"], "unknown backend 'warp-drive'"),
    (["bench", "resnet50-tiny", "--batch-sizes", "0"], "not a positive integer"),
    (["bench", "resnet50-tiny", "--iterations", "5", "--duration", "1"], "not both"),
    (["bench", "--backends", "eager"], "give one thing to benchmark"),
    (["bench", "resnet50-tiny", "--", "python", "x.py"], "got a script and a workload"),
    (["bench", "no-such-workload"], "no-such-workload"),
])
def test_bad_options_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprof: error:") and message in err[0]


def test_bad_onnx_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf model\xff\xff")
    assert main(["bench", "--onnx", str(bad), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.onnx" in err[0] and ("ONNX" in err[0])


def test_script_without_hook_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    assert main(["bench", "--device", "cpu", "--", "python", str(script)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "defines no function dnnprof_bench()" in err[0]


# --- the report's arithmetic, on made-up samples -------------------------------------------------------------------
def test_latency_stats_ordered_and_exact() -> None:
    s = latency_stats([float(x) for x in range(1, 101)])
    assert list(s) == list(LATENCY_KEYS)
    assert s["min"] == 1 and s["max"] == 100 and s["mean"] == 50.5 and s["p50"] == 50.5
    assert s["p90"] == pytest.approx(90.1) and s["p99"] == pytest.approx(99.01)


def test_diagnoses_follow_trtexec() -> None:
    base = {"backend": "eager", "gpu_compute_ms": 1.0, "enqueue_ms": 0.1, "h2d_ms": 0.1, "d2h_ms": 0.1, "cv_pct": 0.5}
    assert diagnoses(base) == []
    ids = lambda r: [d["id"] for d in diagnoses({**base, **r})]  # noqa: E731
    assert ids({"enqueue_ms": 0.9}) == ["enqueue_bound"]
    assert "cuda-graph" in diagnoses({**base, "enqueue_ms": 0.9})[0]["message"]
    assert ids({"h2d_ms": 0.7, "d2h_ms": 0.4}) == ["transfer_bound"]
    assert ids({"cv_pct": 1.5}) == ["unstable"]
    assert ids({"gpu_compute_ms": None, "enqueue_ms": None, "h2d_ms": None, "d2h_ms": None}) == []


def test_phases_apart_when_the_split_iterations_disagree_with_the_timed_latency() -> None:
    """The H2D / compute / D2H split comes from its own iterations: when their mean is far from the timed mean
    latency (as on an H100, resnet50-tiny at batch 1: 1.113 ms against 0.949 ms), the result says so."""
    base = {"backend": "eager", "gpu_compute_ms": 0.9, "enqueue_ms": 0.1, "h2d_ms": 0.1, "d2h_ms": 0.113,
            "cv_pct": 0.5, "latency_ms": {"mean": 0.949}}
    ids = lambda r: [d["id"] for d in diagnoses({**base, **r})]  # noqa: E731
    assert ids({"phase_latency_ms": 1.113}) == ["phases_apart"]
    (d,) = diagnoses({**base, "phase_latency_ms": 1.113})
    assert d["phase_latency_ms"] == 1.113 and d["latency_mean_ms"] == 0.949 and "+17 %" in d["message"]
    assert ids({"phase_latency_ms": 0.80}) == ["phases_apart"]  # below as well as above
    assert ids({"phase_latency_ms": 1.0}) == []  # within 10 %
    assert ids({"phase_latency_ms": 0.12, "latency_ms": {"mean": 0.1}}) == []  # 20 %, but 0.02 ms: clock resolution
    assert ids({"phase_latency_ms": None}) == [] and ids({"phase_latency_ms": 1.113, "latency_ms": None}) == []


def test_knee_is_smallest_batch_near_best() -> None:
    rows = [{"backend": "x", "status": "ok", "batch_size": b, "throughput_samples_per_s": t, "latency_ms": {"p50": lat}}
            for b, t, lat in ((1, 100.0, 1.0), (8, 700.0, 1.1), (32, 950.0, 3.4), (64, 1000.0, 6.4))]
    (k,) = knees(rows)
    assert k["knee_batch_size"] == 32 and k["best_batch_size"] == 64 and len(k["points"]) == 4


def test_profile_pass_links_a_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "b.json"
    assert main(["bench", "resnet50-tiny", "--backends", "eager", "--batch-sizes", "1", "--profile", "--json",
                 str(out), *FAST]) == 0
    (r,) = json.loads(out.read_text())["results"]
    run_dir = Path(r["profile_run_dir"])
    assert run_dir.is_dir() and "eager-b1" in run_dir.name
    assert (run_dir / "summary.json").is_file() and (run_dir / "profile").is_dir()


def test_stage_lines_on_stderr_when_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a log (stderr not a terminal) every stage prints a line, so a run killed by a time limit says where it
    was: the eager reference, each trial's start and end (no line yet: still loading)."""
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    args = ["bench", "--backends", "eager", "--batch-sizes", "1,2", "--device", "cpu", "--warmup", "1",
            "--iterations", "3", "--json", str(tmp_path / "b.json"), "--", "python", str(script), "16"]
    assert main(args) == 0
    err = capsys.readouterr().err
    stages = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("dnnprof bench [")]
    assert stages == ["eager reference outputs, batch 1: started (1/2)",
                      "eager batch 1: started (1/2)", "eager batch 1: done",
                      "eager reference outputs, batch 2: started (2/2)",
                      "eager batch 2: started (2/2)", "eager batch 2: done"]


def test_timed_loop_calls_the_bare_model_inside_one_inference_mode() -> None:
    """The timed iterations call the model directly, inside one inference mode entered around the loop and with
    the garbage collector off (no context managers entered per call, unlike the warm-up's ``run()``)."""
    import gc

    from dnnprof.bench.backends import flatten
    from dnnprof.bench.trial import Trial as T
    from dnnprof.bench.trial import _call, _time, torch_contexts

    seen: list[tuple[bool, bool, str]] = []

    def run() -> list:
        seen.append((torch.is_inference_mode_enabled(), gc.isenabled(), "run"))
        return [torch.zeros(1)]

    def bare() -> object:
        seen.append((torch.is_inference_mode_enabled(), gc.isenabled(), "bare"))
        return (torch.zeros(1),)

    source = build_source(workload_spec("resnet50-tiny", device="cpu", precision="fp32", max_batch=1))
    runner = Runner(run=run, bare=bare)
    call, flat = _call(runner)
    assert [t.shape for t in flat(call())] == [t.shape for t in flatten((torch.zeros(1),))]
    seen.clear()
    with torch_contexts(source):
        _time(T("eager", 1), runner, (), (), Settings(warmup=0, iterations=4), False, lambda f: None)
    assert seen == [(True, False, "bare")] * 4
    assert gc.isenabled()


def test_warm_up_runs_right_before_the_timed_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output check (a copy of every output to the host and a comparison, seconds for big logits) comes
    before the warm-up, so that nothing sits between the warm-up and the timed iterations, as in a plain loop."""
    from dnnprof.bench import trial as trial_mod

    log: list[str] = []

    def run() -> list:
        log.append("run")
        return [torch.zeros(1)]

    def bare() -> object:
        log.append("bare")
        return torch.zeros(1)

    checked = trial_mod.host_outputs

    def host_outputs(outputs: list) -> list:
        log.append("check")
        return checked(outputs)

    monkeypatch.setattr(trial_mod, "prepare", lambda *a: Runner(run=run, bare=bare))
    monkeypatch.setattr(trial_mod, "host_outputs", host_outputs)
    source = build_source(workload_spec("resnet50-tiny", device="cpu", precision="fp32", max_batch=1))
    t, _ = trial_mod.run_trial(source, "eager", 1, Settings(warmup=3, iterations=4), None, None)
    assert t.status == "ok", t.reason
    assert log == ["run", "check"] + ["bare"] * (3 + 4)


class _FakeCuda:
    """Stands in for the CUDA calls of the timed loop and logs them, so the loop's shape is checked on a CPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dnnprof.bench import trial as trial_mod

        self.log: list[str] = []
        log = self.log

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing

            def record(self) -> None:
                log.append("record")
                self.at = float(len(log))  # a GPU clock: what ran before it on the stream

            def synchronize(self) -> None:
                log.append("wait")

            def elapsed_time(self, other: Event) -> float:
                return other.at - self.at

        class Buffer:
            def __init__(self, what: str) -> None:
                self.what = what

            def copy_(self, src: object, non_blocking: bool = False) -> None:
                assert non_blocking
                log.append(self.what)

        class Output:
            is_cuda, shape, dtype = True, (1,), torch.float32

        self.buffers = (Buffer("h2d"),)
        self.output = Output()
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))
        monkeypatch.setattr(trial_mod, "_pinned_like", lambda t: Buffer("d2h"))
        monkeypatch.setattr(trial_mod.time, "perf_counter", self._clock)
        self._t = 0.0

    def _clock(self) -> float:
        self.log.append("clock")
        self._t += 0.001
        return self._t

    def runner(self) -> Runner:
        def bare() -> object:
            self.log.append("call")
            return {"logits": self.output}

        return Runner(run=lambda: [self.output], bare=bare)


def test_timed_gpu_query_is_a_plain_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each timed GPU query does what a hand-written CUDA-event loop does and nothing more: an event, the H2D copy,
    the call, the D2H copy, an event, the wait. The phase split (two more events) and the host clock around the
    call run in separate iterations after the timed ones; the phases still add up to their own total."""
    from dnnprof.bench.trial import Trial as T
    from dnnprof.bench.trial import _time

    fake = _FakeCuda(monkeypatch)
    t = T("eager", 1)
    _time(t, fake.runner(), ("host",), fake.buffers, Settings(warmup=2, iterations=5), True, lambda f: None)
    log = fake.log
    first_timed = log.index("record")
    warm, rest = log[:first_timed], log[first_timed:]
    assert warm == ["h2d", "call", "sync", "h2d", "call", "d2h", "sync", "sync", "clock"]
    plain = ["record", "h2d", "call", "d2h", "record", "wait"]
    n = 5 * len(plain)
    assert rest[:n] == plain * 5
    assert rest[n] == "clock"  # the timed loop's wall time
    phase = ["record", "h2d", "record", "clock", "call", "clock", "record", "d2h", "record", "wait"]
    assert rest[n + 1:] == phase * 5
    assert len(t.latency_ms) == 5 and len(t.h2d_ms) == len(t.compute_ms) == len(t.d2h_ms) == 5
    assert [h + c + d for h, c, d in zip(t.h2d_ms, t.compute_ms, t.d2h_ms, strict=True)] == t.phase_latency_ms
    assert t.enqueue_ms is not None and len(t.enqueue_ms) == 5


def test_phase_iterations_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    from dnnprof.bench import trial as trial_mod

    fake = _FakeCuda(monkeypatch)
    monkeypatch.setattr(trial_mod, "MAX_PHASE_ITERATIONS", 3)
    t = trial_mod.Trial("eager", 1)
    trial_mod._time(t, fake.runner(), ("host",), fake.buffers, Settings(warmup=1, iterations=7), True,
                    lambda f: None)
    assert len(t.latency_ms) == 7 and len(t.h2d_ms) == len(t.phase_latency_ms) == 3


def test_progress_bar_draws_without_a_thread() -> None:
    """The progress bar is drawn from the callback (between queries), never by a refresh thread that could take
    the GIL in the middle of a timed query."""
    import threading

    from dnnprof.cli.bench import _progress

    before = threading.active_count()
    with _progress(enabled=True, total=2) as update:
        assert threading.active_count() == before
        update("eager batch 1", 0.5)
        update("eager batch 1", 1.0)
        assert threading.active_count() == before
