"""The two bootstraps (``dnnprof run``'s and ``dnnprof sweep``'s) on one PYTHONPATH, as in a sweep's profile trials:
each runs once, and the environment's own sitecustomize still runs after them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dnnprof.runs.session import BOOT_DIR as RUN_BOOT
from dnnprof.runs.sweep.backend import BOOT_DIR as SWEEP_BOOT


def test_both_bootstraps_chain_to_the_environment_sitecustomize(tmp_path: Path) -> None:
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys\nprint('environment sitecustomize ran', file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DNNPROF_")}
    env["PYTHONPATH"] = os.pathsep.join([str(RUN_BOOT), str(SWEEP_BOOT), str(own)])
    proc = subprocess.run([sys.executable, "-c", "print('script ran')"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == "script ran"
    assert "Error in sitecustomize" not in proc.stderr and "RecursionError" not in proc.stderr
    assert proc.stderr.count("environment sitecustomize ran") == 1
