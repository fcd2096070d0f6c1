"""Self-contained HTML reports: no scripts, no network, one file.

:func:`render_html` reads a ``dnnprof.summary/1`` document (``dnnprof analyze TRACE --html report.html``),
:func:`render_counters_html` a ``dnnprof.counters/1`` one (``dnnprof analyze ncu.csv --html report.html``); both
inline the roofline SVG when the document has a ``roofline``. They compute nothing new.
"""

from __future__ import annotations

from html import escape
from typing import Any

from dnnprof.model.units import pct_text, rate_text, us_text
from dnnprof.render.evidence import evidence_items, gain_text, offenders
from dnnprof.render.html_table import Markup, table
from dnnprof.render.roofline_svg import PRECISION_LABELS, roofline_svg
from dnnprof.render.terminal import straggler_text, unreliable

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2433;max-width:1400px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d8dee9}
.meta{color:#5c6578} .cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #d8dee9;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px} table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid #eceff4;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums} code{font-size:12px}
.bar{background:#5e81ac;height:10px;display:inline-block;vertical-align:middle}
.f{border:1px solid #d8dee9;border-left:6px solid #88c0d0;border-radius:6px;padding:10px 14px;margin:10px 0}
.f.high{border-left-color:#bf616a} .f.medium{border-left-color:#d08770} .f.low{border-left-color:#a3be8c}
.f h3{margin:0 0 6px;font-size:15px} .fix{color:#2e6b3a} .how{color:#5c6578;font-size:12px}
.bad{color:#bf616a} .chart{margin:8px 0;overflow-x:auto} .chart svg{max-width:100%;height:auto}
"""


def _us_text(time_us: float | None) -> str:
    return us_text(time_us, missing="–")


def _pct(share_pct: float | None) -> str:
    return pct_text(share_pct, missing="–")


def _bar(pct: float | None) -> str:
    w = 0 if pct is None else max(1, min(120, round(pct * 1.2)))
    return f'<span class="bar" style="width:{w}px"></span> {_pct(pct)}'


def _cards(doc: dict[str, Any]) -> str:
    gpu, steps = doc["gpu"], doc["steps"]
    busy = _pct(gpu.get("busy_pct")) + (" (unreliable)" if unreliable(doc, "gpu.busy_pct") else "")
    items = [("GPU busy", busy), ("steps", str(steps["count"])),
             ("median step", _us_text(steps.get("median_us"))), ("step CV", _pct(steps.get("cv_pct"))),
             ("tensor cores", _pct(gpu.get("tensor_core_pct"))), ("GPU idle", _us_text(gpu.get("idle_us")))]
    if gpu.get("collectives_only_us"):
        items.append(("collectives alone", _pct(gpu.get("collectives_only_pct"))))
    return '<div class="cards">' + "".join(f'<div class="card">{escape(k)}<b>{escape(v)}</b></div>'
                                           for k, v in items) + "</div>"


def _findings(doc: dict[str, Any]) -> str:
    out = []
    for f in doc.get("findings", []):
        ev = f.get("evidence") or {}
        gain = "" if f.get("est_gain_pct") is None else f" — {_gain(f['est_gain_pct'])}"
        lines = offenders(ev)
        listed = "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul>" if lines else ""
        numbers = evidence_items(ev)
        numbers_html = f'<div class="how">evidence: {escape(" · ".join(numbers))}</div>' if numbers else ""
        summary = str(ev.get("summary") or "") if isinstance(ev, dict) else ""
        out.append(
            f'<div class="f {escape(f["severity"])}"><h3>{escape(f["title"])} <code>{escape(f["id"])}</code>'
            f'<span class="meta"> · {escape(f["severity"])}{escape(gain)}</span></h3>'
            + (f"<div>{escape(summary)}</div>" if summary else "") + listed + numbers_html
            + (f'<div class="bad">withheld, not a recommendation: {escape(f["unreliable"])}</div>'
               if f.get("unreliable") else f'<div class="fix">→ {escape(f["recommendation"])}</div>')
            + (f'<div class="how">{escape(f["how_estimated"])}</div>' if f.get("how_estimated") else "") + "</div>")
    return "".join(out) or "<p>No findings.</p>"


def _checks(doc: dict[str, Any]) -> str:
    """The broken self-checks, one line each ("" when all hold)."""
    broken = [c for c in doc.get("checks") or [] if not c.get("ok")]
    if not broken:
        return ""
    return ("<h2>Checks broken</h2><p class=\"meta\">Numbers resting on them are marked unreliable.</p><ul>"
            + "".join(f'<li class="bad"><code>{escape(c["id"])}</code>: {escape(c["detail"])}</li>' for c in broken)
            + "</ul>")


def _gain(g: float) -> str:
    """``up to 12% of step time``, or "no measurable gain"."""
    text = gain_text(g)
    return f"up to {text.lstrip('≤')} of step time" if text.startswith("≤") else text


def render_html(doc: dict[str, Any], top: int = 30) -> str:
    """The report as one HTML string."""
    dev = doc["device"]
    title = f"dnnprof — {dev.get('name') or 'CPU'}"
    gpu = doc["gpu"]
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>",
             f'<div class="meta">{escape(doc["source"].get("path", ""))} ({escape(doc["source"].get("format", ""))})'
             f" · compute capability {escape(dev.get('compute_capability') or '–')} · steps from "
             f"{escape(doc['steps'].get('source') or 'none')}</div>",
             *(f'<div class="meta">note: {escape(n)}</div>' for n in doc["source"].get("notes") or []), _cards(doc),
             _checks(doc)]
    if gpu.get("has_activity", True) and doc["kernels"]:
        idle = gpu.get("idle_breakdown_us") or {}
        parts.append("<h2>GPU time</h2>" + table(
            [("part", False), ("time", True)],
            [[k, _us_text(gpu.get(f"{k}_us"))] for k in ("kernel", "memcpy", "memset", "idle")]
            + [[f"idle: {k.replace('_', ' ')}", _us_text(v)] for k, v in idle.items() if v]))
    parts.append("<h2>Findings</h2>" + _findings(doc))
    if doc["kernels"]:
        parts.append(f"<h2>Top kernels (of {len(doc['kernels'])})</h2>" + table(
            [("time %", True), ("total", True), ("calls", True), ("avg", True), ("family", False), ("TC", False),
             ("occupancy", True), ("bound", False), ("phase", False), ("layer", False), ("kernel", False)],
            [[Markup(_bar(k["pct"])), _us_text(k["total_us"]), f"{k['calls']:,}",
                   _us_text(k["mean_us"]), k["family"], "✓" if k.get("tensor_core") else "",
                   _pct(k.get("theoretical_occupancy_pct", k.get("est_achieved_occupancy_pct"))),
                   k.get("bound") or "", k["phase"], k["layer"],
                   Markup(f'<code title="{escape(k["name"])}">{escape(k["short_name"])}</code>')]
             for k in doc["kernels"][:top]]))
    if doc.get("roofline"):
        parts.append(roofline_section(doc["roofline"], top=min(top, 15)))
    if doc["kernels"]:
        parts.append(f"<h2>Layers ({escape(doc.get('attribution', {}).get('level', ''))} level)</h2>" + table(
            [("time %", True), ("total", True), ("kernels", True), ("layer", False)],
            [[Markup(_bar(r["pct"])), _us_text(r["total_us"]), f"{r['kernel_calls']:,}",
                   r["name"]] for r in doc["layers"][:top]]))
        ph = doc["phases"]
        bad = unreliable(doc, "phases")
        parts.append(f"<h2>Phases{escape(' — ' + bad if bad else '')}</h2>" + table([("phase", False), ("kernel time", True)],
                                                [[p, _us_text(ph[f"{p}_us"])]
                                                 for p in ("forward", "backward", "optimizer", "other")]))
    if doc.get("ranks"):
        r = doc["ranks"]
        parts.append(f"<h2>Ranks ({r['count']})</h2>"
                     f'<div class="meta">slowest rank {r["slowest_rank"]}, {escape(straggler_text(r))}, '
                     f"step spread {_pct(r['step_median_spread_pct'])}</div>" + table(
            [("rank", True), ("GPU", True), ("steps", True), ("step (median)", True), ("busy", True),
             ("compute/step", True), ("NCCL/step", True), ("exposed NCCL/step", True)],
            [[str(x["rank"]), str(x["device"]), str(x["steps"]),
                   _us_text(x["step_median_us"]), _pct(x["busy_pct"]), _us_text(x["compute_us_per_step"]),
                   _us_text(x["nccl_us_per_step"]), _us_text(x["exposed_nccl_us_per_step"])]
             for x in r["per_rank"]]))
    if doc.get("memcpy"):
        parts.append("<h2>Memory copies</h2>" + table(
            [("kind", False), ("host memory", False), ("count", True), ("bytes", True), ("total", True)],
            [[m["kind"], m.get("host_memory") or "–", f"{m['count']:,}",
                   f"{m['bytes']:,}", _us_text(m["total_us"])] for m in doc["memcpy"]]))
    if doc.get("host_ops"):
        parts.append("<h2>Host ops (self time)</h2>" + table(
            [("self %", True), ("self", True), ("total", True), ("calls", True), ("op", False)],
            [[Markup(_bar(r["self_pct"])), _us_text(r["self_us"]), _us_text(r["total_us"]),
                   f"{r['calls']:,}", r["name"]] for r in doc["host_ops"][:top]]))
    parts.append("</body></html>\n")
    return "".join(parts)


def _rate(value_per_s: float | None, unit: str) -> str:
    return rate_text(value_per_s, unit, missing="–")


def _sig(v: float | None) -> str:
    return "–" if v is None else f"{v:,.3g}"


def roofline_section(roof: dict[str, Any], top: int = 15) -> str:
    """The roofline chart, its ceilings and the heaviest kernels' places on it."""
    c = roof["ceilings"]
    ceil_rows = [["DRAM", _rate(c.get("dram_bytes_per_s"), "B/s"), "",
                       c.get("dram_source") or "–", ""]]
    ceil_rows += [[PRECISION_LABELS.get(p, p), _rate(v["peak_flops_per_s"], "FLOP/s"),
                        _sig(v.get("ridge_flops_per_byte")), v.get("source") or "–",
                        str(v.get("kernels", 0))] for p, v in c["compute"].items()]
    excluded = roof.get("excluded") or {}
    counted = roof.get("counted_gpu_time_pct")
    note = (f"{roof.get('plotted', 0)} kernels plotted; {excluded.get('no_flops', 0)} without FLOPs, "
            f"{excluded.get('no_dram_bytes', 0)} without DRAM bytes and {excluded.get('no_time', 0)} without time "
            "are listed below but cannot sit on log axes. Time from "
            f"{'the trace' if roof.get('time_source') == 'trace' else 'Nsight Compute'}"
            + (f"; the kernels with counters take {counted:.1f}% of the GPU time of the counted step(s)."
               if counted is not None and roof.get("time_source") == "trace" else "."))
    rows = [[Markup(_bar(k.get("time_pct"))), _sig(k.get("arithmetic_intensity")),
                  _rate(k.get("achieved_flops_per_s"), "FLOP/s"),
                  PRECISION_LABELS.get(k.get("dominant_precision") or "", "–"),
                  _pct(k.get("pct_of_roof")), k.get("limiting_roof") or "–",
                  k.get("bound") or "–",
                  Markup(f'<code title="{escape(k["name"])}">{escape(k["short_name"])}</code>'
                   + (f' <span class="meta">({escape(k["excluded"].replace("_", " "))})</span>'
                      if k.get("excluded") else ""))]
            for k in roof["kernels"][:top]]
    svg = roofline_svg(roof).replace(' xmlns="http://www.w3.org/2000/svg"', "", 1)  # inline SVG needs no namespace
    return ("<h2>Roofline</h2>" + f'<div class="chart">{svg}</div>'
            + f'<p class="meta">{escape(note)}</p>'
            + table([("ceiling", False), ("peak", True), ("ridge FLOP/B", True), ("source", False),
                      ("kernels", True)], ceil_rows)
            + f"<h3>Kernels on the roofline (top {min(top, len(roof['kernels']))} of {len(roof['kernels'])})</h3>"
            + table([("time %", True), ("FLOP/B", True), ("achieved", True), ("precision", False),
                      ("of roof", True), ("roof", False), ("bound", False), ("kernel", False)], rows))


def render_counters_html(doc: dict[str, Any], top: int = 30) -> str:
    """The page of an Nsight Compute file analysed on its own (a ``dnnprof.counters/1`` document)."""
    roof = doc.get("roofline") or {}
    title = f"dnnprof — Nsight Compute counters{' — ' + roof['device'] if roof.get('device') else ''}"
    shares = ", ".join(f"{escape(b)} {v:.0f}%" for b, v in doc.get("bound_share_pct", {}).items())
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>",
             f'<div class="meta">{escape(doc["source"].get("path", ""))} · {doc["launches"]} launches of '
             f"{len(doc['kernels'])} kernels · time by bound class: {shares or '–'}</div>"]
    if roof:
        parts.append(roofline_section(roof, top=min(top, 15)))
    parts.append(f"<h2>Kernels (of {len(doc['kernels'])})</h2>" + table(
        [("time %", True), ("total", True), ("launches", True), ("SM %", True), ("Mem %", True),
         ("ach. occ.", True), ("waves", True), ("DRAM B/launch", True), ("FLOP/launch", True), ("FLOP/B", True),
         ("bound", False), ("kernel", False)],
        [[Markup(_bar(k["pct"])), _us_text(k["total_us"]), f"{k['launches']:,}",
               _pct(k.get("sm_throughput_pct")), _pct(k.get("memory_throughput_pct")),
               _pct(k.get("achieved_occupancy_pct")), _sig(k.get("waves_per_sm")),
               _sig(k.get("dram_bytes")), _sig(k.get("flops")),
               _sig(k.get("arithmetic_intensity")), k.get("bound") or "–",
               Markup(f'<code title="{escape(k["name"])}">{escape(k["short_name"])}</code>')]
         for k in doc["kernels"][:top]]))
    parts.append("</body></html>\n")
    return "".join(parts)
