"""The roofline on real Nsight Compute data (H100 and H200 GPT-2 steps): ceilings, where kernels sit, the JSON,
the SVG chart and the HTML reports."""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import step_kernels_profile
from dnnprof.analysis import bounds as B
from dnnprof.analysis.counters_join import join_counters
from dnnprof.analysis.roofline import kernel_roofline, metrics_roofline, profile_roofline
from dnnprof.analysis.summary import summarize
from dnnprof.cli.counters import ncu_summary
from dnnprof.cli.main import main
from dnnprof.ingest.ncu_csv import read_ncu
from dnnprof.model.device import DeviceInfo
from dnnprof.model.gpu_specs import lookup_gpu
from dnnprof.model.profile import Profile
from dnnprof.render.roofline_svg import roofline_svg

DATA = Path(__file__).parent / "data"
H100 = DATA / "ncu_gpt2_h100" / "ncu_sel_first-per-config.csv.gz"
H100_DETAILS = DATA / "ncu_gpt2_h100" / "ncu_details_names.csv.gz"
H100_EXCLUDE = DATA / "ncu_gpt2_h100_exclude"
H200 = DATA / "ncu_gpt2_h200" / "ncu_raw.csv"
SCHEMA = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "summary-1.schema.json"
GOLDEN = Path(__file__).parent / "golden" / "roofline_h100.svg"
SVG = "{http://www.w3.org/2000/svg}"
ELEMENTWISE = ("vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "multi_tensor_apply_kernel",
               "cunn_SoftMax", "layer_norm")


def _roof(path: Path) -> dict:
    return ncu_summary(path)["roofline"]


def _by_short(roof: dict, prefix: str) -> dict:
    return next(k for k in roof["kernels"] if k["short_name"].startswith(prefix))


# --- ceilings -------------------------------------------------------------------------------------------------
def test_h100_ceilings_from_ncu_peaks() -> None:
    roof = _roof(H100)
    c = roof["ceilings"]
    assert roof["device"] == "NVIDIA H100 80GB HBM3"
    assert c["dram_source"] == "ncu" and c["dram_bytes_per_s"] == pytest.approx(3.35e12, rel=0.02)
    bf16 = c["compute"]["tensor_bf16"]
    # dense hgmma peak x the SM clock ncu measured (~1.98 GHz, above the 1.83 GHz of the datasheet's 989 TFLOP/s)
    assert bf16["source"] == "ncu" and bf16["peak_flops_per_s"] == pytest.approx(989.4e12, rel=0.1)
    assert bf16["peak_flops_per_s"] < 1.5e15  # never the sparse peak (2x)
    assert bf16["ridge_flops_per_byte"] == pytest.approx(bf16["peak_flops_per_s"] / c["dram_bytes_per_s"], rel=1e-3)
    assert c["compute"]["fp32"]["peak_flops_per_s"] == pytest.approx(66.9e12, rel=0.05)
    assert {v["source"] for v in c["compute"].values()} == {"ncu"}


def test_h200_ceilings() -> None:
    c = _roof(H200)["ceilings"]
    assert c["dram_bytes_per_s"] == pytest.approx(4.8e12, rel=0.02)
    assert c["compute"]["tensor_bf16"]["ridge_flops_per_byte"] == pytest.approx(220, rel=0.02)


def test_spec_sheet_fills_missing_ceilings() -> None:
    t = read_ncu(H200)
    metrics = {k: v for k, v in t.metrics.items() if k != "dram__bytes.sum.peak_sustained"
               and not ("bf16" in k and k.endswith(".peak_sustained"))}
    names = [str(n) for n in t.kernel_name]
    r = metrics_roofline(metrics, names, lookup_gpu("NVIDIA H200"), "NVIDIA H200").to_dict()
    c = r["ceilings"]
    assert c["dram_source"] == "spec:H200 SXM 141GB" and c["dram_bytes_per_s"] == pytest.approx(4.8e12)
    assert c["compute"]["tensor_bf16"]["source"] == "spec:H200 SXM 141GB"
    assert c["compute"]["tensor_bf16"]["peak_flops_per_s"] == pytest.approx(989.4e12)
    assert c["compute"]["fp32"]["source"] == "ncu"
    no_spec = metrics_roofline(metrics, names).to_dict()
    assert no_spec["ceilings"]["dram_bytes_per_s"] is None and "tensor_bf16" not in no_spec["ceilings"]["compute"]
    assert all(k["roof_flops_per_s"] is None for k in no_spec["kernels"])  # no DRAM roof, no roof at all
    assert no_spec["plotted"] == r["plotted"]  # points do not need ceilings


# --- where kernels sit ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [H100, H200, H100_EXCLUDE / "ncu_sel_first-per-config.csv.gz"])
def test_lm_head_gemm_is_under_the_bf16_roof_right_of_the_ridge(path: Path) -> None:
    roof = _roof(path)
    bf16 = roof["ceilings"]["compute"]["tensor_bf16"]
    lm = _by_short(roof, "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn")
    assert lm["plotted"] and lm["dominant_precision"] == "tensor_bf16"
    assert lm["arithmetic_intensity"] > bf16["ridge_flops_per_byte"] and lm["limiting_roof"] == "compute"
    assert lm["roof_flops_per_s"] == bf16["peak_flops_per_s"]
    assert 0 < lm["achieved_flops_per_s"] < bf16["peak_flops_per_s"]
    assert lm["pct_of_roof"] == pytest.approx(100 * lm["achieved_flops_per_s"] / bf16["peak_flops_per_s"], rel=1e-3)
    # (8*512) x 768 x 50257 GEMM = 2*M*N*K FLOPs in one launch
    assert lm["flops"] == pytest.approx(2 * 8 * 512 * 768 * 50257, rel=0.01) and lm["launches"] == 1


@pytest.mark.parametrize("path", [H100, H200])
def test_elementwise_kernels_are_left_of_the_ridge_under_the_dram_roof(path: Path) -> None:
    roof = _roof(path)
    c = roof["ceilings"]
    pointwise = [k for k in roof["kernels"] if k["plotted"] and k["short_name"].startswith(ELEMENTWISE)]
    assert len(pointwise) >= 5
    for k in pointwise:
        ridge = c["compute"][k["dominant_precision"]]["ridge_flops_per_byte"]
        assert k["arithmetic_intensity"] < ridge and k["limiting_roof"] == "dram", k["short_name"]
        assert k["roof_flops_per_s"] == pytest.approx(k["arithmetic_intensity"] * c["dram_bytes_per_s"], rel=1e-3)
    for k in roof["kernels"]:  # measured points stay under their roof
        assert k["pct_of_roof"] is None or k["pct_of_roof"] <= 100.0, k["short_name"]


def test_points_match_the_per_kernel_table() -> None:
    doc = ncu_summary(H100)
    roof = doc["roofline"]
    assert [k["name"] for k in roof["kernels"]] == [k["name"] for k in doc["kernels"]]
    for row, pt in zip(doc["kernels"], roof["kernels"], strict=True):
        assert pt["launches"] == row["launches"] and pt["bound"] == row["bound"]
        assert pt["time_pct"] == pytest.approx(row["pct"], abs=1e-3)
        if pt["plotted"]:
            assert pt["arithmetic_intensity"] == pytest.approx(row["arithmetic_intensity"], rel=1e-3, abs=1e-3)
            assert pt["achieved_flops_per_s"] == pytest.approx(row["achieved_flops_per_s"], rel=1e-4)
    assert sum(k["time_pct"] for k in roof["kernels"]) == pytest.approx(100.0, abs=0.05)
    assert roof["time_source"] == "ncu" and roof["counted_gpu_time_pct"] == 100.0


@pytest.mark.parametrize("path", [H100, H200])
def test_kernels_without_flops_are_listed_and_counted(path: Path) -> None:
    roof = _roof(path)
    out = [k for k in roof["kernels"] if not k["plotted"]]
    assert out and all(k["arithmetic_intensity"] is None and k["excluded"] == "no_flops" for k in out)
    assert all(not k["flops"] for k in out)
    assert roof["excluded"]["no_flops"] == len(out) and roof["plotted"] + len(out) == len(roof["kernels"])
    names = {k["short_name"] for k in out}
    assert any("copy" in n or "Fill" in n or "gather" in n for n in names)
    assert sum(v["kernels"] for v in roof["ceilings"]["compute"].values()) == roof["plotted"]


def test_exclusion_reasons() -> None:
    m = {B.M_DURATION: np.array([1e3, 1e3, 1e3, 0.0]),
         "dram__bytes.sum": np.array([1e6, 0.0, 1e6, 1e6]),
         "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": np.array([0.0, 1e6, 1e6, 1e6])}
    r = kernel_roofline(B.compute_bounds(m), ["copy", "l2", "ok", "instant"], B.Ceilings({"fp32": 6e13}, 3e12))
    why = {k.name: k.excluded for k in r.kernels}
    assert why == {"copy": "no_flops", "l2": "no_dram_bytes", "ok": "", "instant": "no_time"}
    assert r.excluded == {"no_flops": 1, "no_dram_bytes": 1, "no_time": 1}
    ok = next(k for k in r.kernels if k.name == "ok")
    assert ok.arithmetic_intensity == 1.0 and ok.limiting_roof == "dram" and ok.roof_flops_per_s == 3e12
    assert math.isnan(next(k for k in r.kernels if k.name == "l2").arithmetic_intensity)
    with pytest.raises(ValueError, match="time_source"):
        kernel_roofline(B.compute_bounds(m), ["a"] * 4, B.Ceilings(), time_source="wall")
    with pytest.raises(ValueError, match="keys"):
        kernel_roofline(B.compute_bounds(m), ["a"], B.Ceilings())


def test_details_page_without_flop_counters() -> None:
    roof = _roof(H100_DETAILS)
    assert roof["plotted"] == 0 and roof["excluded"]["no_flops"] == len(roof["kernels"]) > 0
    root = ET.fromstring(roofline_svg(roof))
    assert not [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert any("no kernel with FLOPs and DRAM bytes" in (t.text or "") for t in root.iter(f"{SVG}text"))


# --- a profile with counters ----------------------------------------------------------------------------------
def _profile_with_counters() -> Profile:
    """The H100 step as Kineto saw it, with the selective ncu pass joined onto it."""
    p = step_kernels_profile(H100_EXCLUDE / "kernels_step3.json.gz", 3)
    p.devices = [DeviceInfo(id=0, name="NVIDIA H100 80GB HBM3", compute_major=9, compute_minor=0, sm_count=132)]
    join_counters(p, read_ncu(H100_EXCLUDE / "ncu_sel_first-per-config.csv.gz"), steps=[3])
    return p


def test_summary_gets_a_roofline_when_counters_exist() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    p = _profile_with_counters()
    doc = summarize(p)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    roof = doc["roofline"]
    assert roof["time_source"] == "trace" and roof["device"] == "NVIDIA H100 80GB HBM3"
    assert roof["counted_gpu_time_pct"] == pytest.approx(94.55, abs=0.01)  # the join's coverage
    assert sum(k["time_pct"] for k in roof["kernels"]) == pytest.approx(roof["counted_gpu_time_pct"], abs=0.05)
    by_name = {k["name"]: k for k in doc["kernels"]}
    lm = _by_short(roof, "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn")
    assert lm["time_pct"] == pytest.approx(by_name[lm["name"]]["pct"], abs=0.01)  # one step, so the same share
    assert lm["limiting_roof"] == "compute" and lm["pct_of_roof"] < 100
    # a single kernel on trace time: Kineto's duration, not ncu's
    assert lm["total_us"] == pytest.approx(by_name[lm["name"]]["total_us"])
    assert profile_roofline(p, rank=1) is None
    assert "roofline" not in summarize(Profile())


def test_cuDNN_and_cuBLAS_kernels_are_on_the_roofline() -> None:
    roof = profile_roofline(_profile_with_counters(), spec=lookup_gpu("NVIDIA H100 80GB HBM3"))
    assert roof is not None
    names = [k.name for k in roof.plotted]
    assert any("sdpa_sm90_flash_fprop" in n for n in names) and any("coopB" in n for n in names)


# --- the chart ------------------------------------------------------------------------------------------------
def _floats(el: ET.Element, *names: str) -> list[float]:
    return [float(el.get(n)) for n in names]  # type: ignore[arg-type]


def test_svg_structure() -> None:
    roof = _roof(H100)
    svg = roofline_svg(roof)
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag == f"{SVG}svg" and "id=" not in svg
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    # log axes with decade labels
    assert {"0.01", "0.1", "1", "10", "100", "1000"} <= set(texts) and {"1T", "10T", "100T", "1P"} <= set(texts)
    # one roof per precision present (fp32, fp16, bf16 tensor) plus the DRAM slope, and their ridge points
    assert any(t.startswith("BF16 tensor 1.07 PFLOP/s") for t in texts)
    assert any(t.startswith("FP32 66.8 TFLOP/s") for t in texts) and any(t.startswith("DRAM 3.35 TB/s") for t in texts)
    ridges = [p for p in root.iter(f"{SVG}path") if "ridge point of" in (p.findtext(f"{SVG}title") or "")]
    assert len(ridges) == 3
    # one circle per plotted kernel (+ the legend's), sized by time share, coloured by bound class
    points = [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert len(points) == roof["plotted"]
    radii = [float(c.get("r")) for c in points]  # type: ignore[arg-type]
    assert radii == sorted(radii, reverse=True)  # heaviest first
    lm = _by_short(roof, "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn")
    big = points[0]
    assert big.findtext(f"{SVG}title", "").startswith(lm["short_name"]) and big.get("fill") == "#CC79A7"
    assert {c.get("stroke") for c in points} >= {"#0072B2", "#CC79A7", "#E69F00"}  # memory, high-throughput, latency
    # the LM head is right of the bf16 ridge and below its roof, in pixels too
    bf16_ridge = next(p for p in ridges if "BF16" in (p.findtext(f"{SVG}title") or ""))
    rx, ry = (float(v) for v in bf16_ridge.get("d", "")[1:].split(" ")[0].split(","))
    cx, cy = _floats(big, "cx", "cy")
    assert cx > rx and cy > ry + 4
    # the five heaviest plotted kernels are named; the legend counts what is not shown
    assert sum(1 for t in texts if t.startswith(("cutlass_7", "cunn_SoftMax"))) == 5
    assert "4 without FLOPs not shown" in texts and "34 kernels plotted" in texts
    # every element inside the canvas
    for c in points:
        x, y, r = _floats(c, "cx", "cy", "r")
        assert 64 <= x <= 820 - 196 + 0.1 and 34 <= y <= 480 - 46 + 0.1 and r >= 3


def test_svg_is_byte_stable_golden() -> None:
    svg = roofline_svg(_roof(H100))
    assert svg == roofline_svg(_roof(H100))
    if os.environ.get("DNNPROF_REGOLD"):
        GOLDEN.write_text(svg + "\n")
    assert svg + "\n" == GOLDEN.read_text(), "chart changed: rerun with DNNPROF_REGOLD=1 and review the diff"


def test_off_scale_points_are_drawn_at_the_edge() -> None:
    roof = _roof(H100)  # the bf16 copy kernel does ~1e-6 FLOP/byte: beyond 7.5 decades
    root = ET.fromstring(roofline_svg(roof))
    hollow = [c for c in root.iter(f"{SVG}circle") if c.get("stroke-dasharray")]
    assert len(hollow) == 1 and "off-scale" in hollow[0].findtext(f"{SVG}title", "")
    assert any((t.text or "").startswith("1 off-scale") for t in root.iter(f"{SVG}text"))


# --- the CLI and the HTML reports ----------------------------------------------------------------------------
def test_analyze_ncu_json_and_html(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    js, page = tmp_path / "c.json", tmp_path / "out" / "c.html"
    assert main(["analyze", str(H100), "--json", str(js), "--html", str(page), "--quiet"]) == 0
    doc = json.loads(js.read_text())
    assert doc["schema"] == "dnnprof.counters/1"
    jsonschema.validate(doc["roofline"], json.loads(SCHEMA.read_text())["properties"]["roofline"])
    assert doc["roofline"]["throughput_source"] == {"sm": "ncu", "memory": "ncu"} == doc["throughput_source"]
    text = page.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert "<h2>Roofline</h2>" in text and text.count("<svg") == 1
    svg = text[text.index("<svg"):text.index("</svg>") + 6]
    ET.fromstring(svg)  # the inlined chart is well-formed
    assert "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1" in text and "spec:" not in text


def test_analyze_profile_html_has_the_chart(tmp_path: Path) -> None:
    p = _profile_with_counters()
    p.save(tmp_path / "prof")
    page, js = tmp_path / "r.html", tmp_path / "s.json"
    assert main(["analyze", str(tmp_path / "prof"), "--html-report", str(page), "--json", str(js), "--quiet"]) == 0
    text = page.read_text()
    assert "<h2>Roofline</h2>" in text and "<svg" in text and "http://" not in text
    assert json.loads(js.read_text())["roofline"]["plotted"] > 30


def test_html_without_counters_has_no_chart(tmp_path: Path) -> None:
    from conftest import DEEPSPEECH

    page = tmp_path / "r.html"
    assert main(["analyze", str(DEEPSPEECH), "--html-report", str(page), "--quiet"]) == 0
    assert "<svg" not in page.read_text()


def test_terminal_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(H100), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "roofline: DRAM 3.35 TB/s (ncu)" in out and "4 without FLOPs not plotted" in out


def test_bad_ncu_input_keeps_its_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "ncu.csv"
    bad.write_text('"ID","Kernel Name"\n')
    assert main(["analyze", str(bad), "--html", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip() and not (tmp_path / "r.html").exists()


def test_the_terminal_report_shows_bounds_and_the_roofline() -> None:
    from io import StringIO

    from rich.console import Console

    from dnnprof.render.terminal import render

    doc = summarize(_profile_with_counters())
    buf = StringIO()
    render(doc, console=Console(file=buf, width=260, force_terminal=False), top=40)
    out = buf.getvalue()
    assert "SM %" in out and "Mem %" in out and "Bound" in out
    bounds = {k["bound"] for k in doc["kernels"] if k.get("bound")}
    assert bounds and all(b in out for b in bounds)
    assert "roofline:" in out and f"{doc['roofline']['plotted']} kernels plotted" in out
