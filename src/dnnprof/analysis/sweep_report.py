"""The four questions of a sweep, answered from ``sweep.json`` (pure: a dict in, a dict out; nothing drawn).

1. *Bottlenecks*: at the default point, which kernels and layers take the GPU time, their occupancy and bound class.
2. *Batch size*: throughput, GPU busy %, SM occupancy and memory against batch size; the largest batch that fits
   and what ran out.
3. *Precision*: speed, memory, tensor-core share, and the kernel families that appear or disappear.
4. *Training vs inference*: time split, utilisation, and how the bottlenecks differ.

Each answer is data (tables as lists of dicts) plus a few sentences built from that data; renderers format both.
"""

from __future__ import annotations

from typing import Any

from dnnprof.model.units import bytes_text, pct_text

#: An unknown value inside a sentence.
UNKNOWN = "?"

SCHEMA = "dnnprof.sweep_report/1"
#: The batch-size "knee": the smallest batch whose throughput is within this share of the best.
KNEE_FRACTION = 0.9
#: A kernel family counts as present in a profile when it takes at least this share of kernel time.
FAMILY_PRESENT_PCT = 1.0
#: The reference precision for speed-ups, when it was swept.
BASELINE_PRECISION = "fp32"
METRICS = ("throughput_samples_per_s", "throughput_items_per_s", "throughput_unit", "step_time_ms",
           "step_time_p90_ms", "gpu_busy_pct", "gpu_busy_source", "sm_active_pct", "sm_occupancy_pct",
           "tensor_active_pct", "dram_bw_util_pct", "peak_memory_bytes", "memory_capacity_bytes")
PROFILE_KEYS = ("top_kernels", "layers", "families", "phases_pct", "phases_us", "tensor_core_pct", "run_dir",
                "memory_breakdown", "findings")


# --- rows ------------------------------------------------------------------------------------------------------
def series_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (precision, mode): its batch rows (probe and profile merged), largest batch and skip reason."""
    order: dict[tuple[str, str], dict[str, Any]] = {}
    cfg = doc.get("config") or {}
    for m in cfg.get("modes") or []:
        for p in cfg.get("precisions") or []:
            order[(p, m)] = {"precision": p, "mode": m, "rows": {}, "max_batch": None, "skipped": ""}
    for pt in doc.get("points") or []:
        key = (pt["precision"], pt["mode"])
        s = order.setdefault(key, {"precision": key[0], "mode": key[1], "rows": {}, "max_batch": None,
                                   "skipped": ""})
        row = s["rows"].setdefault(pt["batch_size"], {"batch_size": pt["batch_size"], "status": None,
                                                      "message": "", "limited_by": None, "profile": None,
                                                      **{k: None for k in METRICS}})
        if pt["status"] == "skipped" and pt.get("limited_by") == "unsupported":
            s["skipped"] = pt.get("message", "")
        if pt.get("kind") == "profile":
            row["profile"] = {"status": pt["status"], "message": pt.get("message", ""),
                              "batch_size": pt["batch_size"], "precision": pt["precision"], "mode": pt["mode"],
                              "gpu_busy_pct": pt.get("gpu_busy_pct"),
                              **{k: pt.get(k) for k in PROFILE_KEYS}}
            fill = row["status"] is None
        else:
            fill = True
            row.update(status=pt["status"], message=pt.get("message", ""), limited_by=pt.get("limited_by"))
        for k in METRICS:
            if pt.get(k) is not None and (fill or row[k] is None):
                row[k] = pt[k]
        if row["status"] is None:
            row.update(status=pt["status"], message=pt.get("message", ""), limited_by=pt.get("limited_by"))
    for m in doc.get("max_batch_size") or []:
        key = (m["precision"], m["mode"])
        if key in order:
            order[key]["max_batch"] = m
    out = []
    for s in order.values():
        s["rows"] = [s["rows"][b] for b in sorted(s["rows"])]
        out.append(s)
    return out


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] == "ok"]


def _at(rows: list[dict[str, Any]], batch: int | None) -> dict[str, Any] | None:
    return next((r for r in rows if r["batch_size"] == batch), None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _some(names: list[str], limit: int = 6) -> str:
    """A readable list of at most ``limit`` names."""
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --- 2. batch size ---------------------------------------------------------------------------------------------
def memory_line(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Least-squares ``(bytes per sample, fixed bytes)`` of peak memory against batch size, or None."""
    pts = [(r["batch_size"], r["peak_memory_bytes"]) for r in _ok(rows) if r["peak_memory_bytes"] is not None]
    if len({b for b, _ in pts}) < 2:
        return None
    n = len(pts)
    mx = sum(b for b, _ in pts) / n
    my = sum(m for _, m in pts) / n
    sxx = sum((b - mx) ** 2 for b, _ in pts)
    slope = sum((b - mx) * (m - my) for b, m in pts) / sxx
    return slope, my - slope * mx


def batch_answer(s: dict[str, Any]) -> dict[str, Any]:
    """Question 2 for one series: the curve's shape, the knee, memory per sample, and the limit."""
    ok = _ok(s["rows"])
    out: dict[str, Any] = {"precision": s["precision"], "mode": s["mode"], "rows": s["rows"],
                           "max_batch": s["max_batch"], "skipped": s["skipped"], "sentences": []}
    if s["skipped"]:
        out["sentences"].append(f"{s['mode']} {s['precision']}: skipped — {s['skipped']}")
        return out
    name = f"{s['mode']} {s['precision']}"
    thr = [r for r in ok if r["throughput_samples_per_s"] is not None]
    if thr:
        best = max(thr, key=lambda r: r["throughput_samples_per_s"])
        first, last = thr[0], thr[-1]
        knee = next(r for r in thr if r["throughput_samples_per_s"] >= KNEE_FRACTION * best["throughput_samples_per_s"])
        out.update(best_batch=best["batch_size"], best_throughput=best["throughput_samples_per_s"],
                   knee_batch=knee["batch_size"],
                   gain_vs_smallest=_ratio(best["throughput_samples_per_s"], first["throughput_samples_per_s"]))
        text = (f"{name}: throughput {first['throughput_samples_per_s']:,.1f} samples/s at batch {first['batch_size']}"
                f", {last['throughput_samples_per_s']:,.1f} at batch {last['batch_size']}")
        if best is not last and best is not first:
            text += f", best {best['throughput_samples_per_s']:,.1f} at batch {best['batch_size']}"
        elif best is first and len(thr) > 1:
            text += " (the smallest batch is the fastest)"
        text += f"; {out['gain_vs_smallest']}× from the smallest to the best"
        if knee is not first:
            text += f", within {round(100 * (1 - KNEE_FRACTION))}% of the best from batch {knee['batch_size']} on"
        out["sentences"].append(text + ".")
    for key, label in (("gpu_busy_pct", "GPU busy"), ("sm_occupancy_pct", "SM occupancy"),
                       ("sm_active_pct", "SM active"), ("tensor_active_pct", "tensor active")):
        vals = [r for r in ok if r[key] is not None]
        if len(vals) >= 2:
            out[f"{key}_range"] = [vals[0][key], vals[-1][key]]
            out["sentences"].append(f"{name}: {label} {pct_text(vals[0][key], 0, missing=UNKNOWN)} at batch {vals[0]['batch_size']} → "
                                    f"{pct_text(vals[-1][key], 0, missing=UNKNOWN)} at batch {vals[-1]['batch_size']}.")
    line = memory_line(s["rows"])
    if line is not None:
        out["memory_per_sample_bytes"], out["memory_fixed_bytes"] = round(line[0]), round(line[1])
        out["sentences"].append(f"{name}: peak memory grows {bytes_text(line[0], missing=UNKNOWN)} per sample on top of "
                                f"{bytes_text(max(line[1], 0), missing=UNKNOWN)}.")
    m = s["max_batch"]
    if m and m.get("batch_size") is not None:
        if m.get("limited_by") == "largest_tried":
            out["sentences"].append(f"{name}: every batch tried fits, up to {m['batch_size']}.")
        else:
            if m.get("exact"):
                edge = f"batch {m['batch_size'] + 1} does not"
            elif m.get("bracket") and m["bracket"][1] is not None:
                edge = f"the edge lies below {m['bracket'][1]}"
            else:
                edge = "no larger batch was tried"
            out["sentences"].append(f"{name}: the largest batch that fits is {m['batch_size']} ({edge}; limited by "
                                    f"{m.get('limited_by') or 'nothing seen'}).")
    prof = [r for r in ok if r["profile"] and r["profile"].get("top_kernels")]
    if len(prof) >= 2:
        lo, hi = prof[0], prof[-1]
        a, b = _top_family(lo["profile"]), _top_family(hi["profile"])
        out["bottleneck_shift"] = {"small": {"batch_size": lo["batch_size"], **a},
                                   "large": {"batch_size": hi["batch_size"], **b}}
        same = "stays" if a["family"] == b["family"] else "moves from"
        out["sentences"].append(
            f"{name}: top kernel family {same} {a['family']} ({pct_text(a['pct'], 0, missing=UNKNOWN)}) at batch {lo['batch_size']}"
            + (f" to {b['family']}" if same != "stays" else "") + f" ({pct_text(b['pct'], 0, missing=UNKNOWN)} at batch {hi['batch_size']}).")
    return out


def _top_family(profile: dict[str, Any]) -> dict[str, Any]:
    fams = profile.get("families") or []
    if not fams:
        return {"family": "?", "pct": None}
    f = max(fams, key=lambda f: f.get("pct") or 0)
    return {"family": f.get("family"), "pct": f.get("pct")}


# --- 1. bottlenecks ----------------------------------------------------------------------------------------------
def _pick_series(series: list[dict[str, Any]], precision: str | None = None, mode: str | None = None
                 ) -> dict[str, Any] | None:
    cands = [s for s in series if not s["skipped"] and _ok(s["rows"])]
    if precision is not None:
        cands = [s for s in cands if s["precision"] == precision] or cands
    if mode is not None:
        cands = [s for s in cands if s["mode"] == mode] or cands
    return cands[0] if cands else None


def default_profile(s: dict[str, Any], default_batch: int | None) -> dict[str, Any] | None:
    """The profiled row of ``s`` at (or nearest below, else nearest to) the default batch size."""
    prof = [r for r in _ok(s["rows"]) if r["profile"] and r["profile"]["status"] == "ok"]
    if not prof:
        return None
    if default_batch is None:
        return prof[0]
    below = [r for r in prof if r["batch_size"] <= default_batch]
    return below[-1] if below else min(prof, key=lambda r: abs(r["batch_size"] - default_batch))


def bottleneck_answer(series: list[dict[str, Any]], default_batch: int | None) -> dict[str, Any]:
    """Question 1: kernels and layers that dominate at the default point, with occupancy and bound class."""
    s = _pick_series(series, BASELINE_PRECISION, "train")
    row = default_profile(s, default_batch) if s else None
    if s is None:
        return {"available": False, "sentences": ["No point of the sweep ran: see the batch-size answers for why."]}
    if row is None:
        return {"available": False, "sentences": ["No profiled point: run the sweep with --profile-points default "
                                                  "(the default) to see kernels and layers."]}
    pr = row["profile"]
    kernels = pr.get("top_kernels") or []
    out = {"available": True, "precision": s["precision"], "mode": s["mode"], "batch_size": row["batch_size"],
           "kernels": kernels, "layers": pr.get("layers") or [], "families": pr.get("families") or [],
           "phases_pct": pr.get("phases_pct") or {}, "gpu_busy_pct": pr.get("gpu_busy_pct"),
           "tensor_core_pct": pr.get("tensor_core_pct"), "run_dir": pr.get("run_dir"), "sentences": []}
    where = f"{s['mode']} {s['precision']} batch {row['batch_size']}"
    cpu = False
    if kernels:
        parts = []
        cpu = all(k.get("family") == "cpu op" for k in kernels)
        for k in kernels[:3]:
            bits = [f"{pct_text(k.get('pct'), 0, missing=UNKNOWN)} of {'CPU operator self' if cpu else 'kernel'} time"]
            if k.get("layer"):
                bits.append(f"layer {k['layer']}")
            if k.get("phase"):
                bits.append(k["phase"])
            if k.get("occupancy_pct") is not None:
                bits.append(f"occupancy {pct_text(k['occupancy_pct'], 0, missing=UNKNOWN)} ({k.get('occupancy_source')})")
            if k.get("bound"):
                bits.append(f"{k['bound']}-bound")
            parts.append(f"{k.get('short_name')} ({', '.join(bits)})")
        what = "operators" if cpu else "kernels"
        out["sentences"].append(f"At the default point ({where}) the top {what} are " + "; ".join(parts) + ".")
    if out["layers"]:
        lay = ", ".join(f"{r['name']} {pct_text(r.get('pct'), 0, missing=UNKNOWN)}" for r in out["layers"][:3])
        out["sentences"].append(f"Layers with the most GPU time: {lay}.")
    if out["gpu_busy_pct"] is not None:
        out["sentences"].append(f"The GPU is busy {pct_text(out['gpu_busy_pct'], 0, missing=UNKNOWN)} of the step; tensor-core kernels take "
                                f"{pct_text(out['tensor_core_pct'], 0, missing=UNKNOWN)} of kernel time.")
    if kernels and not cpu and not any(k.get("bound") for k in kernels):
        out["sentences"].append("Bound classes need hardware counters: re-run with --counters.")
    return out


# --- 3. precision ------------------------------------------------------------------------------------------------
def _common_batch(rows_by: dict[str, list[dict[str, Any]]], default_batch: int | None) -> int | None:
    """The default batch when every series ran it, else the largest batch they all ran."""
    sets = [{r["batch_size"] for r in _ok(rows)} for rows in rows_by.values()]
    if not sets:
        return None
    common = set.intersection(*sets)
    if default_batch in common:
        return default_batch
    return max(common) if common else None


def _families(row: dict[str, Any] | None) -> set[str]:
    pr = (row or {}).get("profile") or {}
    return {f["family"] for f in pr.get("families") or [] if (f.get("pct") or 0) >= FAMILY_PRESENT_PCT}


def precision_answer(series: list[dict[str, Any]], default_batch: int | None) -> list[dict[str, Any]]:
    """Question 3, per mode: precisions side by side at a batch they all ran."""
    out = []
    for mode in dict.fromkeys(s["mode"] for s in series):
        ss = [s for s in series if s["mode"] == mode and not s["skipped"] and _ok(s["rows"])]
        skipped = [{"precision": s["precision"], "reason": s["skipped"]} for s in series
                   if s["mode"] == mode and s["skipped"]]
        if not ss:
            out.append({"mode": mode, "rows": [], "skipped": skipped,
                        "sentences": [f"{mode} {sk['precision']}: skipped — {sk['reason']}" for sk in skipped]})
            continue
        base = next((s for s in ss if s["precision"] == BASELINE_PRECISION), ss[0])
        batch = _common_batch({s["precision"]: s["rows"] for s in ss}, default_batch)
        base_row = _at(base["rows"], batch)
        base_prof = default_profile(base, default_batch)
        rows, sentences = [], []
        for s in ss:
            r = _at(s["rows"], batch) or {}
            prof_row = default_profile(s, default_batch)
            fam, base_fam = _families(prof_row), _families(base_prof)
            mb = (s["max_batch"] or {}).get("batch_size")
            bmb = (base["max_batch"] or {}).get("batch_size")
            row = {"precision": s["precision"], "batch_size": batch,
                   "throughput_samples_per_s": r.get("throughput_samples_per_s"),
                   "speedup": _ratio(r.get("throughput_samples_per_s"), (base_row or {}).get("throughput_samples_per_s")),
                   "step_time_ms": r.get("step_time_ms"), "peak_memory_bytes": r.get("peak_memory_bytes"),
                   "memory_ratio": _ratio(r.get("peak_memory_bytes"), (base_row or {}).get("peak_memory_bytes")),
                   "max_batch_size": mb, "max_batch_ratio": _ratio(mb, bmb),
                   "tensor_core_pct": ((prof_row or {}).get("profile") or {}).get("tensor_core_pct"),
                   "tensor_active_pct": r.get("tensor_active_pct"),
                   "families_appeared": sorted(fam - base_fam) if prof_row and base_prof else [],
                   "families_disappeared": sorted(base_fam - fam) if prof_row and base_prof else []}
            rows.append(row)
            if s is base:
                continue
            bits = []
            if row["speedup"] is not None:
                bits.append(f"{row['speedup']}× the throughput of {base['precision']} at batch {batch}")
            if row["memory_ratio"] is not None:
                bits.append(f"{row['memory_ratio']}× the peak memory")
            if row["max_batch_ratio"] is not None:
                bits.append(f"largest batch {mb} ({row['max_batch_ratio']}×)")
            if row["tensor_core_pct"] is not None:
                bits.append(f"tensor-core kernels {pct_text(row['tensor_core_pct'], 0, missing=UNKNOWN)} of kernel time")
            if row["families_appeared"]:
                bits.append("new kernel families: " + _some(row["families_appeared"]))
            if row["families_disappeared"]:
                bits.append("gone: " + _some(row["families_disappeared"]))
            if bits:
                sentences.append(f"{mode} {s['precision']}: " + "; ".join(bits) + ".")
        for sk in skipped:
            sentences.append(f"{mode} {sk['precision']}: skipped — {sk['reason']}")
        out.append({"mode": mode, "baseline": base["precision"], "batch_size": batch, "rows": rows,
                    "skipped": skipped, "sentences": sentences})
    return out


# --- 4. training vs inference ------------------------------------------------------------------------------------
def mode_answer(series: list[dict[str, Any]], default_batch: int | None) -> list[dict[str, Any]]:
    """Question 4, per precision with both modes: forward+backward against forward only."""
    out = []
    for prec in dict.fromkeys(s["precision"] for s in series):
        tr = next((s for s in series if s["precision"] == prec and s["mode"] == "train" and _ok(s["rows"])), None)
        inf = next((s for s in series if s["precision"] == prec and s["mode"] == "infer" and _ok(s["rows"])), None)
        if tr is None or inf is None:
            continue
        batch = _common_batch({"train": tr["rows"], "infer": inf["rows"]}, default_batch)
        rt, ri = _at(tr["rows"], batch) or {}, _at(inf["rows"], batch) or {}
        pt, pi = default_profile(tr, default_batch), default_profile(inf, default_batch)
        fam_t, fam_i = _families(pt), _families(pi)
        side = {}
        for name, r, p, s in (("train", rt, pt, tr), ("infer", ri, pi, inf)):
            pr = (p or {}).get("profile") or {}
            side[name] = {"batch_size": batch, "throughput_samples_per_s": r.get("throughput_samples_per_s"),
                          "step_time_ms": r.get("step_time_ms"), "gpu_busy_pct": r.get("gpu_busy_pct"),
                          "sm_occupancy_pct": r.get("sm_occupancy_pct"), "sm_active_pct": r.get("sm_active_pct"),
                          "peak_memory_bytes": r.get("peak_memory_bytes"),
                          "max_batch_size": (s["max_batch"] or {}).get("batch_size"),
                          "phases_pct": pr.get("phases_pct") or {}, "profiled_batch": (p or {}).get("batch_size"),
                          "top_families": sorted(pr.get("families") or [], key=lambda f: -(f.get("pct") or 0))[:3],
                          "top_kernel": (pr.get("top_kernels") or [{}])[0].get("short_name")}
        row = {"precision": prec, "batch_size": batch, **side,
               "step_time_ratio": _ratio(rt.get("step_time_ms"), ri.get("step_time_ms")),
               "throughput_ratio": _ratio(ri.get("throughput_samples_per_s"), rt.get("throughput_samples_per_s")),
               "families_train_only": sorted(fam_t - fam_i) if pt and pi else [],
               "families_infer_only": sorted(fam_i - fam_t) if pt and pi else []}
        text: list[str] = []
        if row["step_time_ratio"] is not None:
            text.append(f"{prec}: a training step takes {row['step_time_ratio']}× an inference step at batch {batch} "
                     f"(inference runs {row['throughput_ratio']}× the samples/s).")
        ph = side["train"]["phases_pct"]
        if ph:
            text.append(f"{prec} training kernel time: forward {pct_text(ph.get('forward'), 0, missing=UNKNOWN)}, backward "
                     f"{pct_text(ph.get('backward'), 0, missing=UNKNOWN)}, optimizer {pct_text(ph.get('optimizer'), 0, missing=UNKNOWN)}, other {pct_text(ph.get('other'), 0, missing=UNKNOWN)}.")
        for key, label in (("gpu_busy_pct", "GPU busy"), ("sm_occupancy_pct", "SM occupancy")):
            if side["train"][key] is not None and side["infer"][key] is not None:
                text.append(f"{prec} {label}: train {pct_text(side['train'][key], 0, missing=UNKNOWN)}, infer {pct_text(side['infer'][key], 0, missing=UNKNOWN)}.")
        if side["train"]["top_kernel"] and side["infer"]["top_kernel"]:
            text.append(f"{prec} top kernel: train {side['train']['top_kernel']}, infer {side['infer']['top_kernel']}"
                     + (f"; families only in training: {_some(row['families_train_only'])}"
                        if row["families_train_only"] else "") + ".")
        if side["train"]["max_batch_size"] and side["infer"]["max_batch_size"]:
            text.append(f"{prec} largest batch: train {side['train']['max_batch_size']}, infer "
                     f"{side['infer']['max_batch_size']}.")
        row["sentences"] = text
        out.append(row)
    return out


def sweep_report(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``dnnprof.sweep_report/1`` document of a ``dnnprof.sweep/1`` document."""
    series = series_rows(doc)
    default_batch = doc.get("default_batch_size")
    batch = [batch_answer(s) for s in series]
    q1 = bottleneck_answer(series, default_batch)
    q3 = precision_answer(series, default_batch)
    q4 = mode_answer(series, default_batch)
    if not q4:
        q4_sentences = ["Only one mode was swept: add --modes train,infer to compare them."]
    else:
        q4_sentences = [x for r in q4 for x in r["sentences"]]
    return {
        "schema": SCHEMA,
        "sweep": {k: doc.get(k) for k in ("workload", "target", "device", "status", "default_batch_size",
                                          "elapsed_s", "trials_total", "created_at", "updated_at", "messages")},
        "config": doc.get("config") or {},
        "max_batch_size": doc.get("max_batch_size") or [],
        "bottlenecks": q1,
        "batch_size": batch,
        "precision": q3,
        "modes": q4,
        "answers": {
            "bottlenecks": q1["sentences"],
            "batch_size": [x for b in batch for x in b["sentences"]],
            "precision": [x for r in q3 for x in r["sentences"]] or ["Only one precision was swept."],
            "modes": q4_sentences,
        },
    }
