"""`dnnprof analyze`: the command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CPU_MLP, DEEPSPEECH, GPT2
from dnnprof.cli.main import main

SCHEMA = Path(__file__).parents[1] / "src" / "dnnprof" / "render" / "schemas" / "summary-1.schema.json"
GOLDEN = Path(__file__).parent / "golden" / "analyze_gpt2.txt"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="160", NO_COLOR="1", TERM="dumb")
    return subprocess.run([sys.executable, "-m", "dnnprof", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


@pytest.mark.parametrize("path", [GPT2, DEEPSPEECH, CPU_MLP])
def test_json_matches_schema(tmp_path: Path, path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "s.json"
    assert main(["analyze", str(path), "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["schema"] == "dnnprof.summary/1"


def test_kernels_list_every_distinct_kernel(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    main(["analyze", str(GPT2), "--json", str(out), "--quiet", "--top", "3"])
    doc = json.loads(out.read_text())
    from conftest import load_raw

    names = {e["name"] for e in load_raw(GPT2)["traceEvents"] if e.get("cat") == "kernel"}
    assert {k["name"] for k in doc["kernels"]} == names
    assert sum(k["pct"] for k in doc["kernels"]) == pytest.approx(100, abs=0.1)


def test_cpu_only_trace_says_so() -> None:
    r = run_cli("analyze", str(CPU_MLP))
    assert r.returncode == 0, r.stderr
    assert "no GPU activity" in r.stdout


def test_terminal_report_golden() -> None:
    # Relative path from the data folder: the report shows the path, and it must not depend on the checkout.
    r = run_cli("analyze", str(GPT2.relative_to(GPT2.parents[1])), "--top", "5", cwd=GPT2.parents[1])
    assert r.returncode == 0, r.stderr
    got = r.stdout
    if os.environ.get("DNNPROF_REGOLD"):
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "report changed: rerun with DNNPROF_REGOLD=1 and review the diff"


def test_save_then_analyze_saved_profile(tmp_path: Path) -> None:
    saved = tmp_path / "prof"
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    assert main(["analyze", str(GPT2), "--save", str(saved), "--json", str(a), "--quiet"]) == 0
    assert main(["analyze", str(saved), "--json", str(b), "--quiet"]) == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    assert da["kernels"] == db["kernels"]
    assert da["gpu"] == db["gpu"]


def test_folder_with_per_rank_traces(tmp_path: Path, variant) -> None:
    import gzip

    for rank in (0, 1):
        doc = json.loads(gzip.open(CPU_MLP).read())
        doc["distributedInfo"]["rank"] = rank
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "r1.json"
    assert main(["analyze", str(tmp_path), "--rank", "1", "--json", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["steps"]["count"] == 3
    assert main(["analyze", str(tmp_path), "--rank", "7", "--quiet"]) == 2


def test_each_rank_of_a_two_gpu_folder_is_summarised_alone(tmp_path: Path) -> None:
    """Two real GPU traces as ranks 0 and 1 of one run (GPT-2 and DeepSpeech, different kernels): each rank's
    summary and findings are those of its trace alone — nothing of one rank leaks into the other's."""
    import gzip

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank, trace in enumerate((GPT2, DEEPSPEECH)):
        doc = json.loads(gzip.open(trace).read())
        doc.setdefault("distributedInfo", {})["rank"] = rank
        (ranks / f"rank{rank}.json").write_text(json.dumps(doc))
    for rank, trace in enumerate((GPT2, DEEPSPEECH)):
        alone, out = tmp_path / f"alone{rank}.json", tmp_path / f"r{rank}.json"
        assert main(["analyze", str(trace), "--json", str(alone), "--quiet"]) == 0
        assert main(["analyze", str(ranks), "--rank", str(rank), "--json", str(out), "--quiet"]) == 0
        want, got = json.loads(alone.read_text()), json.loads(out.read_text())
        for key in ("device", "steps", "gpu", "attribution", "kernels", "families", "layers", "phases", "memcpy"):
            assert got[key] == want[key], (rank, key)
        # The same findings as alone, plus the one only two ranks show: their compute per step differs.
        assert [f["id"] for f in got["findings"] if f["id"] != "rank-straggler"] == \
            [f["id"] for f in want["findings"]], rank
        assert "rank-straggler" in {f["id"] for f in got["findings"]}


def test_a_damaged_saved_profile_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "prof"
    assert main(["analyze", str(GPT2), "--save", str(saved), "--quiet"]) == 0
    (saved / "memset.parquet").unlink()  # as a profile saved before a table existed
    out = tmp_path / "s.json"
    assert main(["analyze", str(saved), "--json", str(out), "--quiet"]) == 0
    notes = json.loads(out.read_text())["source"]["notes"]
    assert notes == ["tables missing from the saved profile (read as empty): memset"]
    (saved / "ops.parquet").write_bytes(b"PAR1 cut short")
    assert main(["analyze", str(saved), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ops.parquet: unreadable Parquet" in err and "Traceback" not in err
    (saved / "strings.parquet").unlink()
    (saved / "ops.parquet").unlink()
    assert main(["analyze", str(saved), "--quiet"]) == 2
    assert "no strings.parquet" in capsys.readouterr().err


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "missing.json", "no such file or directory"),
    (lambda d: d, "folder holds no trace"),
    (lambda d: _write(d / "t.json.gz", GPT2.read_bytes()[:5000]), "truncated gzip"),
    (lambda d: _write(d / "t.json", b'{"traceEvents": [{"ph": "X",'), "invalid JSON"),
    (lambda d: _write(d / "t.json", b'{"results": [1, 2, 3]}'), "not a Chrome/Kineto trace"),
    (lambda d: _write(d / "t.txt", b"hello world"), "not a trace dnnprof can read"),
])
def test_bad_input_one_line_exit_2(tmp_path: Path, make, message: str) -> None:
    target = make(tmp_path)
    r = run_cli("analyze", str(target))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert message in lines[0]
    assert str(target) in lines[0]
    assert "Traceback" not in r.stderr


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_html_report_is_self_contained_and_lists_findings(tmp_path: Path) -> None:
    from html.parser import HTMLParser

    out = tmp_path / "r.html"
    js = tmp_path / "s.json"
    assert main(["analyze", str(DEEPSPEECH), "--html-report", str(out), "--json", str(js), "--quiet"]) == 0
    text = out.read_text()
    doc = json.loads(js.read_text())
    assert "<script" not in text and "http://" not in text and "https://" not in text
    for f in doc["findings"]:
        assert f"<code>{f['id']}</code>" in text
    assert doc["kernels"][0]["short_name"] in text

    class Check(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag not in ("meta", "br"):
                self.stack.append(tag)

        def handle_endtag(self, tag: str) -> None:
            assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}>"
            self.stack.pop()

    c = Check()
    c.feed(text)
    assert c.stack == []


@pytest.mark.parametrize("argv", [["analyze", "x.json", "--json"], ["analyze", "--no-such-option"],
                                  ["occupancy", "--cc", "9.0", "--block-size", "many"], ["no-such-command"]])
def test_usage_errors_print_click_s_message_not_a_traceback(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Error" in err and "Traceback" not in err


@pytest.mark.parametrize("path", [CPU_MLP, Path(__file__).parent / "data" / "run_user_h100" / "cuda_fp16"],
                         ids=["kineto", "run-dir"])
def test_analyze_asks_what_the_input_is_once(tmp_path: Path, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dnnprof.ingest.detect as detect
    import dnnprof.runs.report as report

    calls: list[Path] = []
    original = detect.kind_of

    def counting(p: Path) -> str:
        calls.append(Path(p))
        return original(p)

    monkeypatch.setattr(detect, "kind_of", counting)
    monkeypatch.setattr(report, "kind_of", counting)
    assert main(["analyze", str(path), "--json", str(tmp_path / "s.json"), "--quiet"]) == 0
    assert calls == [path]
