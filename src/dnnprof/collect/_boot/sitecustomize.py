"""``dnnprof run`` bootstrap: start the collector in the profiled Python process, then run any other sitecustomize.

This directory is put first on ``PYTHONPATH`` of the profiled command only. It holds nothing but this file, so it
shadows no package; the ``sitecustomize`` it shadows (if the environment has one) is executed right after.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _dnnprof_boot() -> None:
    run_dir = os.environ.get("DNNPROF_RUN_DIR")
    if not run_dir or os.environ.get("DNNPROF_OWNER_PID"):
        return
    # Children (DataLoader workers, helper subprocesses) inherit this and stay unprofiled.
    os.environ["DNNPROF_OWNER_PID"] = str(os.getpid())
    try:
        try:
            import dnnprof.collect.bootstrap as boot
        except ImportError:
            root = os.environ.get("DNNPROF_PKG_ROOT")
            if not root:
                raise
            sys.path.append(root)  # last: the profiled environment's own packages win
            import dnnprof.collect.bootstrap as boot
        boot.install()
    except Exception as e:  # noqa: BLE001 - never break the user's script; say why profiling is off
        print(f"dnnprof: collector could not start ({type(e).__name__}: {e}); the script runs unprofiled",
              file=sys.stderr)
        try:
            with open(os.path.join(run_dir, "boot_error.txt"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
        except OSError:
            pass  # the run directory is gone: the parent reports the missing results anyway


def _chain() -> None:
    # Both dnnprof bootstraps (``dnnprof run``'s and ``dnnprof sweep``'s) can be on the path at once (a sweep's
    # profile trials): each one that ran is skipped, or they would execute each other forever.
    seen = sys.__dict__.setdefault("_dnnprof_boot_dirs", set())
    seen.add(os.path.dirname(os.path.abspath(__file__)))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) not in seen]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_dnnprof_boot()
_chain()
