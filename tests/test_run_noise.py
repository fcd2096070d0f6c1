"""What `dnnprof run` adds to the user's terminal and leaves in the run folder: no profiler chatter of its own
making, the script's own output untouched, no markers of a live run in a finished one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).parent / "data" / "scripts" / "train_plain.py"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("noise")
    wrapper = tmp / "loud.py"
    wrapper.write_text("import runpy, sys\nprint('USDT: my own line', file=sys.stderr)\n"
                       f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    r = subprocess.run([sys.executable, "-m", "dnnprof", "run", "--full", "--out", str(tmp / "run"), "--", sys.executable,
                        str(wrapper)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return tmp / "run", r.stderr


def test_kineto_s_profiler_start_stop_lines_do_not_reach_the_terminal(ran: tuple[Path, str]) -> None:
    _, err = ran
    assert "profiler_start" not in err and "profiler_stop" not in err
    assert "USDT: my own line" in err.splitlines()  # the script's own stderr is passed through as it is


def test_the_cpu_allocator_warning_does_not_reach_the_terminal(ran: tuple[Path, str]) -> None:
    """c10 warns once when a CPU block allocated before a memory-recording window is freed in it (the full window
    of `--full` does: the script's tensors of the step before)."""
    run, err = ran
    assert any(w["kind"] == "full" for w in json.loads((run / "collector.json").read_text())["windows"])
    assert "Memory block of unknown size" not in err


def test_a_finished_run_folder_keeps_no_live_run_markers(ran: tuple[Path, str]) -> None:
    run, _ = ran
    assert (run / "meta.json").is_file()
    left = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.name in ("owner.pid", "finalizing"))
    assert left == []
