"""One HTML ``table()`` for every page: cells are text and escaped, unless render code marks them ``Markup``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import GPT2
from dnnprof.render.html_table import Markup, table

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'


def _safe(html: str) -> None:
    assert SCRIPT not in html and "<img" not in html and "onerror=alert(1)>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html


def test_a_plain_str_cell_is_always_escaped() -> None:
    html = table(["name", ("time", True)], [[SCRIPT, "1.0 ms"], [IMG, Markup("<b>2</b>")]])
    assert "&lt;script&gt;" in html and "&quot;&gt;&lt;img" in html and SCRIPT not in html and "<img" not in html
    assert "<b>2</b>" in html and '<td class="n">1.0 ms</td>' in html and '<th class="n">time</th>' in html


def test_a_heading_is_escaped_too() -> None:
    assert "<th>&lt;i&gt;</th>" in table(["<i>"], [])


def test_hostile_names_in_a_trace_come_out_escaped_in_the_printable_report(tmp_path: Path) -> None:
    trace = json.loads(gzip.open(GPT2).read())
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = SCRIPT + e["name"]
        elif e.get("cat") == "cpu_op":
            e["name"] = IMG + e["name"]
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(trace))
    out = tmp_path / "r.html"
    env = dict(os.environ, COLUMNS="160", NO_COLOR="1")
    r = subprocess.run([sys.executable, "-m", "dnnprof", "analyze", str(src), "--html-report", str(out)],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    _safe(html)
    assert html.count("<table>") >= 4  # the kernel, layer, phase and host-op tables all hold the names


def test_hostile_names_come_out_escaped_in_the_sweep_html() -> None:
    from dnnprof.analysis.sweep_report import sweep_report
    from dnnprof.render.sweep_html import render_html
    from test_sweep_report import make_sweep

    report = sweep_report(make_sweep())
    q1 = report["bottlenecks"]
    for k in q1["kernels"]:
        k["short_name"] = k["name"] = SCRIPT
        k["layer"] = IMG
    q1["layers"][0]["name"] = IMG
    _safe(render_html(report))
