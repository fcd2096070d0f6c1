"""``dnnprof run`` of a multi-process job: every rank (or ``--ranks``) profiled into ``rank<N>/`` of one run
directory, the ranks merged onto one clock, ``analyze RUN --rank N``; gloo on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnprof.cli.main import main
from dnnprof.collect.bootstrap import parse_ranks, process_role, rank_dir
from dnnprof.runs.session import launch_command, rank_env

SCRIPT = Path(__file__).parent / "data" / "scripts" / "train_ddp_straggler.py"


@pytest.mark.parametrize(("env", "role"), [
    ({"RANK": "1", "DNNPROF_RANKS": "all"}, "profiled"),
    ({"RANK": "3", "DNNPROF_RANKS": "0,3"}, "profiled"),
    ({"RANK": "2", "DNNPROF_RANKS": "0,3"}, "other_rank"),
    ({"RANK": "1", "DNNPROF_RANKS": "all", "DNNPROF_PROFILE_RANK": "0"}, "other_rank"),  # the old variable wins
    ({"DNNPROF_RANKS": "0"}, "profiled"),  # one process: no RANK
])
def test_roles_under_ranks(env: dict, role: str) -> None:
    assert process_role(env, ["t.py"], "") == role


def test_rank_dirs_and_rank_env(tmp_path: Path) -> None:
    assert rank_dir(tmp_path, {"RANK": "2", "DNNPROF_RANKS": "all"}) == tmp_path / "rank2"
    assert rank_dir(tmp_path, {"RANK": "2", "DNNPROF_PROFILE_RANK": "2"}) == tmp_path  # as before: flat
    assert rank_dir(tmp_path, {}) == tmp_path
    assert rank_env({}, None)["DNNPROF_RANKS"] == "all"
    assert "DNNPROF_RANKS" not in rank_env({"DNNPROF_PROFILE_RANK": "1"}, None)
    env = rank_env({"DNNPROF_PROFILE_RANK": "1"}, "0,1")
    assert env["DNNPROF_RANKS"] == "0,1" and "DNNPROF_PROFILE_RANK" not in env


@pytest.mark.parametrize("spec", ["", "x", "0,-1", "1;2"])
def test_bad_ranks_are_one_line(spec: str) -> None:
    with pytest.raises(ValueError, match="--ranks"):
        parse_ranks(spec)
    assert main(["run", "--ranks", spec, "--", sys.executable, "-c", "pass"]) == 2


def test_nproc_command() -> None:
    assert launch_command(["python3", "t.py", "--lr", "1"], 4) == [
        "python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "t.py", "--lr", "1"]
    with pytest.raises(ValueError, match="Python command"):
        launch_command(["torchrun", "t.py"], 2)
    with pytest.raises(ValueError, match="at least 1"):
        launch_command(["python", "t.py"], 0)


def dnnprof_run(out: Path, *args: str, script_args: tuple[str, ...] = (), nproc: int = 2,
                launcher: str = "nproc") -> subprocess.CompletedProcess[str]:
    if launcher == "nproc":
        command = ["--nproc", str(nproc), "--", sys.executable, str(SCRIPT), *script_args]
    else:
        command = ["--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                   str(nproc), str(SCRIPT), *script_args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("DNNPROF_PROFILE_RANK", None)
    proc = subprocess.run([sys.executable, "-m", "dnnprof", "run", "--warmup-steps", "3", "--steps", "8", "--out",
                           str(out), *args, *command], cwd=out.parent, capture_output=True, text=True, timeout=300,
                          env=env, check=False)
    assert proc.returncode == 0, _why(proc.stderr)
    return proc


def _why(stderr: str) -> str:
    """What a failed launch said: the lines that name a cause wherever they are (torchrun's summary of a failed
    child fills the end of stderr), then the end."""
    causes = [ln for ln in stderr.splitlines()
              if any(w in ln for w in ("terminate", "what()", "Error", "error", "dnnprof:", "Abort", "abort"))]
    return "\n".join(causes[-40:]) + "\n--- end of stderr ---\n" + stderr[-1500:]


def test_torchrun_profiles_the_ranks_asked_for(tmp_path: Path) -> None:
    proc = dnnprof_run(tmp_path / "run", "--ranks", "1", launcher="torchrun")
    assert "rank 0 of 2 done" in proc.stdout and "rank 1 of 2 done" in proc.stdout
    run = tmp_path / "run"
    assert (run / "rank1" / "collector.json").is_file() and not (run / "rank0").exists()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["complete"] and meta["profiled_ranks"] == [1] and meta["summary_rank"] == 1
    assert not list(run.glob("*/owner.pid"))  # live markers removed
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rank"] == 1 and summary["throughput"]["steps"] == 8
