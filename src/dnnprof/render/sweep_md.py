"""Markdown report of a sweep (``dnnprof.sweep_report/1``): the four answers, their tables, links to the plots."""

from __future__ import annotations

from typing import Any

from dnnprof.model.units import bytes_text, fixed_text, pct_text, times_text
from dnnprof.render.safe_text import md

#: An unknown value in a sweep report.
MISSING = "–"


def fmt_num(v: float | None, digits: int = 1) -> str:
    return fixed_text(v, digits, missing=MISSING)


def fmt_pct(share_pct: float | None) -> str:
    return pct_text(share_pct, 0, missing=MISSING)


def fmt_bytes(size_bytes: float | None) -> str:
    return bytes_text(size_bytes, 2, missing=MISSING)


def fmt_x(ratio: float | None) -> str:
    return times_text(ratio, missing=MISSING)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table, followed by a blank line. Cells are text, not Markdown: names from a
    trace (``<script>``, ``[x](javascript:…)``, a newline, a pipe) show literally and keep the table whole."""
    esc = [[md(c) for c in r] for r in rows]
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in esc), ""]


def batch_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["batch", "status", "samples/s", "step ms (median / p90)", "GPU busy", "SM active", "SM occupancy",
              "tensor active", "DRAM bw", "peak memory", "note"]
    out = []
    for r in rows:
        busy = fmt_pct(r.get("gpu_busy_pct"))
        if r.get("gpu_busy_source") == "nvml" and r.get("gpu_busy_pct") is not None:
            busy += " ⁿ"
        step = "–" if r.get("step_time_ms") is None else \
            f"{fmt_num(r['step_time_ms'], 2)} / {fmt_num(r.get('step_time_p90_ms'), 2)}"
        note = "" if r["status"] == "ok" else f"{r.get('limited_by') or ''}: {r.get('message') or ''}"[:90]
        if r.get("profile"):
            note = ("profiled; " + note).rstrip("; ")
        out.append([str(r["batch_size"]), r["status"] or "", fmt_num(r.get("throughput_samples_per_s")), step, busy,
                    fmt_pct(r.get("sm_active_pct")), fmt_pct(r.get("sm_occupancy_pct")),
                    fmt_pct(r.get("tensor_active_pct")), fmt_pct(r.get("dram_bw_util_pct")),
                    fmt_bytes(r.get("peak_memory_bytes")), note])
    return header, out


def kernel_table(kernels: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["kernel", "family", "layer", "phase", "time %", "occupancy", "bound", "tensor core"]
    rows = []
    for k in kernels:
        occ = fmt_pct(k.get("occupancy_pct"))
        if k.get("occupancy_source") and k.get("occupancy_pct") is not None:
            occ += f" ({k['occupancy_source']})"
        rows.append([str(k.get("short_name") or "")[:70], str(k.get("family") or ""), str(k.get("layer") or "")[:40],
                     str(k.get("phase") or ""), fmt_pct(k.get("pct")), occ, str(k.get("bound") or "–"),
                     "yes" if k.get("tensor_core") else ""])
    return header, rows


def render_markdown(report: dict[str, Any], plot_files: dict[str, str] | None = None) -> str:
    """The report as Markdown; ``plot_files`` maps plot names to relative SVG paths to link."""
    sw = report["sweep"]
    dev = sw.get("device") or {}
    cfg = report.get("config") or {}
    lines = [f"# Sweep report: {md(sw.get('workload'))}", "",
             f"Device: {md(dev.get('name') or dev.get('kind'))} ({md(dev.get('kind'))}"
             + (f", {fmt_bytes(dev['memory_bytes'])}" if dev.get("memory_bytes") else "") + ").  ",
             f"Batch sizes {md(cfg.get('batch_sizes'))}, precisions {md(', '.join(cfg.get('precisions') or []))}, "
             f"modes {md(', '.join(cfg.get('modes') or []))}"
             + (f", memory limit {md(cfg['memory_limit'])}" if cfg.get("memory_limit") else "") + ".  ",
             f"Status: {md(sw.get('status'))}; {sw.get('trials_total')} trials; {fmt_num(sw.get('elapsed_s'))} s in the "
             "last run.", ""]
    for m in sw.get("messages") or []:
        lines += [f"> {md(m)}", ""]
    ans = report["answers"]
    lines += ["## Answers", ""]
    for title, key in (("1. Bottleneck kernels and layers", "bottlenecks"), ("2. Batch size", "batch_size"),
                       ("3. Precision", "precision"), ("4. Training vs inference", "modes")):
        lines += [f"**{title}**", "", *(f"- {md(s)}" for s in ans[key]), ""]
    q1 = report["bottlenecks"]
    lines += ["## 1. Bottlenecks at the default point", ""]
    if q1.get("available"):
        lines += [f"{md(q1['mode'])} {md(q1['precision'])}, batch {md(q1['batch_size'])}; run directory "
                  f"{md(q1.get('run_dir'))}.",
                  ""]
        lines += table(*kernel_table(q1["kernels"]))
        if q1.get("layers"):
            lines += table(["layer", "time %", "time (µs)"],
                           [[str(r["name"]), fmt_pct(r.get("pct")), fmt_num(r.get("total_us"))]
                            for r in q1["layers"]])
        if q1.get("phases_pct"):
            lines += ["Kernel time by phase: " + ", ".join(f"{md(k)} {fmt_pct(v)}" for k, v in q1["phases_pct"].items())
                      + ".", ""]
    else:
        lines += [md(s) for s in q1["sentences"]] + [""]
    lines += ["## 2. Batch size", ""]
    for name in ("throughput", "busy", "occupancy", "memory"):
        if plot_files and name in plot_files:
            lines += [f"![{name}]({plot_files[name]})", ""]
    lines += ["ⁿ GPU busy from NVML GPU-Util (share of time a kernel ran) where no profile was taken; otherwise "
              "from the trace.", ""]
    mb = [[f"{m['mode']} {m['precision']}", "–" if m.get("batch_size") is None else str(m["batch_size"]),
           str(m.get("limited_by") or "–"), "yes" if m.get("exact") else "no",
           f"{m.get('trials', '–')} / {m.get('trial_bound', '–')}"] for m in report["max_batch_size"]]
    lines += table(["series", "largest batch that fits", "limited by", "exact (next one fails)",
                    "trials / bound"], mb)
    for b in report["batch_size"]:
        lines += [f"### {md(b['mode'])} {md(b['precision'])}", ""]
        if b["skipped"]:
            lines += [f"Skipped: {md(b['skipped'])}", ""]
            continue
        lines += table(*batch_table(b["rows"]))
    lines += ["## 3. Precision", ""]
    for q in report["precision"]:
        if not q["rows"]:
            continue
        lines += [f"### {md(q['mode'])} (at batch {md(q['batch_size'])}, relative to {md(q['baseline'])})", ""]
        rows = [[r["precision"], fmt_num(r["throughput_samples_per_s"]), fmt_x(r["speedup"]),
                 fmt_num(r["step_time_ms"], 2), fmt_bytes(r["peak_memory_bytes"]), fmt_x(r["memory_ratio"]),
                 str(r["max_batch_size"] or "–"), fmt_pct(r["tensor_core_pct"]),
                 ", ".join(r["families_appeared"]) or "–", ", ".join(r["families_disappeared"]) or "–"]
                for r in q["rows"]]
        lines += table(["precision", "samples/s", "speed-up", "step ms", "peak memory", "memory", "largest batch",
                        "tensor-core time", "families appeared", "families gone"], rows)
        for sk in q["skipped"]:
            lines += [f"- {md(sk['precision'])} skipped: {md(sk['reason'])}"]
        lines += [""] if q["skipped"] else []
    lines += ["## 4. Training vs inference", ""]
    for r in report["modes"]:
        t, i = r["train"], r["infer"]
        lines += [f"### {md(r['precision'])} (batch {md(r['batch_size'])})", ""]
        rows = [[name, fmt_num(x["throughput_samples_per_s"]), fmt_num(x["step_time_ms"], 2),
                 fmt_pct(x["gpu_busy_pct"]), fmt_pct(x["sm_occupancy_pct"]), fmt_bytes(x["peak_memory_bytes"]),
                 str(x["max_batch_size"] or "–"),
                 ", ".join(f"{k} {fmt_pct(v)}" for k, v in x["phases_pct"].items()) or "–",
                 ", ".join(f"{f['family']} {fmt_pct(f.get('pct'))}" for f in x["top_families"]) or "–"]
                for name, x in (("train", t), ("infer", i))]
        lines += table(["mode", "samples/s", "step ms", "GPU busy", "SM occupancy", "peak memory", "largest batch",
                        "kernel time by phase", "top kernel families"], rows)
    if not report["modes"]:
        lines += [md(s) for s in report["answers"]["modes"]] + [""]
    return "\n".join(lines).rstrip() + "\n"
