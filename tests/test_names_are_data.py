"""Names from a trace are data: they show literally, never as rich markup, Markdown/HTML or terminal commands."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dnnprof.analysis.diff import diff_summaries
from dnnprof.cli.main import main
from dnnprof.render.safe_text import clean, md

DATA = Path(__file__).parent / "data"
RUN_SUMMARY = DATA / "run_gpt2_infer_h100" / "expected_summary.json"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
ALEXNET = FOREIGN / "hta__alexnet_critical_path.json.gz"

#: Names seen in the wild or built to break a renderer: rich markup (a closing tag alone crashes rich; the others
#: vanish), terminal escapes (window title, clear screen, a colour left on), a newline, HTML, a Markdown link.
EVIL = ["[/]gemm_kernel", "[bold red]relu[/bold red]", "[link=http://x.test]conv[/link]", "[memory]",
        "\x1b]0;owned\x07title_kernel", "\x1b[2Jclear_kernel", "\x1b[31mred_op", "two\nlines|pipe",
        "<script>alert(1)</script>", "[click](javascript:alert(1))", "bidi\u202ekernel", "c1\x9b31mkernel"]
#: What each must show as in a terminal (escape sequences removed, other control characters made spaces).
SHOWN = ["[/]gemm_kernel", "[bold red]relu[/bold red]", "[link=http://x.test]conv[/link]", "[memory]",
         "title_kernel", "clear_kernel", "red_op", "two lines|pipe", "<script>alert(1)</script>",
         "[click](javascript:alert(1))", "bidi kernel", "c1kernel"]


def _planted() -> dict[str, Any]:
    """The real summary of a recorded H100 run with the names of its kernels, layers, ops and notes replaced."""
    doc = json.loads(RUN_SUMMARY.read_text())
    for i, k in enumerate(doc["kernels"][:len(EVIL)]):
        k["short_name"] = EVIL[i]
        k["layer"] = EVIL[-1 - i]
    for i, r in enumerate((doc.get("layers") or [])[:len(EVIL)]):
        r["name"] = EVIL[i]
    for i, r in enumerate((doc.get("host_ops") or [])[:len(EVIL)]):
        r["name"] = EVIL[i]
    doc["source"]["notes"] = [*EVIL[:3], *(doc["source"].get("notes") or [])]
    doc["source"]["path"] = EVIL[4]
    doc["device"]["name"] = EVIL[1]
    return doc


def _console() -> Console:
    return Console(file=io.StringIO(), width=400, color_system=None, force_terminal=False)


def test_clean_and_md() -> None:
    assert [clean(n) for n in EVIL] == SHOWN
    assert clean("plain_kernel<float>") == "plain_kernel<float>"
    assert md("a|b\nc <i>x</i> [l](javascript:y) `x` *b* _e_ a_b") == \
        r"a\|b c &lt;i&gt;x&lt;/i&gt; \[l\](javascript:y) \`x\` \*b\* \_e\_ a_b"


def test_terminal_report_shows_every_name_literally() -> None:
    from dnnprof.render.terminal import render

    con = _console()
    render(_planted(), console=con, top=len(EVIL))
    out = con.file.getvalue()
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
    for name in SHOWN:
        if "\n" not in name and " " not in name:  # wrapped names are checked by their parts below
            assert name in out, name
    assert "two lines|pipe" in out.replace("\n", " ") or "two lines" in out


def test_diff_and_counters_tables_show_names_literally() -> None:
    from dnnprof.render.counters_table import render_counters
    from dnnprof.render.diff_table import render_diff

    base = json.loads(RUN_SUMMARY.read_text())
    new = _planted()
    con = _console()
    render_diff(diff_summaries(base, new), console=con, top=40)
    out = con.file.getvalue()
    assert "\x1b" not in out
    for name in ("[/]gemm_kernel", "[bold red]relu[/bold red]", "[memory]"):
        assert name in out, name
    assert "[link=http://x.test]conv[/link]" in out.replace("\n", "")

    kernels = [{"pct": 1.0, "total_us": 1.0, "launches": 1, "sm_throughput_pct": None, "memory_throughput_pct": None,
                "achieved_occupancy_pct": None, "waves_per_sm": None, "dram_bytes": None, "flops": None,
                "arithmetic_intensity": None, "bound": None, "short_name": n} for n in EVIL]
    con = _console()
    render_counters({"launches": len(EVIL), "kernels": kernels, "source": {"path": "[/]x\x1b[2J.csv"},
                     "bound_share_pct": {}}, console=con, top=len(EVIL))
    out = con.file.getvalue()
    assert "\x1b" not in out and "[/]x.csv" in out
    for name in ("[/]gemm_kernel", "[bold red]relu[/bold red]", "[memory]", "title_kernel"):
        assert name in out, name


def test_sweep_markdown_escapes_names() -> None:
    from dnnprof.analysis.sweep_report import sweep_report
    from dnnprof.render.sweep_md import render_markdown
    from test_sweep_report import make_sweep

    report = sweep_report(make_sweep())
    report = copy.deepcopy(report)
    kernels = report["bottlenecks"]["kernels"]
    assert kernels, "the fixture has a default-point profile"
    kernels[0]["short_name"] = "<script>alert(1)</script>"
    kernels[1]["short_name"] = "[click](javascript:alert(1))"
    kernels[2]["layer"] = "two\nlines|pipe"
    report["sweep"]["workload"] = "wl\n# injected heading"
    text = render_markdown(report)
    assert "<script>" not in text and "[click](javascript:" not in text and "\n# injected" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and r"\[click\](javascript:alert(1))" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header = next(r for r in rows if r.startswith("| kernel |"))
    table = rows[rows.index(header):rows.index(header) + 1 + len(kernels)]
    # every row of the kernel table keeps its columns: the pipe and newline in a name do not split cells
    assert {r.replace("\\|", "").count("|") for r in table} == {header.count("|")}


@pytest.mark.skipif(not ALEXNET.exists(), reason="the foreign trace corpus (shared/foreign) is not checked out")
def test_a_user_annotation_that_looks_like_markup_shows_in_the_layers_table(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(ALEXNET)]) == 0
    out = capsys.readouterr().out
    layers = out[out.index("Top layers"):out.index("Kernel families")]
    assert "[param|cuda]" in layers


def test_error_lines_carry_no_terminal_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "\x1b]0;owned\x07trace.json"
    assert main(["analyze", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "trace.json" in err and len(err.strip().splitlines()) == 1



def test_svg_plots_stay_well_formed_xml_with_hostile_labels() -> None:
    import xml.etree.ElementTree as ET

    from dnnprof.render.sweep_svg import line_chart

    label = "\x1b[2J<series> & \x07bell"
    svg = line_chart([(label, [(1.0, 2.0), (2.0, 3.0)])], title="t\x1b]0;x\x07", y_label="y")
    root = ET.fromstring(svg)  # XML 1.0 forbids ESC and BEL: a raw one makes the file unreadable
    texts = " ".join(t for t in root.itertext())
    assert "<series> & bell" in texts.replace("  ", " ")
