"""Every answer the dashboard asks for, by name: ``Store.answer("0/kernels", {...})``. The server calls it per
request; ``bundle`` calls it once per view to embed the data of a self-contained page."""

from __future__ import annotations

from typing import Any

from dnnprof.serve.inputs import Input
from dnnprof.serve.queries import Queries


class NotFound(LookupError):
    """No such answer (an unknown name or input number)."""


class BadRequest(ValueError):
    """A parameter that is not what the answer takes."""


def _int(params: dict[str, str], key: str, default: int | None) -> int | None:
    v = params.get(key)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise BadRequest(f"{key}: not a whole number") from None


class Store:
    """The inputs and a DuckDB query object per prepared one."""

    def __init__(self, inputs: list[Input]) -> None:
        self.inputs = inputs
        self._queries: dict[int, Queries] = {}

    def queries(self, i: int) -> Queries:
        if not 0 <= i < len(self.inputs) or self.inputs[i].kind != "profile":
            raise NotFound(str(i))
        if i not in self._queries:
            inp = self.inputs[i]
            assert inp.cache is not None
            self._queries[i] = Queries(inp.cache, inp.view)
        return self._queries[i]

    def close(self) -> None:
        for q in self._queries.values():
            q.close()
        self._queries.clear()

    def listing(self) -> dict[str, Any]:
        out = []
        for i, inp in enumerate(self.inputs):
            item: dict[str, Any] = {"id": i, "label": inp.label, "kind": inp.kind}
            if inp.kind == "profile":
                item["ranks"] = inp.view.get("ranks", [0])
                item["rank"] = inp.view.get("rank", 0)
                item["has_samples"] = bool(inp.view.get("samples"))
            elif inp.kind == "recording":
                item["has_samples"] = bool(inp.view.get("samples"))
            out.append(item)
        return {"inputs": out}

    def answer(self, what: str, params: dict[str, str]) -> Any:
        if what == "inputs":
            return self.listing()
        if what == "diff":
            return self.diff(_int(params, "base", 0) or 0, _int(params, "new", 1) or 0)
        head, _, name = what.partition("/")
        if not head.isdigit() or "/" in name:
            raise NotFound(what)
        i = int(head)
        if name == "sweep":
            if not 0 <= i < len(self.inputs) or self.inputs[i].kind != "sweep":
                raise NotFound(what)
            return self.inputs[i].sweep
        if 0 <= i < len(self.inputs) and self.inputs[i].kind == "recording":
            if name != "samples":
                raise NotFound(what)
            view = self.inputs[i].view
            return {"series": view.get("samples", {}), "summary": view.get("samples_summary")}
        q = self.queries(i)
        if name == "overview":
            return q.overview()
        if name == "kernels":
            return q.kernels(sort=params.get("sort", "total_us"), desc=params.get("desc", "1") != "0",
                             q=params.get("q", "")[:200], phase=params.get("phase", ""),
                             offset=_int(params, "offset", 0) or 0, limit=_int(params, "limit", 100) or 100)
        if name == "layers":
            return q.layers()
        if name == "layer":
            return q.layer_detail(params.get("name", ""))
        if name == "ops":
            return q.ops()
        if name == "timeline":
            return q.timeline(_int(params, "step", None))
        if name == "ranks":
            return {"ranks": q.summary.get("ranks"), "per_rank": q.ranks,
                    "critical_path": q.summary.get("critical_path")}
        if name == "samples":
            return {"series": q.view.get("samples", {}), "summary": q.summary.get("samples")}
        if name == "memory":
            return q.memory_timeline()
        if name == "perfetto":
            return q.perfetto()
        raise NotFound(what)

    def diff(self, base: int, new: int) -> dict[str, Any]:
        from dnnprof.analysis.diff import diff_summaries

        return {"base": self.inputs[base].label if 0 <= base < len(self.inputs) else None,
                "new": self.inputs[new].label if 0 <= new < len(self.inputs) else None,
                "diff": diff_summaries(self.queries(base).summary, self.queries(new).summary)}


def bundle(store: Store) -> dict[str, Any]:
    """Every answer a self-contained page needs, keyed like the server's paths: all kernel groups (the page sorts
    and filters them itself), every layer's drill-down, the median step's timeline."""
    out: dict[str, Any] = {"inputs": store.listing()}
    profiles = [i for i, inp in enumerate(store.inputs) if inp.kind == "profile"]
    for i, inp in enumerate(store.inputs):
        if inp.kind == "sweep":
            out[f"{i}/sweep"] = inp.sweep
            continue
        q = store.queries(i)
        out[f"{i}/overview"] = q.overview()
        out[f"{i}/kernels"] = q.kernels(limit=10**9, offset=0, cap=10**9)
        out[f"{i}/layers"] = q.layers()
        out[f"{i}/layer-all"] = {"rows": q.layer_detail_all()}
        out[f"{i}/ops"] = q.ops()
        out[f"{i}/timeline"] = q.timeline(None)
        out[f"{i}/ranks"] = store.answer(f"{i}/ranks", {})
        out[f"{i}/samples"] = store.answer(f"{i}/samples", {})
        out[f"{i}/memory"] = q.memory_timeline()
    if len(profiles) >= 2:
        out["diff"] = store.diff(profiles[0], profiles[1])
    return out
