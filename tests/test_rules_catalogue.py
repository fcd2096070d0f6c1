"""The expert system's public contract: ids, docstrings, documentation, JSON shape and ranking."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import jsonschema
import pytest

from conftest import DEEPSPEECH, GPT2
from dnnprof.analysis.rules import (
    REGISTRY,
    compiled,
    distributed,
    findings_for,
    idle,
    kernels,
    memory_steps,
    precision,
    sync,
)
from dnnprof.analysis.rules.base import SEVERITIES, Finding, rank_key, severity_for
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.kineto import read_kineto

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ("amp-not-used", "tensor-cores-unused", "fp64-used", "gpu-idle", "dataloader-bound", "host-sync",
             "pageable-memcpy", "launch-bound", "optimizer-not-fused", "low-occupancy", "small-grid",
             "memory-underused", "memory-near-limit", "unstable-steps", "no-steps", "cudnn-benchmark-off",
             "compile-not-used", "communication-exposed", "rank-straggler", "rank-late-phase",
             "compile-graph-breaks")
SCHEMA = json.loads((ROOT / "src/dnnprof/render/schemas/summary-1.schema.json").read_text())


def test_registry_is_exactly_the_public_catalogue() -> None:
    assert sorted(REGISTRY) == sorted(CATALOGUE)


@pytest.mark.parametrize("rule_id", CATALOGUE)
def test_every_rule_documents_pattern_algorithm_fix(rule_id: str) -> None:
    doc = inspect.getdoc(REGISTRY[rule_id].fn) or ""
    for section in ("Pattern:", "Algorithm:", "Fix:"):
        assert section in doc, f"{rule_id}: docstring lacks {section}"


def test_docs_list_every_id_and_threshold_constant() -> None:
    text = (ROOT / "docs/findings.md").read_text()
    for rule_id in CATALOGUE:
        assert f"### `{rule_id}`" in text
    for module in (precision, idle, sync, kernels, memory_steps, distributed, compiled):
        for name in re.findall(r"^([A-Z][A-Z0-9_]+) = ", inspect.getsource(module), re.M):
            if name in ("TOP_N", "TC_FAMILIES"):
                continue
            assert f"`{name}`" in text, f"docs/findings.md does not explain {module.__name__}.{name}"


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH])
def test_findings_are_json_ready_ranked_and_match_the_schema(path: Path) -> None:
    profile = read_kineto(path)
    doc = summarize(profile)
    doc["findings"] = findings_for(profile, doc)
    assert doc["findings"], "both real traces have problems"
    jsonschema.validate(doc, SCHEMA)
    json.dumps(doc, allow_nan=False)
    assert [rank_key(f) for f in doc["findings"]] == sorted(rank_key(f) for f in doc["findings"])
    for f in doc["findings"]:
        assert f["severity"] in SEVERITIES
        assert f["evidence"]["summary"] and isinstance(f["evidence"]["top"], list)
        assert f["how_estimated"]
        assert f["est_gain_pct"] is None or 0 <= f["est_gain_pct"] <= 100


def test_severity_and_ranking_rules() -> None:
    assert [severity_for(g) for g in (None, 0.5, 3.0, 9.9, 10.0)] == ["info", "low", "medium", "medium", "high"]
    a = Finding("a", "t", "s", "r", 5.0, "h").to_dict()
    b = Finding("b", "t", "s", "r", None, "h").to_dict()
    c = Finding("c", "t", "s", "r", 12.0, "h", severity="low").to_dict()
    assert [f["id"] for f in sorted([a, b, c], key=rank_key)] == ["c", "a", "b"]
    assert c["severity"] == "low" and b["severity"] == "info"
