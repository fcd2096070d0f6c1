"""Self-contained HTML report of a sweep: inline CSS and inline SVG charts, no scripts, no network."""

from __future__ import annotations

from html import escape
from typing import Any

from dnnprof.render.html_table import table
from dnnprof.render.sweep_md import batch_table, fmt_bytes, fmt_num, fmt_pct, fmt_x, kernel_table

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}.bad{color:#b00}.muted{color:#777}
.answers li{margin:.2em 0}.plots{display:flex;flex-wrap:wrap;gap:8px}h2{border-bottom:1px solid #ccc}
"""


def render_html(report: dict[str, Any], plots: dict[str, tuple[str, str]] | None = None) -> str:
    """The report as one HTML page; ``plots`` maps names to ``(title, svg)`` and are inlined."""
    sw = report["sweep"]
    dev = sw.get("device") or {}
    cfg = report.get("config") or {}
    h = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Sweep report: {escape(str(sw.get('workload')))}"
         f"</title><style>{_CSS}</style></head><body>",
         f"<h1>Sweep report: {escape(str(sw.get('workload')))}</h1>",
         f"<p>Device: {escape(str(dev.get('name') or dev.get('kind')))} ({escape(str(dev.get('kind')))}"
         + (f", {fmt_bytes(dev['memory_bytes'])}" if dev.get("memory_bytes") else "") + "). "
         f"Batch sizes {escape(str(cfg.get('batch_sizes')))}, precisions {escape(', '.join(cfg.get('precisions') or []))}"
         f", modes {escape(', '.join(cfg.get('modes') or []))}"
         + (f", memory limit {escape(str(cfg['memory_limit']))}" if cfg.get("memory_limit") else "")
         + f". Status {escape(str(sw.get('status')))}, {sw.get('trials_total')} trials.</p>"]
    for m in sw.get("messages") or []:
        h.append(f"<p class='bad'>{escape(m)}</p>")
    h.append("<h2>Answers</h2>")
    for title, key in (("1. Bottleneck kernels and layers", "bottlenecks"), ("2. Batch size", "batch_size"),
                       ("3. Precision", "precision"), ("4. Training vs inference", "modes")):
        items = "".join(f"<li>{escape(s)}</li>" for s in report["answers"][key])
        h.append(f"<h3>{title}</h3><ul class='answers'>{items}</ul>")
    q1 = report["bottlenecks"]
    h.append("<h2>1. Bottlenecks at the default point</h2>")
    if q1.get("available"):
        h.append(f"<p>{escape(q1['mode'])} {escape(q1['precision'])}, batch {q1['batch_size']}.</p>")
        h.append(table(*kernel_table(q1["kernels"])))
        if q1.get("layers"):
            h.append(table(["layer", "time %"], [[str(r["name"]), fmt_pct(r.get("pct"))] for r in q1["layers"]]))
    else:
        h.append(f"<p class='muted'>{escape(' '.join(q1['sentences']))}</p>")
    h.append("<h2>2. Batch size</h2>")
    if plots:
        h.append("<div class='plots'>" + "".join(svg for _, svg in plots.values()) + "</div>")
    mb = [[f"{m['mode']} {m['precision']}", "–" if m.get("batch_size") is None else str(m["batch_size"]),
           str(m.get("limited_by") or "–"), "yes" if m.get("exact") else "no",
           f"{m.get('trials', '–')} / {m.get('trial_bound', '–')}"] for m in report["max_batch_size"]]
    h.append(table(["series", "largest batch that fits", "limited by", "exact", "trials / bound"], mb))
    for b in report["batch_size"]:
        h.append(f"<h3>{escape(b['mode'])} {escape(b['precision'])}</h3>")
        h.append(f"<p class='muted'>Skipped: {escape(b['skipped'])}</p>" if b["skipped"]
                 else table(*batch_table(b["rows"])))
    h.append("<h2>3. Precision</h2>")
    for q in report["precision"]:
        if not q["rows"]:
            continue
        h.append(f"<h3>{escape(q['mode'])} (batch {q['batch_size']}, relative to {escape(q['baseline'])})</h3>")
        h.append(table(["precision", "samples/s", "speed-up", "peak memory", "memory", "largest batch",
                         "tensor-core time", "appeared", "gone"],
                        [[r["precision"], fmt_num(r["throughput_samples_per_s"]), fmt_x(r["speedup"]),
                          fmt_bytes(r["peak_memory_bytes"]), fmt_x(r["memory_ratio"]), str(r["max_batch_size"] or "–"),
                          fmt_pct(r["tensor_core_pct"]), ", ".join(r["families_appeared"]) or "–",
                          ", ".join(r["families_disappeared"]) or "–"] for r in q["rows"]]))
    h.append("<h2>4. Training vs inference</h2>")
    for r in report["modes"]:
        h.append(f"<h3>{escape(r['precision'])} (batch {r['batch_size']})</h3>")
        h.append(table(["mode", "samples/s", "step ms", "GPU busy", "SM occupancy", "peak memory", "phases"],
                        [[name, fmt_num(x["throughput_samples_per_s"]), fmt_num(x["step_time_ms"], 2),
                          fmt_pct(x["gpu_busy_pct"]), fmt_pct(x["sm_occupancy_pct"]), fmt_bytes(x["peak_memory_bytes"]),
                          ", ".join(f"{k} {fmt_pct(v)}" for k, v in x["phases_pct"].items()) or "–"]
                         for name, x in (("train", r["train"]), ("infer", r["infer"]))]))
    h.append("</body></html>")
    return "\n".join(h) + "\n"
