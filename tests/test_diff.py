"""``dnnprof diff BASE NEW``: two real runs compared per step."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dnnprof.analysis.diff import SCHEMA, diff_summaries
from dnnprof.cli.main import main

DATA = Path(__file__).parent / "data"
H100 = DATA / "h100_recorded" / "cnn_train_fp32.json.gz"
H200 = DATA / "h200_recorded" / "cnn_train_fp32.json.gz"
RUN_SUMMARY = DATA / "run_gpt2_infer_h100" / "expected_summary.json"


def _summary(path: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{path.parent.name}.json"
    assert main(["analyze", str(path), "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def test_the_same_run_twice_changes_nothing() -> None:
    s = json.loads(RUN_SUMMARY.read_text())
    d = diff_summaries(s, s)
    assert d["schema"] == SCHEMA and d["step_time_median_us"]["speedup"] == 1.0
    assert all(r["delta_us_per_step"] == 0 and r["status"] == "both" for k in ("families", "layers", "kernels")
               for r in d[k])
    assert not d["findings"]["resolved"] and not d["findings"]["new"]
    assert {f["id"] for f in d["findings"]["persisting"]} == {f["id"] for f in s["findings"]}
    assert d["throughput"]["ratio"] == 1.0 and d["throughput"]["unit"] == "tokens/s"


def test_a_kernel_that_goes_away_and_a_finding_that_is_resolved() -> None:
    base = json.loads(RUN_SUMMARY.read_text())
    new = copy.deepcopy(base)
    gone = new["kernels"].pop(0)  # the run's biggest kernel, no longer launched
    new["findings"] = [f for f in new["findings"] if f["id"] != "compile-not-used"]
    new["steps"]["median_us"] = base["steps"]["median_us"] / 2
    d = diff_summaries(base, new)
    steps = base["steps"]["count"]
    top = d["kernels"][0]
    assert top["status"] == "gone" and top["key"] == f"{gone['name']} @ {gone['layer']}"
    assert top["base_us_per_step"] == pytest.approx(gone["total_us"] / steps, abs=1e-3) and top["new_us_per_step"] == 0
    assert top["label"].endswith(f"@ {gone['layer']}") and len(top["label"]) < len(top["key"])
    assert [f["id"] for f in d["findings"]["resolved"]] == ["compile-not-used"]
    assert d["step_time_median_us"]["speedup"] == 2.0 and d["step_time_median_us"]["ratio"] == 0.5


def test_two_real_cards_compared_from_their_traces(tmp_path: Path) -> None:
    out = tmp_path / "diff.json"
    assert main(["diff", str(H100), str(H200), "--json", str(out), "--quiet"]) == 0
    d = json.loads(out.read_text())
    a, b = _summary(H100, tmp_path), _summary(H200, tmp_path)
    assert (d["base"]["device"], d["new"]["device"]) == (a["device"]["name"], b["device"]["name"])
    assert d["step_time_median_us"]["base"] == a["steps"]["median_us"]
    assert d["step_time_median_us"]["speedup"] == pytest.approx(a["steps"]["median_us"] / b["steps"]["median_us"],
                                                                rel=1e-3)
    conv = next(r for r in d["families"] if r["key"] == "conv")
    fam = {f["family"]: f["total_us"] for f in a["families"]}
    assert conv["base_us_per_step"] == pytest.approx(fam["conv"] / a["steps"]["count"], abs=1e-3)
    deltas = [abs(r["delta_us_per_step"]) for r in d["families"]]
    assert deltas == sorted(deltas, reverse=True)
    import jsonschema

    schema = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "diff-1.schema.json"
    jsonschema.validate(d, json.loads(schema.read_text()))
    bad = {**d, "kernels": [{**d["kernels"][0], "status": "moved"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json.loads(schema.read_text()))


def test_summary_json_and_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(RUN_SUMMARY), str(RUN_SUMMARY), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == SCHEMA
    assert main(["diff", str(RUN_SUMMARY), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert "missing.json" in err and "Traceback" not in err


def test_a_late_peer_shows_as_time_in_collectives_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two real DDP runs on two H100s, the second with rank 1 sleeping 15 ms before each backward: rank 0 looks
    busier (51 → 82 %) because its all-reduce spins while it waits; the diff says how much of the window that is."""
    ddp = Path(__file__).parent / "data" / "ddp_h100"
    out = tmp_path / "diff.json"
    assert main(["diff", str(ddp / "balanced"), str(ddp / "straggler"), "--json", str(out)]) == 0
    assert "collectives alone (transfer, or waiting for other ranks): 39.2% → 73.7%" in capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["gpu"]["collectives_only_pct"] == {"base": 39.2, "new": 73.68, "ratio": 1.8796, "delta": 34.48}
    import jsonschema

    schema = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "diff-1.schema.json"
    jsonschema.validate(d, json.loads(schema.read_text()))


def test_small_gains_keep_a_decimal_and_zero_gains_are_not_printed() -> None:
    import io

    from rich.console import Console

    from dnnprof.render.diff_table import render_diff

    base = json.loads(RUN_SUMMARY.read_text())
    new = copy.deepcopy(base)
    base["findings"] = [{**f, "est_gain_pct": g} for f, g in zip(base["findings"], (0.3, 0.0, 12.0), strict=False)]
    new["findings"] = []
    console = Console(file=io.StringIO(), width=300, color_system=None)
    render_diff(diff_summaries(base, new), console=console)
    line = next(x for x in console.file.getvalue().splitlines() if x.startswith("findings resolved"))
    ids = [f["id"] for f in base["findings"]]
    assert f"{ids[0]} (expected gain ≤0.3%), {ids[1]}, {ids[2]} (expected gain ≤12%)" in line
