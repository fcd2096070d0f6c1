"""torch.compile's generated kernels → ``nn.Module`` layers, from the compile-time records of
``collect.compiled`` (``compiled_kernels.json``).

Inside a compiled graph call (the ``## Call CompiledFxGraph <key> ##`` range) the ops are the graph's kernels in the
order its wrapper calls them: generated kernels named as Inductor named them (``triton_poi_fused_add_0``; on the
CPU ``graph_<id>_cpp_fused_add_0``, the range ``cpp.enable_kernel_profile`` opens) and aten ops for the
``extern_kernels`` calls (``aten::mm``). Each graph call is matched to the recorded graph that shares most of its
generated kernel names (and is forward or backward like the call: a backward graph runs under
``CompiledFunctionBackward``); its generated kernels then take their own record, its aten ops the graph's extern
records of the same op in order. The layer of a record is the deepest module all its FX nodes share: one module
for most kernels, the common parent for a kernel fused across modules (the modules it spans are listed in the
profile's ``compiled`` meta, never dropped), the compiled root for code outside any submodule. What matches
nothing keeps no layer (op level), and is counted.

The layer goes into the op's ``module_id`` (the column torch's ``Module Hierarchy`` fills), which
``analysis.attribution`` already reads as the op's own module; each kernel's source lines are kept in the
profile's ``compiled`` meta (``kernel_sources``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.model.profile import Profile
from dnnprof.model.run_format import COMPILED_KERNELS_FILE

GRAPH_CALL_PREFIX = "## Call CompiledFxGraph"
_BACKWARD_MARKS = ("CompiledFunctionBackward",)
#: Label of code in the compiled root's own forward when the root's class is not known.
ROOT_LABEL = "compiled root"


def load_records(run_dir: Path) -> dict[str, Any] | None:
    """The compile-time records of a run directory, or None when the run compiled nothing."""
    path = run_dir / COMPILED_KERNELS_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        return {"status": "unreadable", "note": f"{path.name}: {e}", "kernels": [], "graphs": []}


def layer_label(stacks: list[list[list[str]]], root: str) -> tuple[str, list[str]]:
    """The layer of a kernel made from FX nodes with these module stacks, and the leaf layers it spans (>1 when
    it is shared). Stacks are ``[[fqn, Class], …]`` outermost first; nodes without a stack (autograd glue of a
    backward graph, code of the root's own forward) count only when no node has one: then the layer is the root."""
    full = [[tuple(x) for x in s] for s in stacks if s]
    if not full:
        return root, []
    leaves = sorted({_fmt(s[-1]) for s in full})
    common: list[tuple[str, ...]] = []
    for level in zip(*full, strict=False):
        if all(x == level[0] for x in level):
            common.append(level[0])
        else:
            break
    shared = leaves if len(leaves) > 1 else []
    return (_fmt(common[-1]) if common else root), shared


def runtime_name(kernel: dict[str, Any]) -> str:
    """The name a recorded kernel runs under in the trace: the generated kernel's own name, or the aten op of an
    extern call (``torch.ops.aten._scaled_dot_product_efficient_attention.default`` runs as
    ``aten::_scaled_dot_product_efficient_attention``; records of an earlier dnnprof named it by its overload)."""
    name = str(kernel.get("name", ""))
    if kernel.get("extern") and name.startswith("torch.ops.") and name.count(".") >= 3:
        ns, op = name.split(".")[2:4]
        return f"{ns}::{op}"
    return str(kernel.get("runtime_name") or name)


def _fmt(m: tuple[str, ...]) -> str:
    fqn, cls = m[0], m[1] if len(m) > 1 else ""
    return f"{fqn} ({cls})" if cls else fqn


def apply_compiled_kernels(profile: Profile, doc: dict[str, Any]) -> dict[str, Any]:
    """Give the ops of compiled graph calls their layers; returns what was matched (also in ``profile.meta``)."""
    roots = doc.get("roots") or []
    root = roots[0] if len(roots) == 1 else ROOT_LABEL
    kernels = doc.get("kernels") or []
    graphs = {int(g["index"]): g for g in doc.get("graphs") or []}
    info: dict[str, Any] = {"status": doc.get("status"), "note": doc.get("note", ""), "graphs": len(graphs),
                            "kernels_recorded": len(kernels), "dynamo": doc.get("dynamo") or {}}
    ops = profile.tables["ops"]
    n = ops["name_id"].size
    if not kernels or n == 0:
        profile.meta["compiled"] = info
        return info
    labels = [layer_label(k.get("module_stacks") or [], root) for k in kernels]
    # graph -> runtime name -> its records in call order (a kernel the graph calls from several places, e.g. one
    # block's fused GELU in every block, has a record per call)
    generated: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    externs: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, k in enumerate(kernels):
        (externs if k.get("extern") else generated)[int(k["graph"])][runtime_name(k)].append(i)
    graph_label = {g: layer_label([s for k in kernels if int(k["graph"]) == g for s in k.get("module_stacks") or []]
                                  or [[]], root)[0] for g in graphs}
    by_name: dict[str, list[int]] = defaultdict(list)
    for per_graph in generated.values():
        for name, ix in per_graph.items():
            by_name[name].extend(ix)

    names = profile.names(ops["name_id"]).astype(object)
    parent = ops["parent_row"]
    calls = np.flatnonzero(np.fromiter((str(s).startswith(GRAPH_CALL_PREFIX) for s in names), bool, n))
    children: dict[int, list[int]] = defaultdict(list)
    in_call = np.isin(parent, calls)
    for r in np.flatnonzero(in_call).tolist():
        children[int(parent[r])].append(r)
    module_id = ops["module_id"]
    sources: dict[str, list[str]] = {}
    matched = unmatched = 0
    shared: dict[str, list[str]] = {}

    def set_row(r: int, label: str, kernel: int | None) -> None:
        nonlocal matched
        module_id[r] = profile.intern(label)
        matched += 1
        if kernel is not None:
            leaves = labels[kernel][1]
            if leaves:
                shared[runtime_name(kernels[kernel])] = leaves
            if kernels[kernel].get("sources"):
                sources[runtime_name(kernels[kernel])] = kernels[kernel]["sources"]

    for c in calls.tolist():  # one per graph call: a few per step
        rows = sorted(children.get(c, []), key=lambda r: int(ops["start_ns"][r]))
        backward = _under_backward(names, parent, c)
        g = _pick_graph(graphs, generated, [names[r] for r in rows], backward)
        if g is None:
            unmatched += len(rows)
            continue
        queue = {op: list(ix) for op, ix in externs[g].items()}
        seen: dict[str, int] = defaultdict(int)  # calls of each generated kernel so far in this graph call
        for r in rows:
            nm = names[r]
            if nm in generated[g]:
                ix = generated[g][nm]
                i = ix[min(seen[nm], len(ix) - 1)]
                seen[nm] += 1
                set_row(r, labels[i][0], i)
            elif queue.get(nm):
                i = queue[nm].pop(0)
                set_row(r, labels[i][0], i)
            else:
                set_row(r, graph_label.get(g, root), None)
    # Generated kernels outside any graph-call range (a PyTorch without it): by name over every graph.
    loose = np.flatnonzero(~in_call & (module_id < 0))
    for r in loose.tolist():
        ix = by_name.get(names[r])
        if ix:
            lab, _ = layer_label([s for i in ix for s in kernels[i].get("module_stacks") or []] or [[]], root)
            set_row(r, lab, ix[0] if len(ix) == 1 else None)
    info.update(graph_calls=int(calls.size), ops_matched=matched, ops_unmatched=unmatched,
                shared_kernels=dict(sorted(shared.items())), kernel_sources=dict(sorted(sources.items())))
    profile.meta["compiled"] = info
    return info


def _under_backward(names: np.ndarray, parent: np.ndarray, row: int) -> bool:
    r = int(parent[row])
    while r >= 0:
        if any(m in str(names[r]) for m in _BACKWARD_MARKS):
            return True
        r = int(parent[r])
    return False


def _pick_graph(graphs: dict[int, dict[str, Any]], generated: dict[int, dict[str, list[int]]],
                child_names: list[Any], backward: bool) -> int | None:
    """The recorded graph a call ran: most generated kernel names in common, same direction first."""
    best, best_key = None, (-1, -1)
    present = set(child_names)
    for g, info in graphs.items():
        overlap = len(present & set(generated.get(g, {})))
        key = (overlap, int(bool(info.get("backward")) == backward))
        if key > best_key:
            best, best_key = g, key
    if best is None or (best_key[0] == 0 and len(graphs) > 1):
        # No generated kernel to tell graphs apart: only a graph of the right direction that is alone in it.
        same = [g for g, info in graphs.items() if bool(info.get("backward")) == backward]
        return same[0] if len(same) == 1 else None
    return best
