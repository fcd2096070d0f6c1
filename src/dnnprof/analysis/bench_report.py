"""``dnnprof.bench/1``: a benchmark's raw samples turned into trtexec's report (pure: a dict in, a dict out).

Per backend × batch size: throughput (queries, samples and tokens per second), latency percentiles, the mean
H2D / compute / D2H / host-enqueue times, the coefficient of variation and trtexec's diagnoses; per backend, the
batch-size knee of the throughput-latency curve.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "dnnprof.bench/1"
#: trtexec calls a run unstable when the latency's coefficient of variation exceeds 1 %.
UNSTABLE_CV_PCT = 1.0
#: Enqueue-bound: the host takes at least this share of the GPU compute time to enqueue one query, so the GPU waits
#: on Python and launches (trtexec's "bound by Enqueue Time rather than GPU Compute"). CUDA graphs fix that.
ENQUEUE_BOUND_RATIO = 0.8
#: Transfer-bound: host↔device copies take at least this share of the GPU compute time (trtexec's "throughput may
#: be bound by data transfers"). Keep data on the GPU, or pin and overlap the copies.
TRANSFER_BOUND_RATIO = 1.0
#: Phases apart: the H2D / compute / D2H split comes from separate iterations (see ``bench.trial``); when their mean
#: first-to-last time differs from the timed mean latency by more than this share (and by more than
#: :data:`PHASES_APART_MIN_MS`), the split is not a breakdown of the latency reported and the result says so.
PHASES_APART_FRACTION = 0.1
PHASES_APART_MIN_MS = 0.08
#: The batch-size knee: the smallest batch whose throughput is within this share of the backend's best.
KNEE_FRACTION = 0.9
PERCENTILES = (50, 90, 95, 99)
LATENCY_KEYS = ("min", "mean", "p50", "p90", "p95", "p99", "max")


def latency_stats(samples_ms: list[float]) -> dict[str, float] | None:
    """min, mean, p50, p90, p95, p99 and max of ``samples_ms`` (linear interpolation; ordered by construction)."""
    import numpy as np

    if not samples_ms:
        return None
    a = np.asarray(samples_ms, dtype=np.float64)
    p = np.percentile(a, PERCENTILES)
    return {"min": float(a.min()), "mean": float(a.mean()), "p50": float(p[0]), "p90": float(p[1]),
            "p95": float(p[2]), "p99": float(p[3]), "max": float(a.max())}


def cv_pct(samples_ms: list[float]) -> float | None:
    """Standard deviation over mean, in percent (None with fewer than two samples)."""
    import numpy as np

    if len(samples_ms) < 2:
        return None
    a = np.asarray(samples_ms, dtype=np.float64)
    mean = float(a.mean())
    return float(a.std(ddof=1) / mean * 100.0) if mean > 0 else None


def _mean(samples: list[float] | None) -> float | None:
    return float(sum(samples) / len(samples)) if samples else None


def diagnoses(r: dict[str, Any]) -> list[dict[str, Any]]:
    """trtexec's remarks on one result: ``enqueue_bound``, ``transfer_bound``, ``unstable`` (each with numbers), and
    ``phases_apart`` when the phase split's own iterations disagree with the timed latency."""
    found = []
    gpu, enq = r.get("gpu_compute_ms"), r.get("enqueue_ms")
    if gpu and enq is not None and enq >= ENQUEUE_BOUND_RATIO * gpu:
        hint = "" if r["backend"] in ("cuda-graph", "compile-reduce-overhead", "tensorrt") else \
            "; CUDA graphs (--backends cuda-graph) or compile-reduce-overhead replay the launches in one call"
        found.append({"id": "enqueue_bound", "enqueue_ms": enq, "gpu_compute_ms": gpu,
                      "message": f"enqueue-bound: the host takes {enq:.3g} ms to enqueue {gpu:.3g} ms of GPU work, "
                                 f"so the GPU waits on the host{hint}"})
    h2d, d2h = r.get("h2d_ms"), r.get("d2h_ms")
    if gpu and h2d is not None and d2h is not None and h2d + d2h >= TRANSFER_BOUND_RATIO * gpu:
        found.append({"id": "transfer_bound", "transfer_ms": h2d + d2h, "gpu_compute_ms": gpu,
                      "message": f"transfer-bound: copies take {h2d + d2h:.3g} ms (H2D {h2d:.3g}, D2H {d2h:.3g}) "
                                 f"against {gpu:.3g} ms of compute; keep inputs/outputs on the GPU or overlap "
                                 "the copies"})
    phases, lat = r.get("phase_latency_ms"), (r.get("latency_ms") or {}).get("mean")
    if phases is not None and lat and abs(phases - lat) > max(PHASES_APART_FRACTION * lat, PHASES_APART_MIN_MS):
        found.append({"id": "phases_apart", "phase_latency_ms": phases, "latency_mean_ms": lat,
                      "message": f"phases apart: the H2D / compute / D2H split comes from its own iterations, whose "
                                 f"mean of {phases:.3g} ms is {100.0 * (phases - lat) / lat:+.0f} % off the timed "
                                 f"mean latency of {lat:.3g} ms; read the split as shares, not as parts of that "
                                 "latency (time more iterations, quiet the machine)"})
    cv = r.get("cv_pct")
    if cv is not None and cv > UNSTABLE_CV_PCT:
        found.append({"id": "unstable", "cv_pct": cv,
                      "message": f"unstable: latency varies by {cv:.2g} % (CV over {UNSTABLE_CV_PCT:g} %); "
                                 "lock clocks, quiet the machine or time more iterations"})
    return found


def result_row(t: dict[str, Any], precision: str, tokens_per_sample: float | None) -> dict[str, Any]:
    """One ``results`` entry from one raw trial."""
    n = len(t.get("latency_ms") or [])
    measured = t["status"] in ("ok", "wrong") and n > 0 and t.get("wall_s")
    qps = n / t["wall_s"] if measured else None
    b = t["batch_size"]
    compute = _mean(t.get("compute_ms"))
    on_gpu = t.get("h2d_ms") is not None
    r: dict[str, Any] = {
        "backend": t["backend"], "batch_size": b, "precision": precision, "status": t["status"],
        "reason": t.get("reason") or "",
        "throughput_qps": qps,
        "throughput_samples_per_s": qps * b if qps is not None else None,
        "throughput_tokens_per_s": qps * b * tokens_per_sample if qps is not None and tokens_per_sample else None,
        "latency_ms": latency_stats(t.get("latency_ms") or []) if measured else None,
        "h2d_ms": _mean(t.get("h2d_ms")), "gpu_compute_ms": compute if on_gpu else None,
        "d2h_ms": _mean(t.get("d2h_ms")), "enqueue_ms": _mean(t.get("enqueue_ms")),
        "phase_latency_ms": _mean(t.get("phase_latency_ms")) if on_gpu else None,
        "compute_ms": compute if measured else None,
        "cv_pct": cv_pct(t.get("latency_ms") or []) if measured else None,
        "iterations": n, "wall_s": t.get("wall_s") or 0.0,
        "max_rel_error": t.get("max_rel_error"), "tolerance": t.get("tolerance"),
        "reference_backend": t.get("reference_backend"), "note": t.get("note") or "",
        "null_reasons": dict(t.get("null_reasons") or {}) if measured else {},
        "profile_run_dir": t.get("profile_run_dir"),
    }
    r["diagnoses"] = diagnoses(r) if measured else []
    return r


def knees(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per backend with two or more measured batch sizes: the throughput-latency curve and its knee."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        if r["status"] == "ok" and r["throughput_samples_per_s"]:
            by.setdefault(r["backend"], []).append(r)
    out = []
    for backend, rows in by.items():
        if len(rows) < 2:
            continue
        rows = sorted(rows, key=lambda r: r["batch_size"])
        best = max(rows, key=lambda r: r["throughput_samples_per_s"])
        knee = next(r for r in rows if r["throughput_samples_per_s"] >= KNEE_FRACTION * best["throughput_samples_per_s"])
        out.append({"backend": backend, "knee_batch_size": knee["batch_size"],
                    "knee_throughput_samples_per_s": knee["throughput_samples_per_s"],
                    "knee_latency_p50_ms": knee["latency_ms"]["p50"],
                    "best_batch_size": best["batch_size"],
                    "best_throughput_samples_per_s": best["throughput_samples_per_s"],
                    "points": [{"batch_size": r["batch_size"], "throughput_samples_per_s": r["throughput_samples_per_s"],
                                "latency_p50_ms": r["latency_ms"]["p50"]} for r in rows]})
    return out


def bench_document(raw: dict[str, Any]) -> dict[str, Any]:
    """The ``dnnprof.bench/1`` document of a ``dnnprof.bench.session.run_bench`` result."""
    src = raw["source"]
    results = [result_row(t, src["precision"], src.get("tokens_per_sample")) for t in raw["trials"]]
    return {"schema": SCHEMA, "workload": src["name"], "source_kind": src["kind"], "device": raw["device"],
            "precision": src["precision"], "tokens_per_sample": src.get("tokens_per_sample"),
            "settings": raw["settings"], "batch_sizes": raw["batch_sizes"], "backends": raw["backends"],
            "results": results, "knee": knees(results)}
