"""docs/api.md's examples run as written: every ```python block, in order, in one namespace, in a fresh folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_every_python_block_of_api_md_runs(tmp_path: Path) -> None:
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 4
    script = tmp_path / "api_examples.py"
    script.write_text("\n".join(blocks))
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    needs = ("lightning", "transformers", "accelerate")
    if any(__import__("importlib").util.find_spec(m) is None for m in needs):
        pytest.skip(f"the integration example imports {', '.join(needs)}")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=env, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "run directory (complete):" in r.stderr
    assert (tmp_path / "runs" / "mlp" / "summary.json").is_file()
    assert (tmp_path / "mlp.html").read_text().startswith("<!DOCTYPE html>") or (tmp_path / "mlp.html").stat().st_size
    assert (tmp_path / "mlp.perfetto.json.gz").stat().st_size > 0
