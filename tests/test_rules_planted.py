"""Both-ways tests on the planted-problem traces recorded by ``benchmarks/gpu/planted_problems.py``.

Each trace in ``tests/data/rules/`` comes with ``<scenario>.meta.json`` (also embedded in the trace as the
``dnnprof_run`` metadata): the findings that must fire (``expect``), those that must stay quiet (``forbid``), and
what the run recorded (``cudnn_benchmark``, ``memory``). Until the traces are committed this module skips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dnnprof.analysis.rules import findings_for
from dnnprof.analysis.summary import summarize
from dnnprof.ingest.kineto import read_kineto

RULES_DATA = Path(__file__).parent / "data" / "rules"
TRACES = sorted(RULES_DATA.glob("**/*.json.gz")) if RULES_DATA.is_dir() else []


def _meta(trace: Path) -> dict[str, Any]:
    side = trace.with_name(trace.name.removesuffix(".json.gz") + ".meta.json")
    return json.loads(side.read_text()) if side.is_file() else {}


@pytest.mark.skipif(not TRACES, reason="planted-problem traces not recorded yet (benchmarks/gpu/planted_problems.py)")
@pytest.mark.parametrize("trace", TRACES, ids=[f"{t.parent.name}/{t.name.removesuffix('.json.gz')}" for t in TRACES])
def test_planted_problem_fires_and_nothing_cries_wolf(trace: Path) -> None:
    meta = _meta(trace)
    assert meta.get("expect") is not None, f"{trace.name}: no .meta.json with expect/forbid next to it"
    profile = read_kineto(trace)
    doc = summarize(profile)
    doc["meta"] = meta
    if meta.get("memory"):
        doc["memory"] = meta["memory"]
    found = {f["id"]: f for f in findings_for(profile, doc)}
    missing = [i for i in meta["expect"] if i not in found]
    wolf = [i for i in meta.get("forbid", []) if i in found]
    assert not missing, f"{trace.name}: planted problem not found: {missing}; found {sorted(found)}"
    assert not wolf, f"{trace.name}: cried wolf: {[(i, found[i]['evidence']['summary']) for i in wolf]}"
    for i in meta["expect"]:
        f = found[i]
        assert f["evidence"]["summary"] and f["recommendation"] and f["how_estimated"]
