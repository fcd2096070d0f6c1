"""``dnnprof report SWEEP_DIR``: the four answers from a sweep.json (real default-point profile, synthetic curves)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conftest import DEEPSPEECH
from dnnprof.analysis.sweep_report import memory_line, sweep_report
from dnnprof.cli.main import main
from dnnprof.render.sweep_html import render_html
from dnnprof.render.sweep_md import render_markdown
from dnnprof.render.sweep_svg import line_chart, sweep_plots
from dnnprof.runs.sweep.backend import Plan, base_point, summary_metrics

MiB, GiB = 1 << 20, 1 << 30
SCHEMA = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "sweep-1.schema.json"
CAP = 80 * GiB
#: (precision, mode) → (throughput scale, fixed bytes, bytes per sample). Throughput = scale·1000·b/(b+32).
SERIES = {("fp32", "train"): (1.0, GiB, 50 * MiB), ("bf16", "train"): (2.0, GiB, 25 * MiB),
          ("fp32", "infer"): (3.0, GiB // 2, 10 * MiB), ("bf16", "infer"): (6.0, GiB // 2, 5 * MiB)}


@cache
def ds2_summary() -> dict[str, Any]:
    """The real summary of the recorded DeepSpeech2 H200 training trace."""
    from dnnprof.analysis.summary import summarize
    from dnnprof.ingest.detect import open_profile

    return summarize(open_profile(DEEPSPEECH))


def profile_point(precision: str, mode: str, batch: int) -> dict[str, Any]:
    doc = json.loads(json.dumps(ds2_summary()))
    if precision == "bf16":  # synthetic: the RNN kernels become a bf16 cuDNN family
        for f in doc["families"]:
            if f["family"] == "rnn":
                f["family"] = "rnn_bf16"
        doc["gpu"]["tensor_core_pct"] = 95.0
    if mode == "infer":  # synthetic: forward only, no loss or optimizer
        doc["families"] = [f for f in doc["families"] if f["family"] not in ("loss", "optimizer")]
        doc["phases"] = {"forward_us": 1000.0, "backward_us": 0.0, "optimizer_us": 0.0, "other_us": 0.0}
        doc["kernels"] = [k for k in doc["kernels"] if k["phase"] == "forward"]
    p = base_point(Plan("profile", batch, precision, mode, "profile"))
    p.update(summary_metrics(doc, batch), status="ok", run_dir=f"trials/{p['id']}/run", device=None)
    return p


def probe_point(precision: str, mode: str, batch: int) -> dict[str, Any]:
    scale, fixed, per = SERIES[(precision, mode)]
    used = fixed + per * batch
    p = base_point(Plan("probe", batch, precision, mode, "search"))
    if used > CAP:
        p.update(status="oom", limited_by="gpu_memory", message="torch.OutOfMemoryError: CUDA out of memory.")
        return p
    thr = scale * 1000.0 * batch / (batch + 32)
    p.update(status="ok", throughput_samples_per_s=round(thr, 3), step_time_ms=round(1000.0 * batch / thr, 4),
             step_time_p90_ms=round(1100.0 * batch / thr, 4), gpu_busy_pct=round(100.0 * batch / (batch + 4), 1),
             gpu_busy_source="nvml", sm_occupancy_pct=round(60.0 * batch / (batch + 64), 1),
             sm_active_pct=round(95.0 * batch / (batch + 8), 1), peak_memory_bytes=used, limit_resource_bytes=used,
             memory_capacity_bytes=CAP,
             device={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85 * 10**9})
    return p


def make_sweep() -> dict[str, Any]:
    points, best = [], []
    for (prec, mode), (_s, fixed, per) in SERIES.items():
        edge = (CAP - fixed) // per
        batches = [b for b in (2**k for k in range(20)) if b <= edge] + [edge, edge + 1]
        points += [probe_point(prec, mode, b) for b in batches]
        best.append({"precision": prec, "mode": mode, "batch_size": edge, "limited_by": "gpu_memory", "exact": True,
                     "bracket": [edge, edge + 1], "trials": len(batches), "trial_bound": 14, "search": "auto"})
    points += [profile_point(p, m, b) for (p, m) in SERIES for b in (32,)]
    points.append(profile_point("fp32", "train", 1024))
    return {"schema": "dnnprof.sweep/1", "workload": "deepspeech2",
            "target": {"kind": "workload", "name": "deepspeech2", "argv": []},
            "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85 * 10**9},
            "default_batch_size": 32, "status": "complete", "elapsed_s": 812.5, "trials_total": len(points),
            "config": {"batch_sizes": "auto", "precisions": ["fp32", "bf16"], "modes": ["train", "infer"]},
            "messages": [], "points": points, "max_batch_size": best}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return sweep_report(make_sweep())


def test_the_fixture_is_a_valid_sweep_document() -> None:
    import jsonschema

    jsonschema.validate(make_sweep(), json.loads(SCHEMA.read_text()))


def test_bottlenecks_come_from_the_default_point_profile(report: dict[str, Any]) -> None:
    q1 = report["bottlenecks"]
    assert (q1["precision"], q1["mode"], q1["batch_size"]) == ("fp32", "train", 32)
    real = ds2_summary()["kernels"][0]
    assert q1["kernels"][0]["name"] == real["name"]
    assert q1["kernels"][0]["occupancy_source"] == "kineto_estimate"
    assert q1["layers"][0]["name"] == "aten::rnn_relu"
    assert q1["phases_pct"]["backward"] > q1["phases_pct"]["forward"] > 0
    text = " ".join(report["answers"]["bottlenecks"])
    assert real["short_name"] in text and "layer aten::rnn_relu" in text and "--counters" in text


def test_batch_size_answers(report: dict[str, Any]) -> None:
    train = next(b for b in report["batch_size"] if (b["precision"], b["mode"]) == ("fp32", "train"))
    edge = (CAP - GiB) // (50 * MiB)
    assert train["best_batch"] == edge
    assert train["knee_batch"] == 256  # first doubling whose 1000·b/(b+32) is within 10% of the best
    assert train["memory_per_sample_bytes"] == 50 * MiB and train["memory_fixed_bytes"] == GiB
    assert train["gpu_busy_pct_range"][0] == pytest.approx(20.0)
    text = " ".join(report["answers"]["batch_size"])
    assert f"the largest batch that fits is {edge} (batch {edge + 1} does not; limited by gpu_memory)" in text
    assert "peak memory grows 50.0 MiB per sample on top of 1.0 GiB" in text
    assert "top kernel family stays gemm" in text


def test_precision_answers(report: dict[str, Any]) -> None:
    train = next(q for q in report["precision"] if q["mode"] == "train")
    assert train["baseline"] == "fp32" and train["batch_size"] == 32
    bf16 = next(r for r in train["rows"] if r["precision"] == "bf16")
    assert bf16["speedup"] == 2.0
    assert bf16["memory_ratio"] == pytest.approx((GiB + 25 * MiB * 32) / (GiB + 50 * MiB * 32), abs=1e-3)
    assert bf16["families_appeared"] == ["rnn_bf16"] and bf16["families_disappeared"] == ["rnn"]
    assert bf16["tensor_core_pct"] == 95.0
    assert "train bf16: 2.0× the throughput of fp32 at batch 32" in " ".join(report["answers"]["precision"])


def test_mode_answers(report: dict[str, Any]) -> None:
    fp32 = next(r for r in report["modes"] if r["precision"] == "fp32")
    assert fp32["throughput_ratio"] == 3.0 and fp32["step_time_ratio"] == 3.0
    assert fp32["families_train_only"] == ["loss"]  # optimizer is under 1% of kernel time
    assert fp32["train"]["phases_pct"]["backward"] > 50 and fp32["infer"]["phases_pct"]["forward"] == 100.0
    text = " ".join(report["answers"]["modes"])
    assert "fp32: a training step takes 3.0× an inference step at batch 32" in text
    assert "families only in training: loss" in text


def test_memory_line_needs_two_batches() -> None:
    row = {"batch_size": 8, "status": "ok", "peak_memory_bytes": 100}
    assert memory_line([row]) is None
    assert memory_line([row, {**row, "batch_size": 16, "peak_memory_bytes": 180}]) == (10.0, 20.0)


def test_renderers_are_self_contained_and_deterministic(report: dict[str, Any]) -> None:
    plots = sweep_plots(report)
    assert set(plots) == {"throughput", "busy", "occupancy", "memory"}
    for _title, svg in plots.values():
        ET.fromstring(svg)  # well-formed
    html = render_html(report, plots)
    assert html == render_html(sweep_report(make_sweep()), sweep_plots(sweep_report(make_sweep())))
    assert html.count("<svg") == 4 and "<script" not in html and "<link" not in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html
    md = render_markdown(report, {k: f"plots/{k}.svg" for k in plots})
    heads = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert heads == ["## Answers", "## 1. Bottlenecks at the default point", "## 2. Batch size", "## 3. Precision",
                     "## 4. Training vs inference"]
    assert "| train fp32 | 1617 | gpu_memory | yes | 13 / 14 |" in md
    assert "![throughput](plots/throughput.svg)" in md


def test_a_chart_without_data_says_so() -> None:
    svg = line_chart([("x", [(1.0, None)])], title="t", y_label="y")
    assert "no data" in svg
    ET.fromstring(svg)


def test_cli_writes_three_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps(make_sweep()))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Batch size:" in out and "Training vs inference:" in out
    for name in ("report.md", "report.html", "report.json", "plots/throughput.svg"):
        assert (tmp_path / name).stat().st_size > 0
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["schema"] == "dnnprof.sweep_report/1" and set(doc["answers"]) == {"bottlenecks", "batch_size",
                                                                                 "precision", "modes"}


@pytest.mark.parametrize(("content", "message"), [
    (None, "no sweep.json here"), ("{", "not readable JSON"), ('{"schema": "other"}', "not a dnnprof.sweep/1 document"),
    ('{"schema": "dnnprof.sweep/1"}', "missing required field `points`"),
    ('{"schema": "dnnprof.sweep/1", "points": [{"batch_size": "x", "precision": "fp32", "mode": "train", '
     '"status": "ok", "kind": "probe"}]}', "Expected `int`, got `str` - at `$.points[0].batch_size`"),
    ('{"schema": "dnnprof.sweep/1", "points": [{"batch_size": 4, "precision": "fp32", "mode": "train", '
     '"status": "ok", "kind": "probe", "step_time_ms": [1]}]}', "at `$.points[0].step_time_ms`"),
    ('{"schema": "dnnprof.sweep/1", "points": [], "max_batch_size": [{"mode": "train"}]}',
     "missing required field `precision`")])
def test_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "sweep.json").write_text(content)
    assert main(["report", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_a_sweep_where_nothing_ran_still_reports_why() -> None:
    doc = make_sweep()
    reason = "precision 'bf16' needs an Ampere or newer GPU (compute capability 8.0); Tesla P100 is 6.0"
    doc["points"] = [{**base_point(Plan("probe", 1, "bf16", "train")), "status": "skipped", "limited_by": "unsupported",
                      "message": reason}]
    doc["config"] = {"batch_sizes": "auto", "precisions": ["bf16"], "modes": ["train"]}
    doc["max_batch_size"] = [{"precision": "bf16", "mode": "train", "batch_size": None, "limited_by": "unsupported"}]
    ans = sweep_report(doc)["answers"]
    assert ans["bottlenecks"] == ["No point of the sweep ran: see the batch-size answers for why."]
    assert ans["batch_size"] == [f"train bf16: skipped — {reason}"] == ans["precision"]
    render_markdown(sweep_report(doc))  # renders without data
