"""The dashboard's data: DuckDB queries over one prepared input's Parquet tables, JSON-ready results.

Parameters from a request only ever pick among fixed choices (a sort column from ``KERNEL_SORTS``, a phase from
``PHASES``) or are bound as query parameters (a search string, a layer, numbers): no request text becomes SQL and
no request names a file.
"""

from __future__ import annotations

import json
import math
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

#: Columns the kernel table may be sorted by (request value -> SQL expression).
KERNEL_SORTS = {"name": "name", "calls": "calls", "total_us": "total_ns", "mean_us": "mean_ns",
                "min_us": "min_ns", "max_us": "max_ns", "est_occupancy_pct": "est_occupancy_pct",
                "layer": "layer", "phase": "phase", "op": "op"}
PHASES = ("forward", "backward", "optimizer", "other")
#: At most this many GPU and host events in one timeline answer (the longest are kept).
TIMELINE_LIMIT = 20_000
PAGE_LIMIT = 500
#: At most this many points per device in the allocator timeline (the highest of each time bucket is kept).
MEMORY_POINTS = 4000


def _num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class Queries:
    """Queries over one cache folder (see :mod:`dnnprof.serve.prepare`)."""

    def __init__(self, cache: Path, view: dict[str, Any]) -> None:
        import duckdb

        self.cache = cache
        self.view = view
        self.tables = Path(view["tables"])
        self.rank = int(view["rank"])
        self._con = duckdb.connect(config={"threads": 2, "memory_limit": "256MB"})
        self._lock = threading.Lock()

    def close(self) -> None:
        self._con.close()

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._con.cursor()
        try:
            cur.execute(sql, params or [])
            cols = [d[0] for d in cur.description]
            return [{c: _num(v) for c, v in zip(cols, row, strict=True)} for row in cur.fetchall()]
        finally:
            cur.close()

    def _pq(self, name: str) -> str:
        folder = self.tables if name in ("kernels", "strings", "steps", "runtime", "ops", "memcpy", "memset",
                                 "memory_events") \
            else self.cache
        return "read_parquet('" + str(folder / f"{name}.parquet").replace("'", "''") + "')"

    # --- summary ----------------------------------------------------------------------------------------------
    @cached_property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.cache / "summary.json").read_text())

    @cached_property
    def ranks(self) -> dict[str, Any]:
        return json.loads((self.cache / "ranks.json").read_text())

    def overview(self) -> dict[str, Any]:
        return {"summary": self.summary, "step_stack": self.view.get("step_stack", []),
                "ranks": self.view.get("ranks", [0]), "rank": self.rank}

    # --- kernels ----------------------------------------------------------------------------------------------
    def kernels(self, sort: str = "total_us", desc: bool = True, q: str = "", phase: str = "",
                offset: int = 0, limit: int = 100, cap: int = PAGE_LIMIT) -> dict[str, Any]:
        """One page of kernels grouped by name, sorted and filtered here, never in the browser (``cap``: the most
        rows one answer holds; a self-contained page takes them all)."""
        order = KERNEL_SORTS.get(sort, "total_ns")
        where, params = ["rank = ?"], [self.rank]
        if q:
            where.append("(contains(lower(name), lower(?)) OR contains(lower(layer), lower(?)) "
                         "OR contains(lower(op), lower(?)))")
            params += [q, q, q]
        if phase in PHASES:
            where.append("phase = ?")
            params.append(phase)
        limit = max(1, min(int(limit), cap))
        sql = f"""SELECT name, calls, total_ns / 1e3 AS total_us, mean_ns / 1e3 AS mean_us, min_ns / 1e3 AS min_us,
                   max_ns / 1e3 AS max_us, est_occupancy_pct, layer, phase, op,
                   100.0 * total_ns / sum(total_ns) OVER () AS pct_filtered, count(*) OVER () AS matched
                  FROM {self._pq("kgroups")} WHERE {" AND ".join(where)}
                  ORDER BY {order} {"DESC" if desc else "ASC"} NULLS LAST, name LIMIT {limit} OFFSET ?"""
        rows = self._rows(sql, [*params, max(0, int(offset))])
        extra = {k["name"]: k for k in self.summary.get("kernels", [])}
        for r in rows:
            e = extra.get(r["name"], {})
            for key in ("short_name", "family", "tensor_core", "precision", "theoretical_occupancy_pct",
                        "occupancy_limiters", "bound"):
                if key in e:
                    r[key] = e[key]
        matched = rows[0]["matched"] if rows else 0
        for r in rows:
            r.pop("matched", None)
        return {"rows": rows, "matched": matched, "offset": offset, "limit": limit}

    # --- layers -----------------------------------------------------------------------------------------------
    def layers(self) -> dict[str, Any]:
        """GPU time per layer and phase; the browser folds it into the module tree and the per-type roll-up."""
        rows = self._rows(f"""SELECT layer, phase, sum(total_ns) / 1e3 AS total_us, sum(calls) AS calls
                              FROM {self._pq("lgroups")} WHERE rank = ? GROUP BY layer, phase""", [self.rank])
        return {"rows": rows}

    def layer_detail(self, layer: str) -> dict[str, Any]:
        """Ops and kernels of one layer (drill-down), each with its phase split."""
        rows = self._rows(f"""SELECT op, name, phase, sum(calls) AS calls, sum(total_ns) / 1e3 AS total_us
                              FROM {self._pq("lgroups")} WHERE rank = ? AND layer = ?
                              GROUP BY op, name, phase ORDER BY total_us DESC LIMIT 2000""", [self.rank, layer])
        return {"layer": layer, "rows": rows}

    def layer_detail_all(self, limit: int = 50_000) -> list[dict[str, Any]]:
        """Every layer's drill-down rows at once (for a self-contained page), the longest first."""
        return self._rows(f"""SELECT layer, op, name, phase, sum(calls) AS calls, sum(total_ns) / 1e3 AS total_us
                              FROM {self._pq("lgroups")} WHERE rank = ?
                              GROUP BY layer, op, name, phase ORDER BY total_us DESC LIMIT {int(limit)}""",
                          [self.rank])

    def ops(self) -> dict[str, Any]:
        """GPU time by launching op, with the host time of the op of that name."""
        gpu = self._rows(f"""SELECT op, sum(calls) AS kernel_calls, sum(total_ns) / 1e3 AS gpu_us,
                                    count(DISTINCT name) AS kernels
                             FROM {self._pq("lgroups")} WHERE rank = ? GROUP BY op
                             ORDER BY gpu_us DESC LIMIT 1000""", [self.rank])
        host = self._rows(f"""SELECT s.value AS op, count(*) AS host_calls, sum(o.dur_ns) / 1e3 AS host_us
                              FROM {self._pq("ops")} o JOIN {self._pq("strings")} s ON o.name_id = s.id
                              WHERE o.rank = ? AND o.category = 0 GROUP BY s.value""", [self.rank])
        by_name = {h["op"]: h for h in host}
        for g in gpu:
            h = by_name.get(g["op"], {})
            g["host_calls"], g["host_us"] = h.get("host_calls"), h.get("host_us")
        return {"rows": gpu}

    # --- memory -----------------------------------------------------------------------------------------------
    def memory_timeline(self, points: int = MEMORY_POINTS) -> dict[str, Any]:
        """The caching allocator's totals over time per device (``memory_events``, recorded with
        ``profile_memory``/``--full``): allocated and reserved bytes after each event, at most ``points`` per
        device (each time bucket keeps its highest totals, so no peak is lost); times in ms from the rank's first
        event, with the steps' start times on the same clock."""
        if not (self.tables / "memory_events.parquet").is_file():
            return {"devices": [], "events": 0, "steps": []}
        src = self._pq("memory_events")
        (t0, n), = [(r["t0"], r["n"]) for r in self._rows(
            f"SELECT min(ts_ns) AS t0, count(*) AS n FROM {src} WHERE rank = ?", [self.rank])]
        if not n:
            return {"devices": [], "events": 0, "steps": []}
        k = int(points)
        rows = self._rows(f"""
            WITH e AS (SELECT device_type, device, ts_ns, total_allocated_bytes, total_reserved_bytes,
                              count(*) OVER (PARTITION BY device_type, device) AS n,
                              min(ts_ns) OVER (PARTITION BY device_type, device) AS lo,
                              max(ts_ns) OVER (PARTITION BY device_type, device) AS hi
                       FROM {src} WHERE rank = ?),
                 b AS (SELECT *, CASE WHEN n <= {k} THEN ts_ns
                                      ELSE CAST(floor((ts_ns - lo) * {k - 1}.0 / greatest(hi - lo, 1)) AS BIGINT)
                                 END AS bucket FROM e)
            SELECT device_type, device, min(ts_ns) AS ts_ns, max(total_allocated_bytes) AS allocated_bytes,
                   max(total_reserved_bytes) AS reserved_bytes
            FROM b GROUP BY device_type, device, bucket ORDER BY device_type, device, ts_ns""", [self.rank])
        from dnnprof.model.schema import DEVICE_TYPES

        devices: dict[tuple[int, int], dict[str, Any]] = {}
        for r in rows:
            key = (int(r["device_type"]), int(r["device"]))
            if key not in devices:
                kind = DEVICE_TYPES[key[0]] if 0 <= key[0] < len(DEVICE_TYPES) else str(key[0])
                devices[key] = {"device_type": kind, "device": key[1] if key[1] >= 0 else None,
                                "label": kind + (f":{key[1]}" if key[1] >= 0 else ""),
                                "t_ms": [], "allocated_bytes": [], "reserved_bytes": []}
            d = devices[key]
            d["t_ms"].append((r["ts_ns"] - t0) / 1e6)
            d["allocated_bytes"].append(r["allocated_bytes"])
            d["reserved_bytes"].append(r["reserved_bytes"])
        steps = [{"step": s["step"], "t_ms": (s["start_ns"] - t0) / 1e6} for s in self.steps()]
        return {"devices": list(devices.values()), "events": n, "steps": steps}

    # --- timeline ---------------------------------------------------------------------------------------------
    def steps(self) -> list[dict[str, Any]]:
        return self._rows(f"""SELECT number AS step, start_ns, dur_ns, gpu_start_ns, gpu_end_ns
                              FROM {self._pq("steps")} WHERE rank = ? ORDER BY number""", [self.rank])

    def timeline(self, step: int | None = None) -> dict[str, Any]:
        """Events of one step (the median-length one by default): GPU kernels/copies by stream with their layer
        and phase, host ops and runtime calls by thread, and the launch links between them."""
        steps = self.steps()
        if not steps:
            return {"steps": [], "step": None, "gpu": [], "host": []}
        pick = next((s for s in steps if s["step"] == step), None)
        if pick is None:
            ordered = sorted(steps, key=lambda s: s["dur_ns"])
            pick = ordered[len(ordered) // 2]
        lo = min(pick["start_ns"], pick["gpu_start_ns"] if pick["gpu_start_ns"] >= 0 else pick["start_ns"])
        hi = max(pick["start_ns"] + pick["dur_ns"], pick["gpu_end_ns"])
        window = [self.rank, lo, hi]
        gpu = self._rows(f"""
            SELECT * FROM (
              SELECT 'kernel' AS kind, k.stream, k.start_ns, k.dur_ns, s.value AS name, k.layer, k.phase,
                     k.correlation
              FROM {self._pq("kattr")} k JOIN {self._pq("strings")} s ON k.name_id = s.id
              WHERE k.rank = ? AND k.start_ns >= ? AND k.start_ns < ?
              UNION ALL
              SELECT 'memcpy', m.stream, m.start_ns, m.dur_ns, s.value, '', '', m.correlation
              FROM {self._pq("memcpy")} m JOIN {self._pq("strings")} s ON m.name_id = s.id
              WHERE m.rank = ? AND m.start_ns >= ? AND m.start_ns < ?)
            ORDER BY dur_ns DESC LIMIT {TIMELINE_LIMIT}""", window + window)
        host = self._rows(f"""
            SELECT * FROM (
              SELECT 'op' AS kind, o.tid, o.start_ns, o.dur_ns, s.value AS name, o.depth, -1 AS correlation
              FROM {self._pq("ops")} o JOIN {self._pq("strings")} s ON o.name_id = s.id
              WHERE o.rank = ? AND o.start_ns >= ? AND o.start_ns < ?
              UNION ALL
              SELECT 'runtime', r.tid, r.start_ns, r.dur_ns, s.value, -1, r.correlation
              FROM {self._pq("runtime")} r JOIN {self._pq("strings")} s ON r.name_id = s.id
              WHERE r.rank = ? AND r.start_ns >= ? AND r.start_ns < ?)
            ORDER BY dur_ns DESC LIMIT {TIMELINE_LIMIT}""", window + window)
        return {"steps": [s["step"] for s in steps], "step": pick["step"], "start_ns": lo, "end_ns": hi,
                "gpu": gpu, "host": host}

    def perfetto(self) -> Path:
        """The Perfetto trace of the whole input (``render.perfetto``), gzipped: a file in the cache folder,
        written once by a child process so the server never holds the whole profile."""
        from dnnprof.serve.perfetto_export import export_path

        return export_path(self.cache, self.tables)
