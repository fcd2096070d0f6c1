"""Rules about compiled code: ``compile-graph-breaks``.

``compile-not-used`` (``rules.kernels``) stays quiet on compiled code; this one looks at how well it is compiled,
from Dynamo's counters (``compiled_kernels.json``, recorded under ``dnnprof run``) and the trace's compiled regions.
"""

from __future__ import annotations

import numpy as np

from dnnprof.analysis.attribution import inherit
from dnnprof.analysis.rules.base import Finding, pct, rule, us
from dnnprof.analysis.rules.context import Context
from dnnprof.model.units import ns_brief_text

#: ``compile-graph-breaks`` fires when the time spent inside compiled regions but outside their compiled graphs
#: (eager code between graphs, Dynamo's guards and graph entries) reaches this share of step time.
GRAPH_BREAK_MIN_PCT = 1.0
_REGION = "Torch-Compiled Region"
_GRAPH_CALLS = ("## Call CompiledFxGraph", "CompiledFunction")
TOP_N = 5


@rule("compile-graph-breaks", group="compile")
def compile_graph_breaks(ctx: Context) -> Finding | None:
    """Graph breaks or recompilations leave part of a compiled model eager.

    Pattern: Dynamo counted graph breaks (or recompiled a frame), and time inside ``Torch-Compiled Region``
    ranges is spent outside their compiled graphs: the eager code Dynamo could not trace, and the guard checks
    and graph entries each extra graph adds.
    Algorithm: per compiled region, its host time minus its compiled graph calls and the regions nested in it
    (a graph break resumes in a nested region); on a GPU the kernel time those eager parts launch instead. Fires
    at ≥ ``GRAPH_BREAK_MIN_PCT`` of step time when Dynamo recorded a break or a recompilation.
    Fix: remove the break (``TORCH_LOGS=graph_breaks`` names each; print/``.item()``/data-dependent control flow
    are the usual causes; ``torch.compile(fullgraph=True)`` turns them into errors); for recompilations,
    ``TORCH_LOGS=recompiles`` and ``dynamic=True`` or ``torch._dynamo.mark_dynamic`` for changing shapes.
    """
    comp = ctx.profile.meta.get("compiled") or {}
    dyn = comp.get("dynamo") or {}
    breaks = int(dyn.get("graph_breaks") or 0)
    recompiled = list(dyn.get("recompiled_ids") or [])
    if not breaks and not recompiled:
        return None
    ops = ctx.profile.tables["ops"]
    ids = ops["name_id"]
    n = ids.size
    if n == 0:
        return None
    rows = np.arange(n, dtype=np.int64)
    region = ctx.profile.names_where(ids, lambda s: s.startswith(_REGION)) & (ops["rank"] == ctx.rank)
    call = ctx.profile.names_where(ids, lambda s: any(m in s for m in _GRAPH_CALLS))
    parent = ops["parent_row"].astype(np.int64)
    # Each op's nearest enclosing region or graph call: eager work is an op whose nearest one is a region.
    owner = inherit(np.where(region | call, rows, -1), np.where(parent >= 0, parent, -1))
    up = np.where(parent >= 0, owner[np.clip(parent, 0, None)], -1)
    up = np.where(parent >= 0, up, -1)
    eager_top = ~region & ~call & (up >= 0) & region[np.clip(up, 0, None)]
    if not region.any():
        return None
    k = ctx.profile.tables["kernels"]
    has_gpu = ctx.kernel_ns > 0
    if has_gpu:
        kr = k["op_row"]
        ok = (kr >= 0) & (k["rank"] == ctx.rank) & ((k["step"] >= 0) if ctx.has_steps else True)
        under_rows = inherit(np.where(eager_top, rows, -1), np.where(parent >= 0, parent, -1))
        kr_ok = kr[ok]
        eager_k = under_rows[kr_ok] >= 0
        cost = int(k["dur_ns"][ok][eager_k].sum())
        total = ctx.window_ns
        tops = under_rows[kr_ok][eager_k]
        weight = k["dur_ns"][ok][eager_k]
    else:
        in_steps = (ops["step"] >= 0) if (ops["step"] >= 0).any() else np.ones(n, dtype=bool)
        # Host time of each region outside its own graph calls and nested regions.
        child = (region | call) & (parent >= 0) & in_steps
        inner = np.zeros(n, dtype=np.int64)
        np.add.at(inner, parent[child], ops["dur_ns"][child].astype(np.int64))
        outside = np.where(region & in_steps, np.maximum(ops["dur_ns"].astype(np.int64) - inner, 0), 0)
        cost = int(outside.sum())
        steps = ctx.profile.tables["steps"]
        total = int(steps["dur_ns"][steps["rank"] == ctx.rank].sum()) or int(ops["dur_ns"][region].sum())
        tops = rows[outside > 0]
        weight = outside[outside > 0]
    share = pct(cost, total)
    if share < GRAPH_BREAK_MIN_PCT:
        return None
    by: dict[str, int] = {}
    for r, w in zip(tops.tolist(), weight.tolist(), strict=True):
        name = ctx.raw_op_name(r)
        by[name] = by.get(name, 0) + int(w)
    top = [{"name": nm, "dur_us": us(v), "pct_of_step": round(pct(v, total), 2)}
           for nm, v in sorted(by.items(), key=lambda kv: -kv[1])[:TOP_N]]
    reasons = dyn.get("graph_break_reasons") or {}
    what = ", ".join(x for x in (f"{breaks} graph break{'s' * (breaks != 1)}" if breaks else "",
                                 f"{len(recompiled)} recompilation{'s' * (len(recompiled) != 1)}" if recompiled else "")
                     if x)
    return Finding(
        id="compile-graph-breaks",
        title=f"torch.compile: {what}; {share:.0f}% of the step runs outside the compiled graphs",
        summary=(f"Dynamo recorded {what}; {ns_brief_text(cost)} "
                 + ("of kernels launched by eager code inside compiled regions" if has_gpu else
                    "of host time inside compiled regions but outside their compiled graphs")
                 + f" ({int(region.sum())} compiled regions in the trace)"),
        recommendation=("Remove the graph breaks (TORCH_LOGS=graph_breaks names each; torch.compile(fullgraph=True) "
                        "makes them errors): print, .item(), data-dependent Python control flow and unsupported "
                        "calls are the usual causes. For recompilations: TORCH_LOGS=recompiles, and dynamic=True or "
                        "torch._dynamo.mark_dynamic for shapes that change."),
        est_gain_pct=share,
        how_estimated=("Time inside compiled regions spent outside their compiled graphs (on a GPU: the kernel time "
                       "eager code there launches), as a share of step time: what one whole graph would remove at "
                       "best."),
        evidence={"graph_breaks": breaks, "recompiled_ids": recompiled,
                  "graph_break_reasons": {str(r).split("\n", 1)[0][:200]: int(c) for r, c in reasons.items()},
                  "outside_graph_us": us(cost), "pct_of_step": round(share, 2),
                  "compiled_regions": int(region.sum()), "unique_graphs": dyn.get("unique_graphs")},
        top=top,
    )
