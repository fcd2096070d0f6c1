"""Start-up: the CLI imports only what the command needs, and ``analyze`` reads before it imports the analysis.

Checked in fresh interpreters (``sys.modules`` after the fact), not timed: timings swing with the machine's load
(benchmarks/RESULTS.md has the measured start-up times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import DATA

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("numpy", "pandas", "pyarrow", "duckdb", "torch", "scipy", "rich.markdown")

# Runs `dnnprof ARGS` in-process and prints, as JSON, the heavy modules loaded when the Kineto read started and
# at the end.
_PROBE = r"""
import json, sys
from dnnprof.ingest import kineto
seen = {}
def loaded():
    return sorted(m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in WATCH))
real = kineto._read_profile
def read(*a, **k):
    seen.setdefault("at_read", loaded())
    return real(*a, **k)
kineto._read_profile = read
from dnnprof.cli.main import main
rc = main(sys.argv[1:])
seen["at_end"] = loaded()
seen["rc"] = rc
print(json.dumps(seen))
"""


def _python(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout


def test_importing_the_cli_loads_no_heavy_library() -> None:
    code = f"import sys, dnnprof.cli.main; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    assert _python(code).strip() == "[]"


def test_analyze_of_a_small_trace_reads_before_importing_the_analysis(tmp_path: Path) -> None:
    watch = ("numpy", "pandas", "pyarrow", "duckdb", "torch", "dnnprof.analysis", "dnnprof.render", "rich")
    code = f"WATCH = {watch!r}\n" + _PROBE
    out = json.loads(_python(code, "analyze", str(DATA / "cpu_mlp_train" / "trace.json.gz"),
                             "--json", str(tmp_path / "s.json"), "-q"))
    assert out["rc"] == 0
    early = [m for m in out["at_read"] if m.startswith(("dnnprof.analysis", "dnnprof.render", "rich"))]
    assert [m for m in early if m not in ("dnnprof.render", "dnnprof.render.safe_text")] == []  # error messages
    for lib in ("pandas", "pyarrow", "duckdb", "torch"):
        assert lib not in out["at_end"], lib
    assert "dnnprof.analysis.summary" in out["at_end"]  # the probe saw the whole command run
