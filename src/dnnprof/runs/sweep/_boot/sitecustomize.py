"""``dnnprof sweep`` bootstrap for trial processes: memory limit and measurements, then any other sitecustomize.

The sweep puts this directory on ``PYTHONPATH`` of script trials and profile trials only. It holds nothing but this
file, so it shadows no package; the ``sitecustomize`` it shadows (the environment's own, or the next bootstrap on
the path) is executed right after.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _dnnprof_sweep_boot() -> None:
    if not os.environ.get("DNNPROF_SWEEP_TRIAL"):
        return
    try:
        try:
            import dnnprof.runs.sweep.hooks as hooks
        except ImportError:
            root = os.environ.get("DNNPROF_SWEEP_PKG_ROOT")
            if not root:
                raise
            sys.path.append(root)  # last: the trial environment's own packages win
            import dnnprof.runs.sweep.hooks as hooks
        hooks.install()
    except Exception as e:  # noqa: BLE001 - never break the trial; say why the limit/measurements are off
        print(f"dnnprof sweep: trial hooks could not start ({type(e).__name__}: {e})", file=sys.stderr)


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


_dnnprof_sweep_boot()
_chain()
