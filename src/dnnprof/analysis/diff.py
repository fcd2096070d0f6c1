"""What changed between two runs: the ``dnnprof.diff/1`` document of two ``dnnprof.summary/1`` documents.

Times are compared **per step** (a summary's totals over its step count), so runs with different numbers of
profiled steps compare fairly; a summary without steps (a whole-trace window) counts as one step. Kernels are
matched by full name (and layer, where attributed), families, layers and phases by name, findings by id.
``ratio`` is new / base (below 1 = faster or smaller); ``speedup`` is base / new step time.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA = "dnnprof.diff/1"

#: What a diff reads of a summary: section → (kind, fields that must be numbers or null, fields that must be text or
#: null); "object" sections are one object, "rows" sections a list of objects. Anything else in a summary is ignored.
_READS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "steps": ("object", ("count", "median_us"), ()),
    "gpu": ("object", ("busy_pct", "tensor_core_pct", "kernel_us", "memcpy_us", "memset_us", "idle_us",
                       "collectives_only_pct"), ()),
    "device": ("object", (), ("name",)),
    "source": ("object", (), ("path", "format")),
    "throughput": ("object", ("items_per_s",), ("unit",)),
    "memory": ("object", ("peak_allocated_bytes",), ()),
    "families": ("rows", ("total_us",), ("family",)),
    "layers": ("rows", ("total_us",), ("name",)),
    "kernels": ("rows", ("total_us",), ("name", "short_name", "layer")),
    "findings": ("rows", ("est_gain_pct",), ("id", "title")),
}
#: Row fields that must be present (a key to match rows by, a time to compare).
_ROW_KEYS = {"families": ("family", "total_us"), "layers": ("name", "total_us"), "kernels": ("name", "total_us"),
             "findings": ("id",)}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def summary_problem(doc: Any) -> str | None:
    """Why ``doc`` cannot be compared (the first field of the wrong type), or None. Checks what
    :func:`diff_summaries` reads, so a summary edited by hand or cut short is refused in one line, not a traceback."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not a summary object"
    for section, (kind, numbers, texts) in _READS.items():
        value = doc.get(section)
        if value is None:
            continue
        rows = [value] if kind == "object" else value
        if not isinstance(value, dict if kind == "object" else list):
            return f"'{section}' is {str(value)[:40]!r}, not {'an object' if kind == 'object' else 'a list'}"
        for i, row in enumerate(rows):
            where = section if kind == "object" else f"{section}[{i}]"
            if not isinstance(row, dict):
                return f"'{where}' is {str(row)[:40]!r}, not an object"
            for k in _ROW_KEYS.get(section, ()):
                if row.get(k) is None:
                    return f"'{where}' has no {k}"
            for k in numbers:
                if row.get(k) is not None and not _number(row[k]):
                    return f"'{where}.{k}' is {str(row[k])[:40]!r}, not a number"
            for k in texts:
                if row.get(k) is not None and not isinstance(row[k], str):
                    return f"'{where}.{k}' is {str(row[k])[:40]!r}, not text"
    count = (doc.get("steps") or {}).get("count")
    if count is not None and (not isinstance(count, int) or count < 0):
        return f"'steps.count' is {count!r}, not a count"
    phases = doc.get("phases")
    if phases is not None and not (isinstance(phases, dict) and all(_number(v) for k, v in phases.items()
                                                                    if str(k).endswith("_us"))):
        return "'phases' is not an object of times"
    return None


def _per_step(doc: dict[str, Any]) -> int:
    return max(int((doc.get("steps") or {}).get("count") or 0), 1)


def _ratio(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or not base:
        return None
    return round(new / base, 4)


def _pair(base: float | None, new: float | None) -> dict[str, Any]:
    return {"base": base, "new": new, "ratio": _ratio(base, new),
            "delta": None if base is None or new is None else round(new - base, 3)}


def _side(doc: dict[str, Any]) -> dict[str, Any]:
    dev = doc.get("device") or {}
    src = doc.get("source") or {}
    return {"source": src.get("path"), "format": src.get("format"), "device": dev.get("name"),
            "steps": (doc.get("steps") or {}).get("count")}


def _rows(base: list[dict[str, Any]], new: list[dict[str, Any]], key: Any, total: str, nb: int, nn: int,
          top: int, label: Any = None) -> list[dict[str, Any]]:
    """Rows matched by ``key``, their per-step time in each run, largest change first (``top`` rows);
    ``label(row)`` names a row for people (default: its key)."""
    b = {key(r): r for r in base}
    n = {key(r): r for r in new}
    out = []
    for k in dict.fromkeys([*b, *n]):
        row = n.get(k) or b[k]
        bu = b[k][total] / nb if k in b else 0.0
        nu = n[k][total] / nn if k in n else 0.0
        status = "both" if k in b and k in n else ("gone" if k in b else "new")
        out.append({"key": k, "label": label(row) if label else k, "status": status, "base_us_per_step": round(bu, 3), "new_us_per_step": round(nu, 3),
                    "delta_us_per_step": round(nu - bu, 3), "ratio": _ratio(bu, nu) if k in b and k in n else None})
    out.sort(key=lambda r: -abs(r["delta_us_per_step"]))
    return out[:top]


def _findings(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    b = {f["id"]: f for f in base}
    n = {f["id"]: f for f in new}
    return {"resolved": [{"id": i, "title": b[i].get("title"), "est_gain_pct": b[i].get("est_gain_pct")}
                         for i in b if i not in n],
            "new": [{"id": i, "title": n[i].get("title"), "est_gain_pct": n[i].get("est_gain_pct")}
                    for i in n if i not in b],
            "persisting": [{"id": i, "title": n[i].get("title"), "base_est_gain_pct": b[i].get("est_gain_pct"),
                            "new_est_gain_pct": n[i].get("est_gain_pct")} for i in n if i in b]}


def diff_summaries(base: dict[str, Any], new: dict[str, Any], top: int = 20) -> dict[str, Any]:
    """The ``dnnprof.diff/1`` document of two summaries (see the module docstring)."""
    nb, nn = _per_step(base), _per_step(new)
    bs, ns = base.get("steps") or {}, new.get("steps") or {}
    bg, ng = base.get("gpu") or {}, new.get("gpu") or {}
    step = _pair(bs.get("median_us"), ns.get("median_us"))
    step["speedup"] = _ratio(ns.get("median_us"), bs.get("median_us"))
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "base": _side(base),
        "new": _side(new),
        "step_time_median_us": step,
        "gpu": {
            "busy_pct": _pair(bg.get("busy_pct"), ng.get("busy_pct")),
            "tensor_core_pct": _pair(bg.get("tensor_core_pct"), ng.get("tensor_core_pct")),
            **{f"{k}_per_step": _pair(None if bg.get(k) is None else round(bg[k] / nb, 3),
                                      None if ng.get(k) is None else round(ng[k] / nn, 3))
               for k in ("kernel_us", "memcpy_us", "memset_us", "idle_us")},
            **({"collectives_only_pct": _pair(bg.get("collectives_only_pct"), ng.get("collectives_only_pct"))}
               if "collectives_only_pct" in bg or "collectives_only_pct" in ng else {}),
        },
        "phases_us_per_step": {
            k[:-3]: _pair(round((base.get("phases") or {}).get(k, 0.0) / nb, 3),
                          round((new.get("phases") or {}).get(k, 0.0) / nn, 3))
            for k in dict.fromkeys([*(base.get("phases") or {}), *(new.get("phases") or {})]) if k.endswith("_us")},
        "families": _rows(base.get("families") or [], new.get("families") or [], lambda r: r["family"], "total_us",
                          nb, nn, top),
        "layers": _rows(base.get("layers") or [], new.get("layers") or [], lambda r: r["name"], "total_us", nb, nn,
                        top),
        "kernels": _rows(base.get("kernels") or [], new.get("kernels") or [],
                         lambda r: f"{r['name']} @ {r['layer']}" if r.get("layer") else r["name"], "total_us", nb,
                         nn, top, label=lambda r: " @ ".join(x for x in (r.get("short_name") or r["name"],
                                                                         r.get("layer")) if x)),
        "findings": _findings(base.get("findings") or [], new.get("findings") or []),
    }
    bt, nt = base.get("throughput") or {}, new.get("throughput") or {}
    if bt.get("items_per_s") is not None or nt.get("items_per_s") is not None:
        doc["throughput"] = {**_pair(bt.get("items_per_s"), nt.get("items_per_s")),
                             "unit": nt.get("unit") or bt.get("unit")}
    bm, nm = base.get("memory") or {}, new.get("memory") or {}
    if bm.get("peak_allocated_bytes") is not None or nm.get("peak_allocated_bytes") is not None:
        doc["peak_allocated_bytes"] = _pair(bm.get("peak_allocated_bytes"), nm.get("peak_allocated_bytes"))
    return doc
