"""Compile-time records of ``torch.compile`` code: for each kernel Inductor generates, the ``nn.Module`` path(s),
source lines and graph (forward or backward) of the FX nodes it was made from.

Compiled graphs run no module forward hooks, so the module ranges of ``modranges`` never open inside them. What
Inductor knows at code generation is written down instead: every kernel it emits (``triton_*``, ``cpp_fused_*``
and the ``extern_kernels.*`` calls to aten) passes through ``torch._inductor.debug.
set_kernel_post_grad_provenance_tracing(node_schedule, kernel_name, is_extern)`` (PyTorch >= 2.8; the codegen
modules import it by name, so each module's binding is wrapped). The wrapper reads the origins' FX meta
(``nn_module_stack``, in backward graphs ``fwd_nn_module_stack``; ``stack_trace``) and calls the original, which
does nothing unless Inductor's own provenance tracking is on.

The hook only sees graphs that are generated in this process, so while it is installed Inductor's FX graph cache
and AOTAutograd's cache are turned off (compiling takes as long as a cold start) and CPU kernels get profiler
ranges (``cpp.enable_kernel_profile``). Dynamo's counters (graph breaks, graphs, recompilations) are read at the
end. Without the hook the records say why and attribution stays at op level.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

FORMAT = "dnnprof.compiled-kernels/1"
_HOOK = "set_kernel_post_grad_provenance_tracing"
#: Modules that bind the provenance function by name (``from ..debug import …``), beside ``debug`` itself.
_HOOK_MODULES = ("torch._inductor.debug", "torch._inductor.codegen.cpp", "torch._inductor.codegen.triton",
                 "torch._inductor.codegen.simd", "torch._inductor.codegen.cuda_combined_scheduling")
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_LIBRARY = ("site-packages/", "dist-packages/", "/torch/", "/lib/python", "<frozen", "/dnnprof/")


def module_path(key: str) -> str:
    """Dynamo's module path (``L['self'].encoder.layers[0]._modules['linear1']``) as an fqn relative to the
    compiled root (``encoder.layers.0.linear1``); ``""`` for the root itself."""
    s = key.strip()
    s = re.sub(r"^L\[['\"][^'\"]+['\"]\]", "", s)  # L['self'] / L['mod']
    s = re.sub(r"^(L__self__|self)(?=[._]|$)", "", s)
    s = re.sub(r"\._modules\[['\"]([^'\"]+)['\"]\]", r".\1", s)
    s = re.sub(r"\[['\"]([^'\"]+)['\"]\]", r".\1", s)
    s = re.sub(r"\[(\d+)\]", r".\1", s)
    return s.strip("._")


def _class_name(t: Any) -> str:
    if isinstance(t, str):
        return t.rsplit(".", 1)[-1].strip("'>")
    return getattr(t, "__name__", str(t))


def node_modules(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The module stack (outermost first) of one FX node as ``[(fqn, Class)]``."""
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack") or {}
    out = []
    for v in stack.values():
        if isinstance(v, (tuple, list)) and len(v) >= 2:
            out.append((module_path(str(v[0])), _class_name(v[1])))
    return [m for m in out if m[0]]


def node_source(meta: dict[str, Any]) -> str:
    """The innermost user-code frame of a node's ``stack_trace`` as ``file.py:line (func)``."""
    frames = list(_FRAME.finditer(str(meta.get("stack_trace") or "")))
    for m in reversed(frames):
        if not any(x in m.group("path") for x in _LIBRARY):
            return f"{m.group('path')}:{m.group('line')} ({m.group('func')})"
    return ""


def _origins(node_schedule: Any, is_extern: bool, op: str = "") -> list[Any]:
    if is_extern:
        origin = getattr(node_schedule, "origin_node", None)
        if origin is not None:
            return [origin]
        origins = list(getattr(node_schedule, "origins", ()) or ())
        # An extern call's origins can hold the nodes whose results it consumes (a convolution_backward fallback
        # lists the batch-norm and ReLU backward nodes and the pooling backward before it): the call is the node of
        # its own op, when one is there.
        own = [o for o in origins if op and _op_name(getattr(o, "target", None)) == op]
        return own or origins
    out = []
    for snode in node_schedule or ():
        node = getattr(snode, "node", None)
        if node is not None:
            out.extend(getattr(node, "origins", ()) or ())
    return out


def _op_name(target: Any) -> str:
    """``aten.convolution_backward.default`` (an OpOverload) → ``convolution_backward``; "" for anything else."""
    parts = str(target or "").split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else ""


class CompiledKernels:
    """Records Inductor's kernels while they are generated; ``results()`` is what ``compiled_kernels.json`` holds."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.kernels: list[dict[str, Any]] = []
        self.graphs: dict[int, dict[str, Any]] = {}
        self.roots: list[str] = []
        self.status = "not_compiled"  # → "recording" / "unavailable"
        self.note = ""
        self.errors = 0
        self._lock = threading.Lock()
        self._patched: list[tuple[Any, Any]] = []

    # --- installation --------------------------------------------------------------------------------------
    def install(self) -> None:
        """Wrap ``torch.compile`` so that the first call installs the code-generation hook."""
        compile_fn = getattr(self.torch, "compile", None)
        if compile_fn is None:
            return
        rec = self

        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
            rec.on_compile(model)
            return compile_fn(model, *args, **kwargs) if model is not None else compile_fn(*args, **kwargs)

        compile.__wrapped__ = compile_fn  # type: ignore[attr-defined]
        compile.__doc__ = compile_fn.__doc__
        self.torch.compile = compile
        self._patched.append((self.torch, ("compile", compile_fn)))

    def on_compile(self, model: Any) -> None:
        if model is not None and isinstance(model, self.torch.nn.Module):
            self.roots.append(type(model).__name__)
        if self.status != "not_compiled":
            return
        try:
            import importlib

            debug = importlib.import_module("torch._inductor.debug")
        except ImportError as e:
            self.status, self.note = "unavailable", f"torch._inductor not importable ({e})"
            return
        original = getattr(debug, _HOOK, None)
        if original is None:
            self.status = "unavailable"
            self.note = (f"this PyTorch ({self.torch.__version__}) has no torch._inductor.debug.{_HOOK} "
                         "(PyTorch >= 2.8): compiled kernels stay at op level")
            return
        self._configure()
        hook = self._hook(original)
        for name in _HOOK_MODULES:
            mod = sys.modules.get(name)
            if mod is None:
                try:
                    mod = importlib.import_module(name)
                except Exception:  # noqa: BLE001 - a backend module that does not import here (no triton)
                    continue
            if getattr(mod, _HOOK, None) is original:
                setattr(mod, _HOOK, hook)
                self._patched.append((mod, (_HOOK, original)))
        self.status = "recording"

    def _configure(self) -> None:
        """Generate every graph in this process (no cache hits) and give CPU kernels profiler ranges."""
        import importlib

        ic = importlib.import_module("torch._inductor.config")
        for obj, name, value in ((ic, "fx_graph_cache", False), (getattr(ic, "cpp", None), "enable_kernel_profile", True)):
            if obj is not None and hasattr(obj, name):
                setattr(obj, name, value)
        try:
            fc = importlib.import_module("torch._functorch.config")
            if hasattr(fc, "enable_autograd_cache"):
                fc.enable_autograd_cache = False
        except ImportError:
            pass

    def _hook(self, original: Any) -> Any:
        rec = self

        def set_kernel_post_grad_provenance_tracing(node_schedule: Any, kernel_name: Any, *args: Any,
                                                     **kwargs: Any) -> Any:
            is_extern = bool(kwargs.get("is_extern", args[0] if args else False))
            try:
                rec.record(node_schedule, str(kernel_name), is_extern)
            except Exception:  # noqa: BLE001 - never break compilation; counted in the results
                rec.errors += 1
            return original(node_schedule, kernel_name, *args, **kwargs)

        return set_kernel_post_grad_provenance_tracing

    def remove(self) -> None:
        for obj, (name, value) in reversed(self._patched):
            setattr(obj, name, value)
        self._patched.clear()

    # --- recording -----------------------------------------------------------------------------------------
    def _graph(self) -> dict[str, Any]:
        from torch._inductor.virtualized import V

        g = V.graph
        key = id(g)
        info = self.graphs.get(key)
        if info is None:
            compile_id = ""
            try:
                from torch._guards import CompileContext

                cid = CompileContext.current_compile_id()
                compile_id = str(cid) if cid is not None else ""
            except (ImportError, AttributeError):
                pass
            info = {"index": len(self.graphs), "graph_id": getattr(g, "graph_id", None),
                    "backward": bool(getattr(g, "is_backward", False)),
                    "inference": bool(getattr(g, "is_inference", False)), "compile_id": compile_id,
                    "cpp_kernel_profile": self._cpp_profile()}
            self.graphs[key] = info
        return info

    def _cpp_profile(self) -> bool:
        cpp = getattr(sys.modules.get("torch._inductor.config"), "cpp", None)
        return bool(getattr(cpp, "enable_kernel_profile", False))

    def record(self, node_schedule: Any, kernel_name: str, is_extern: bool) -> None:
        g = self._graph()
        stacks, sources = [], []
        op = kernel_name.split(".")[-2] if kernel_name.startswith("torch.ops.") else kernel_name.split(".")[-1]
        origins = _origins(node_schedule, is_extern, op if is_extern else "")
        # A node computed from no other node (a ``full``/``scalar_tensor`` constant) is made once and shared by every
        # kernel that inlines it, with the module of wherever it was first made: it says nothing of the kernel's.
        computed = [o for o in origins if getattr(o, "all_input_nodes", None)]
        for o in computed or origins:
            meta = getattr(o, "meta", None) or {}
            stacks.append(node_modules(meta))
            src = node_source(meta)
            if src and src not in sources:
                sources.append(src)
        runtime = kernel_name
        if is_extern:
            parts = kernel_name.split(".")
            # extern_kernels.mm runs as aten::mm; torch.ops.aten.<op>.<overload> as aten::<op>
            runtime = f"{parts[2]}::{parts[3]}" if parts[0] == "torch" and len(parts) >= 4 else "aten::" + parts[-1]
        elif kernel_name.startswith("cpp_") and g["cpp_kernel_profile"] and g["graph_id"] is not None:
            runtime = f"graph_{g['graph_id']}_{kernel_name}"  # the name cpp.enable_kernel_profile gives its range
        entry = {"graph": g["index"], "name": kernel_name, "runtime_name": runtime, "extern": is_extern,
                 "module_stacks": _distinct(stacks), "sources": sources[:8]}
        with self._lock:
            self.kernels.append(entry)

    # --- results -------------------------------------------------------------------------------------------
    def dynamo_counters(self) -> dict[str, Any]:
        dyn = sys.modules.get("torch._dynamo.utils")
        counters = getattr(dyn, "counters", None)
        if counters is None:
            return {}
        breaks = {str(k): int(v) for k, v in dict(counters.get("graph_break", {})).items()}
        stats = dict(counters.get("stats", {}))
        frames = dict(counters.get("frames", {}))
        recompiles = sorted({g["compile_id"] for g in self.graphs.values()
                             if re.search(r"/[1-9]\d*", g["compile_id"] or "")})
        return {"graph_breaks": sum(breaks.values()), "graph_break_reasons": breaks,
                "unique_graphs": int(stats.get("unique_graphs", 0)), "frames_ok": int(frames.get("ok", 0)),
                "frames_total": int(frames.get("total", 0)), "recompiled_ids": recompiles}

    def results(self) -> dict[str, Any]:
        graphs = sorted(self.graphs.values(), key=lambda g: g["index"])
        return {"format": FORMAT, "status": self.status, "note": self.note, "roots": sorted(set(self.roots)),
                "graphs": graphs, "kernels": list(self.kernels), "errors": self.errors,
                "dynamo": self.dynamo_counters()}


def _distinct(stacks: list[list[tuple[str, str]]]) -> list[list[list[str]]]:
    out: list[list[list[str]]] = []
    for s in stacks:
        item = [list(x) for x in s]
        if item not in out:
            out.append(item)
    return out
