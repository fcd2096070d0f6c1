"""Layer attribution ranges: one profiler range around every ``nn.Module`` forward.

The range name is the contract with the analysis: ``dnnprof.module:<fqn>|<ClassName>``, where ``fqn`` is the
module's name relative to its root module (the root itself is named by its class), e.g.
``dnnprof.module:transformer.h.0.attn|GPT2Attention``.

Global forward pre/post hooks see every module without touching the user's model. Roots are found as the
modules called while no other module forward is open; a root's ``named_modules()`` gives every fqn once.
Ranges use ``torch._C._profiler._RecordFunctionFast`` (≈1 µs under the profiler, against ≈10 µs for
``record_function``); Kineto files those as ``cpu_op`` and the collector relabels them ``user_annotation``.
Hooks are installed only for the attribution/full window and never while ``torch.compile`` code is in use
(Dynamo guards on global hooks: adding or removing them would force recompilation).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from dnnprof.model.run_format import MODULE_RANGE_PREFIX

PREFIX = MODULE_RANGE_PREFIX


def range_name(fqn: str, cls: str) -> str:
    """The range name for module ``fqn`` of class ``cls``."""
    return f"{PREFIX}{fqn}|{cls}"


def compiled_code_in_use(torch: Any) -> bool:
    """True when torch.compile has produced at least one graph in this process."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return False
    try:
        counters = torch._dynamo.utils.counters
    except AttributeError:
        return False
    return bool(counters["stats"].get("unique_graphs", 0))


class ModuleRanges:
    """Installs and removes the global module hooks that open and close the ranges."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
        self._rf = fast if fast is not None else torch.autograd.profiler.record_function
        self.fast = fast is not None
        self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
        self._labels: dict[int, tuple[str, str]] = {}  # id(module) -> (range name, fqn)
        self._local = threading.local()
        self._handles: list[Any] = []
        self.roots: list[weakref.ref[Any]] = []
        self.calls = 0

    def _stack(self) -> list[tuple[int, Any, str]]:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def map_root(self, module: Any) -> None:
        """Name ``module``'s tree with it as the root. Done on the root's first call, or at install time for the
        module whose forward is already running (its pre-hook has passed, so its children would otherwise each
        be taken for a root of its own, and their fully qualified names lost for the rest of the run)."""
        root_cls = type(module).__name__
        self.roots.append(weakref.ref(module))
        for fqn, m in module.named_modules():
            if id(m) not in self._labels:
                name = fqn or root_cls
                self._labels[id(m)] = (range_name(name, type(m).__name__), name)

    def _label(self, module: Any, stack: list[tuple[int, Any, str]]) -> tuple[str, str]:
        if not stack:
            self.map_root(module)
            return self._labels[id(module)]
        # A module created or attached after its root was mapped: name it under its caller.
        parent = stack[-1][2]
        fqn = f"{parent}.{type(module).__name__}"
        label = (range_name(fqn, type(module).__name__), fqn)
        self._labels[id(module)] = label
        return label

    def _pre(self, module: Any, args: Any) -> None:
        if self._is_compiling():  # traced by Dynamo: a range would be a graph break; the compiled code has none
            return
        stack = self._stack()
        label = self._labels.get(id(module))
        if label is None:
            label = self._label(module, stack)
        rf = self._rf(label[0])
        rf.__enter__()
        stack.append((id(module), rf, label[1]))
        self.calls += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return
        stack = self._stack()
        key = id(module)
        # Pop through ranges left open by a forward that raised before its own post-hook could run.
        while stack:
            mid, rf, _ = stack.pop()
            rf.__exit__(None, None, None)
            if mid == key:
                break

    def install(self) -> None:
        if self._handles:
            return
        mod = self.torch.nn.modules.module
        self._handles.append(mod.register_module_forward_pre_hook(self._pre))
        try:
            self._handles.append(mod.register_module_forward_hook(self._post, always_call=True))
        except TypeError:  # torch < 2.1: no always_call; a raising forward leaves its range to the next pop
            self._handles.append(mod.register_module_forward_hook(self._post))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        stack = self._stack()
        while stack:
            stack.pop()[1].__exit__(None, None, None)
        self._labels.clear()

    def live_roots(self) -> list[Any]:
        out = []
        for r in self.roots:
            m = r()
            if m is not None and all(m is not x for x in out):
                out.append(m)
        return out
