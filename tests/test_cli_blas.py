"""The read-only commands load numpy with one BLAS thread and leave the environment as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_CODE = ("import os; from dnnprof.cli.blas import load_numpy_with_one_blas_thread as load; load(); import numpy; "
         "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))")


def _run(**extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(PYTHONPATH=str(ROOT / "src"), **extra)
    return subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, env=env, check=True,
                          timeout=120).stdout.split()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_one_thread_and_the_variable_put_back() -> None:
    assert _run() == ["1", "None"]  # no BLAS thread beside the main one; a child started later inherits nothing


def test_a_value_the_user_set_is_kept() -> None:
    assert _run(OPENBLAS_NUM_THREADS="2")[1] == "2"
