"""The terminal report stays readable at 80-120 columns: numbers are never cut, names are cut in the middle."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from dnnprof.render.fit import middle
from dnnprof.render.terminal import render

SUMMARY = Path(__file__).resolve().parent / "data" / "run_gpt2_infer_h100" / "expected_summary.json"


def _report(doc: dict, width: int) -> str:
    buf = io.StringIO()
    render(doc, console=Console(file=buf, width=width, force_terminal=False, color_system=None), top=8)
    return buf.getvalue()


def test_middle_keeps_both_ends() -> None:
    name = "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"
    cut = middle(name, 21)
    assert cell_len(cut) == 21 and cut.startswith("cutlass_75") and cut.endswith("tn_align1") and "…" in cut
    assert middle(name, len(name)) == name
    assert middle("µs→µs", 3) == "µ…s"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_no_line_is_wider_than_the_terminal_and_no_number_is_cut(width: int) -> None:
    doc = json.loads(SUMMARY.read_text())
    out = _report(doc, width)
    assert max(cell_len(line) for line in out.splitlines()) <= width
    # The time of every kernel shown is printed whole, never "1…".
    from dnnprof.model.units import us_text

    for k in doc["kernels"][:8]:
        assert f" {us_text(k['total_us'])} " in out, k["short_name"]
    assert "│ 1… │" not in out and "┃ T… ┃" not in out


def test_layers_show_module_paths() -> None:
    doc = json.loads(SUMMARY.read_text())
    path = next(layer["name"] for layer in doc["layers"] if ".mlp." in layer["name"])
    assert path in _report(doc, 120)  # "transformer.h.7.mlp.act (NewGELUActivation)", whole where it fits


def test_a_wide_terminal_shows_every_column() -> None:
    doc = json.loads(SUMMARY.read_text())
    out = _report(doc, 200)
    for col in ("Calls", "Max", "Family", "TC"):
        assert col in out
    narrow = _report(doc, 80)
    assert "Max" not in narrow.split("Top layers")[0]
