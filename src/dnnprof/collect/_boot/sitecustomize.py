"""dnnprof's bootstrap in a child Python process: start what the parent asked for, then run any other sitecustomize.

``dnnprof run`` (and ``dnnprof sweep`` for its script and profile trials) put this directory first on the child's
``PYTHONPATH``. It holds nothing but this file, so it shadows no package; the ``sitecustomize`` it shadows (if the
environment has one) is executed right after. Each installer of ``INSTALLERS`` runs when its variable is set, in
that order (a sweep's profile trial sets both); one that fails is reported and the others still run.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

#: ``(variable, "module:function", owner variable, what is said when it cannot start, error file)``, in order.
#: With an owner variable, only the first process that sees it unset runs the installer (and sets it to its pid):
#: children of the profiled process (DataLoader workers, helper subprocesses) inherit it and stay out. The error
#: file, when given, is written into the directory the variable names.
INSTALLERS = (
    ("DNNPROF_RUN_DIR", "dnnprof.collect.bootstrap:install", "DNNPROF_OWNER_PID",
     "dnnprof: collector could not start ({error}); the script runs unprofiled", "boot_error.txt"),
    ("DNNPROF_SWEEP_TRIAL", "dnnprof.collect.trial_hooks:install", None,
     "dnnprof sweep: trial hooks could not start ({error})", None),
)
#: Where the dnnprof package lives, for a child whose environment does not have it installed.
ENV_PKG_ROOT = "DNNPROF_PKG_ROOT"


def _import(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ImportError:
        root = os.environ.get(ENV_PKG_ROOT)
        if not root or root in sys.path:
            raise
        sys.path.append(root)  # last: the child environment's own packages win
        return importlib.import_module(name)


def _dnnprof_boot() -> None:
    for variable, target, owner, message, error_file in INSTALLERS:
        value = os.environ.get(variable)
        if not value or (owner and os.environ.get(owner)):
            continue
        if owner:
            os.environ[owner] = str(os.getpid())
        module, _, function = target.partition(":")
        try:
            getattr(_import(module), function)()
        except Exception as e:  # noqa: BLE001 - never break the user's script; say why dnnprof is off
            error = f"{type(e).__name__}: {e}"
            print(message.format(error=error), file=sys.stderr)
            if error_file:
                try:
                    with open(os.path.join(value, error_file), "w") as f:
                        f.write(error + "\n")
                except OSError:
                    pass  # the run directory is gone: the parent reports the missing results anyway


def _chain() -> None:
    # The sitecustomize this one shadows: the next one on the path after this directory (listed twice in a sweep's
    # profile trial, which runs `dnnprof run`, which puts it first again). Only entries after it are searched, so
    # a chain of bootstraps (another dnnprof installation's, say) always moves on and never comes back here.
    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(p or os.curdir) for p in sys.path]
    start = entries.index(here) + 1 if here in entries else 0
    path = [p for p, e in zip(sys.path[start:], entries[start:], strict=True) if e != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_dnnprof_boot()
_chain()
