"""Load numpy with one BLAS thread in the commands that only read and analyse.

numpy's wheels bundle OpenBLAS, which starts one thread per core when it loads, and each spins for a while: 2.3 s
of CPU on 16 cores, against 0.3 s with one thread (measured, benchmarks/RESULTS.md). dnnprof does no linear
algebra, and a big trace is read by several processes that need those cores. OpenBLAS reads its variable once, at
load; it is put back at once, so processes started later (a user's script) get the environment as it was.
"""

from __future__ import annotations

import os
import sys

_VARIABLE = "OPENBLAS_NUM_THREADS"


def load_numpy_with_one_blas_thread() -> None:
    """Import numpy with one OpenBLAS thread, unless it is imported already or the user set the variable."""
    if "numpy" in sys.modules or _VARIABLE in os.environ:
        return
    os.environ[_VARIABLE] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[_VARIABLE]
