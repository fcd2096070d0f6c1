"""What a person reads of a finding: every rule's evidence shows, once, with no internal names, ``None`` or "≤0%".

The findings come from real traces that between them fire every rule of the catalogue: the planted-problem traces
(tests/data/rules), a DDP straggler pair, a run with dnnprof's own module ranges, a compiled run with eager work at
a graph break, and HTA's NCCL trace from
``../shared/foreign`` (the only one with exposed communication; skipped when that folder is absent).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dnnprof.analysis.rules import REGISTRY, findings_for
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.detect import open_profile
from dnnprof.render.evidence import evidence_items, gain_text, offender_text, offenders
from dnnprof.render.html_report import render_html
from dnnprof.render.terminal import render

DATA = Path(__file__).parent / "data"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"
PLANTED = ("no_steps", "item_sync", "fp64_model", "low_occupancy", "pageable_h2d", "slow_dataloader",
           "memory_near_limit", "compiled_mlp")
TRACES = [DATA / "rules" / "h100" / f"{n}.json.gz" for n in PLANTED] + [
    DATA / "ddp_h100" / "straggler", DATA / "h100_recorded" / "transformer_train_modules.json.gz",
    DATA / "compiled_cpu_eager_break",
    # unstable-steps: a CPU run's warm-up step (the planted GPU traces' uneven first step is the capture starting
    # while the GPU drains its queue: their GPU cadence is steady, and the rule says nothing of them)
    DATA / "cpu_mlp_train" / "trace.json.gz"]
NCCL = FOREIGN / "hta__nccl_data.json.gz"


def _doc(path: Path) -> dict[str, Any]:
    profile = open_profile(path)
    doc = summarize(profile)
    side = path.with_name(path.name.removesuffix(".json.gz") + ".meta.json")
    if side.is_file():  # the planted traces' recorded settings and memory, as tests/test_rules_planted.py reads them
        meta = json.loads(side.read_text())
        doc["meta"] = meta
        if meta.get("memory"):
            doc["memory"] = meta["memory"]
    doc["findings"] = findings_for(profile, doc)
    return doc


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    paths = TRACES + ([NCCL] if NCCL.is_file() else [])
    return {p.name: _doc(p) for p in paths}


def _terminal(doc: dict[str, Any], finding: dict[str, Any]) -> str:
    console = Console(record=True, width=160, color_system=None, file=io.StringIO())
    render({**doc, "findings": [finding]}, console=console, top=3)
    text = console.export_text()
    return text[text.index("Findings (ranked"):]


def _cells(table_text: str) -> str:
    """The Finding column of a one-finding table, its wrapped lines joined back into one."""
    rows = [ln.split("│") for ln in table_text.splitlines() if ln.count("│") >= 4]
    return " ".join(r[3].strip() for r in rows)


def _html_findings(doc: dict[str, Any], finding: dict[str, Any]) -> str:
    html = render_html({**doc, "findings": [finding]})
    start = html.index("<h2>Findings</h2>")
    return html[start:html.index("<h2>", start + 1)]


def test_the_traces_fire_every_rule(docs: dict[str, dict[str, Any]]) -> None:
    fired = {f["id"] for d in docs.values() for f in d["findings"]}
    expected = set(REGISTRY) - (set() if NCCL.is_file() else {"communication-exposed"})
    assert fired >= expected, f"no trace fires {sorted(expected - fired)}"


def test_every_finding_shows_its_evidence_once_and_never_empty(docs: dict[str, dict[str, Any]]) -> None:
    for name, doc in docs.items():
        for f in doc["findings"]:
            where = f"{name} {f['id']}"
            body = _cells(_terminal(doc, f))
            # A finding with offenders names the worst one, exactly once, with something after "worst:".
            assert body.count("worst:") == (1 if f["evidence"]["top"] else 0), where
            assert not re.search(r"worst:\s*(→|$)", body), f"{where}: empty worst line"
            html = _html_findings(doc, f)
            assert "<li></li>" not in html and "<ul></ul>" not in html, where
            if f["evidence"]["top"]:
                assert html.count("<li>") == min(5, len(f["evidence"]["top"])), where
            # Every rule has numbers besides its summary, and the page shows them.
            assert evidence_items(f["evidence"]), where
            assert "evidence: " in html, where


def test_no_internal_names_none_or_zero_gains_in_what_is_read(docs: dict[str, dict[str, Any]]) -> None:
    for name, doc in docs.items():
        for f in doc["findings"]:
            text = _terminal(doc, f) + _html_findings(doc, f)
            for bad in ("dnnprof.module:", "None", "≤0%", "mostly in ?"):
                assert bad not in text, f"{name} {f['id']}: {bad!r} in the report"


def test_module_ranges_read_as_their_layer(docs: dict[str, dict[str, Any]]) -> None:
    # The run with dnnprof's module ranges: the op a kernel ran inside is the module, shown as the layer column is.
    doc = docs["transformer_train_modules.json.gz"]
    named = [o.get("in_op") for f in doc["findings"] for o in f["evidence"]["top"] if isinstance(o, dict)]
    assert "1.layers.5.self_attn (MultiheadAttention)" in named
    assert not [n for n in named if n and n.startswith("dnnprof.module:")]


def test_idle_gaps_read_as_gap_cause_and_ops() -> None:
    gap = {"gap_us": 238.0, "cause": "host_launch", "host_op": "aten::_foreach_add_", "next_kernel_op": "aten::addmm"}
    assert offender_text(gap) == ("gap 238.0 µs, cause host_launch, host in aten::_foreach_add_, "
                                  "next kernel from aten::addmm")


def test_a_new_rules_keys_render_by_their_unit_suffix() -> None:
    o = {"thing": "x", "name": "fancy_kernel", "spill_bytes": 3 * 2**20, "stall_pct": 41.25, "wait_us_per_step": 2500,
         "pct_of_step": 3.456, "missing": None, "blank": "", "ok": True, "tiles": [1, 2]}
    assert offender_text(o) == ("fancy_kernel, thing x, spill 3.0 MiB, stall 41.2%, wait 2.50 ms/step, "
                                "3.5% of the step, ok yes, tiles: 1, 2")
    # The finding's own numbers, nested ones with their parent's unit; keys equal to the finding's are not repeated.
    ev = {"summary": "s", "top": [{"kernel": "k", "sm_count": 132, "blocks": 16}], "sm_count": 132,
          "by_family_us": {"softmax": 22090.0}, "idle_by_cause": {"sync": {"idle_us": 87.9, "pct_of_idle": 5.0}}}
    assert offenders(ev) == ["k, blocks 16"]
    assert evidence_items(ev) == ["SMs 132", "by family: softmax 22.09 ms",
                                  "idle by cause: sync (idle 87.9 µs, 5.0% of idle)"]
    assert offenders({"summary": "s", "top": []}) == [] and offenders({"top": [{"x": None}]}) == []


@pytest.mark.parametrize(("gain", "short", "text"), [
    (None, True, "-"), (0.0, True, "none"), (0.0, False, "no measurable gain"), (0.3, True, "≤0.3%"),
    (12.4, True, "≤12%"), (99.6, False, "≤100%")])
def test_gain_text(gain: float | None, short: bool, text: str) -> None:
    assert gain_text(gain, short=short) == text


@pytest.mark.skipif(not (FOREIGN / "kineto__tbplugin_resnet50_workers0.json.gz").is_file(),
                    reason="../shared/foreign (real traces from other projects) is not next to this checkout")
def test_kernels_without_a_layer_are_not_said_to_be_in_one() -> None:
    # A torch 1.8 trace: its fp32 convolutions have no layer; the summary must not say they are "mostly in ?".
    doc = _doc(FOREIGN / "kineto__tbplugin_resnet50_workers0.json.gz")
    amp = next(f for f in doc["findings"] if f["id"] == "amp-not-used")
    assert "?" not in amp["evidence"]["summary"] and "mostly in ," not in amp["evidence"]["summary"]
