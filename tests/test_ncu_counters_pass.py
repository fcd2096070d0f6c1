"""The ``--counters`` pass around ncu: how the profiled process gets the collector, stale files, diagnostics."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from dnnprof.collect.config import CollectorConfig
from dnnprof.model.profile import Profile
from dnnprof.model.schema import empty_table
from dnnprof.runs.counters_pass import (
    STALE_FILES,
    _why_nothing,
    counters_pass,
    ncu_environment,
    target_command,
)

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h200"


def test_target_command_carries_the_collector_variables() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/site", "DNNPROF_OWNER_PID": "7"}
    child = {"PATH": "/bin", "PYTHONPATH": "/boot:/site", "DNNPROF_RUN_DIR": "/r/counters", "TEARDOWN_CUPTI": "1"}
    cmd = target_command(["python", "train.py", "--lr", "1"], child, base)
    assert Path(cmd[0]).name == "env" and cmd[1:3] == ["-u", "DNNPROF_OWNER_PID"]
    assert cmd[3:6] == ["DNNPROF_RUN_DIR=/r/counters", "PYTHONPATH=/boot:/site", "TEARDOWN_CUPTI=1"]
    assert cmd[6:] == ["python", "train.py", "--lr", "1"]
    env = ncu_environment({**base, "DNNPROF_RUN_DIR": "/x", "DNNPROF_NCU": "/opt/ncu"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/site", "DNNPROF_NCU": "/opt/ncu"}


def test_why_nothing_was_profiled(tmp_path: Path) -> None:
    assert "collector did not start" in _why_nothing(tmp_path, 5)
    (tmp_path / "owner.pid").write_text("1")
    assert _why_nothing(tmp_path, 5) == ""
    (tmp_path / "collector.json").write_text(json.dumps({"steps_completed": 3}))
    assert "ended after 3 steps, before step 5" in _why_nothing(tmp_path, 5)
    (tmp_path / "collector.json").write_text(json.dumps({"steps_completed": 9}))
    assert _why_nothing(tmp_path, 5) == ""


FAKE_NCU = r"""#!/bin/bash
if [ "$1" = "--help" ]; then echo "  --nvtx-push-pop-scope arg (=thread)"; exit 0; fi
log=""; prev=""; target=0; args=()
for a in "$@"; do
  if [ "$target" = 1 ]; then args+=("$a"); fi
  if [ "$prev" = "--log-file" ]; then log="$a"; target=1; fi
  prev="$a"
done
env > "$FAKE_NCU_ENV"
"${args[@]}"
cp "$FAKE_NCU_CSV" "$log"
"""


def _profile() -> Profile:
    """Two launches of one kernel in step 4, on an sm_90 device."""
    p = Profile()
    t = empty_table("kernels", 2)
    t["name_id"][:] = p.intern("void k<Alpha>(int)")
    t["grid_x"][:], t["block_x"][:], t["dur_ns"][:] = 4, 128, 1000
    t["step"][:] = 4
    t["rank"][:] = 0
    t["correlation"][:] = [1, 2]
    t["start_ns"][:] = [0, 2000]
    p.tables["kernels"] = t
    return p


def test_counters_pass_runs_the_command_through_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("DNNPROF_NCU", str(exe))
    monkeypatch.setenv("FAKE_NCU_CSV", str(DATA / "ncu_raw.csv"))
    monkeypatch.setenv("FAKE_NCU_ENV", str(tmp_path / "ncu_env.txt"))
    monkeypatch.setenv("DNNPROF_OWNER_PID", "1")  # as if this process were itself profiled
    run = tmp_path / "run"
    (run / "counters").mkdir(parents=True)
    for name in STALE_FILES:  # a previous pass
        (run / "counters" / name).write_text("old")
    seen = tmp_path / "seen.txt"
    script = f"import os; open({str(seen)!r}, 'w').write(os.environ.get('DNNPROF_RUN_DIR', '') + '|' + " \
             "os.environ.get('DNNPROF_OWNER_PID', 'unset'))"

    def env_for(sub: Path) -> dict[str, str]:
        return {**os.environ, "DNNPROF_RUN_DIR": str(sub)}

    said: list[str] = []
    out = counters_pass(run, ["python3", "-c", script], CollectorConfig(), _profile(), [3, 4, 5], env_for,
                        lambda p, t: type("J", (), {"covered_ns": 1, "total_ns": 2, "matched_kernels": 2})(),
                        say=said.append)
    assert out["status"] == "ok", out
    # before ncu starts, the user hears what it will profile and roughly how long the replays take
    assert said == ["step 4: ncu will profile about 1 kernel launch (1 kernel name, 100.0% of the step's GPU "
                    "time): roughly 0.3 s of replay once the program reaches that step"]
    assert out["step"] == 4 and out["covered_gpu_time_pct"] == 50.0 and out["profiled_launches"] == 41
    assert out["plan"]["strategy"] == "first-per-config" and out["plan"]["predicted_launches"] == 1
    assert seen.read_text() == f"{run / 'counters'}|unset"  # the process sees its run directory, no owner
    ncu_env = (tmp_path / "ncu_env.txt").read_text()
    assert "DNNPROF_RUN_DIR=" not in ncu_env and "DNNPROF_OWNER_PID=" not in ncu_env
    left = {p.name for p in (run / "counters").iterdir()}
    assert not {"owner.pid", "collector.json", "finalizing"} & left
    cmd = json.loads((run / "counters" / "ncu_command.json").read_text())
    assert cmd[0] == str(exe) and "--nvtx-include" in cmd and "dnnprof.counters/" in cmd
    assert np.asarray(cmd)[[i + 1 for i, a in enumerate(cmd) if a == "-u"]].tolist() == ["DNNPROF_OWNER_PID"]
