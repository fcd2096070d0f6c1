"""``dnnprof run -- torchrun …``: the launcher stands aside and one worker (rank 0, or ``DNNPROF_PROFILE_RANK``) is
profiled; the other ranks run as they would without dnnprof."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dnnprof.collect.bootstrap import process_role

SCRIPT = Path(__file__).parent / "data" / "scripts" / "train_ddp.py"


@pytest.mark.parametrize(("env", "argv", "main", "role"), [
    ({}, ["/venv/bin/torchrun", "--nproc-per-node", "2", "t.py"], "", "launcher"),
    ({}, ["-m"], "torch.distributed.run", "launcher"),
    ({}, ["/site/torch/distributed/launch.py", "t.py"], "", "launcher"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, ["t.py"], "", "other_rank"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, ["t.py"], "", "profiled"),
    ({"RANK": "1", "DNNPROF_PROFILE_RANK": "1"}, ["t.py"], "", "profiled"),
    ({}, ["train.py"], "", "profiled"),
    ({}, ["run.py"], "", "profiled"),  # a user's own run.py is no launcher
])
def test_process_roles(env: dict, argv: list[str], main: str, role: str) -> None:
    assert process_role(env, argv, main) == role


@pytest.mark.parametrize("rank", ["0", "1"])
def test_torchrun_profiles_one_worker(tmp_path: Path, rank: str) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DNNPROF_PROFILE_RANK": rank}
    proc = subprocess.run([sys.executable, "-m", "dnnprof", "run", "--warmup-steps", "3", "--steps", "5", "--out",
                           str(tmp_path / "run"), "--", *torchrun, str(SCRIPT)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 of 2 done" in proc.stdout and "rank 1 of 2 done" in proc.stdout  # both ranks ran to the end
    assert f"profiled rank {rank} of 2" in proc.stderr
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["complete"] and meta["environment"]["distributed"]["rank"] == rank
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["throughput"]["steps"] == 5
