"""Lazy imports of optional packages with one clear message when one is missing or broken."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from dnnprof.workloads.errors import MissingDependency
from dnnprof.workloads.registry import DISTRIBUTIONS, INSTALL_HINT


def require(module: str, *, purpose: str) -> ModuleType:
    """Import ``module`` or raise ``MissingDependency`` saying what needs it and how to install it.

    A package that is installed but fails to import (a torchvision built for another torch, say)
    gets a message quoting the import error, since reinstalling the extra will not fix it.
    """
    try:
        return importlib.import_module(module)
    except (ImportError, RuntimeError, OSError) as exc:
        top = module.split(".")[0]
        dist = DISTRIBUTIONS.get(top, top)
        if importlib.util.find_spec(top) is None:
            message = (
                f"{purpose} needs the optional package '{dist}', which is not installed; run: {INSTALL_HINT}"
            )
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = (
                f"{purpose} needs '{dist}', which is installed but fails to import "
                f"({type(exc).__name__}: {first}); install a '{dist}' build that matches the installed torch"
            )
        raise MissingDependency(dist, message) from exc
