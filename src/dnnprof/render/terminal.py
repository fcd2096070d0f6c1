"""Terminal report of a ``dnnprof.summary/1`` document (rich). Reads the summary; computes nothing new."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dnnprof.model.device import VENDOR_NAMES
from dnnprof.model.units import bytes_text, pct_text, us_text
from dnnprof.render.evidence import gain_text, offenders
from dnnprof.render.fit import columns_to_drop, fit_rows
from dnnprof.render.safe_text import cell, clean_doc, markup

__all__ = ["bytes_text", "pct_text", "render", "straggler_text", "us_text"]

_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def _add_row(t: Table, *cells: Any) -> None:
    """A row whose text cells show literally: a ``str`` cell would be parsed as rich markup."""
    t.add_row(*(c if isinstance(c, Text) else cell(c) for c in cells))


def _rank_text(doc: dict[str, Any]) -> str:
    """", rank 34 of 300" when the report is of one rank of a distributed job (or of a rank other than 0)."""
    rank, world = doc.get("rank"), doc.get("world_size")
    if rank is None or (rank == 0 and not (world and world > 1)):
        return ""
    return f", rank {rank}" + (f" of {world}" if world else "")


def _header(doc: dict[str, Any]) -> Panel:
    dev, steps, gpu = doc["device"], doc["steps"], doc["gpu"]
    lines = Text()
    vendor = dev.get("vendor") or ""
    cpu_only = not gpu.get("has_activity", True) and not gpu.get("activity_note")
    words = VENDOR_NAMES.get(vendor, vendor)
    name = dev.get("name") or ("CPU (no GPU in this profile)" if cpu_only and not vendor
                               else f"{words} {'accelerator' if vendor == 'meta' else 'GPU'} (no device properties "
                                    "in the trace)" if vendor else "unknown device")
    if vendor and vendor != "nvidia" and words.split()[0].lower() not in name.lower():
        name = f"{words} {name}"  # "ARTEMIS" → "Meta MTIA ARTEMIS"
    cc = dev.get("compute_capability")
    # sm_XY is NVIDIA's spelling; ROCm reports a gfx major.minor in the same fields
    cc_text = "" if not cc else f" (sm_{cc.replace('.', '')})" if vendor in ("", "nvidia") else f" (compute {cc})"
    lines.append(f"{name}{cc_text}", style="bold")
    if isinstance(dev.get("sm_count"), int) and dev["sm_count"] > 0:
        lines.append(f", {dev['sm_count']} {'CUs' if vendor == 'amd' else 'SMs'}")
    if isinstance(dev.get("memory_bytes"), int) and dev["memory_bytes"] > 0:
        lines.append(f", {bytes_text(dev['memory_bytes'])}")
    lines.append(f"\nsource: {doc['source'].get('path', '')} ({doc['source'].get('format', '')}){_rank_text(doc)}\n")
    for note in doc["source"].get("notes") or []:
        lines.append(f"note: {note}\n", style="yellow")
    if steps["count"]:
        cv = f", CV {steps['cv_pct']:.1f}%" if steps.get("cv_pct") is not None else ""
        cv += f" ({unreliable(doc, 'steps.median_us')})" if unreliable(doc, "steps.median_us") else ""
        lines.append(f"steps: {steps['count']} ({steps.get('source', '')}), mean {us_text(steps['mean_us'])}, "
                     f"median {us_text(steps.get('median_us'))}{cv}\n")
    else:
        lines.append("steps: none found — the whole trace is one window\n", style="yellow")
    if doc.get("serving"):
        lines.append(_serving_text(doc["serving"]) + "\n")
    if not gpu.get("has_activity", True):
        lines.append(gpu.get("activity_note") or "no GPU activity in this trace (CPU-only profile)", style="yellow")
        return Panel(lines, title="dnnprof", expand=False)
    lines.append(f"GPU busy {pct_text(gpu['busy_pct'])}", style="bold")
    if unreliable(doc, "gpu.busy_pct"):
        lines.append(f" ({unreliable(doc, 'gpu.busy_pct')})", style="bold red")
    lines.append(f" of {us_text(gpu['window_us'])}: kernels {us_text(gpu['kernel_us'])}, memcpy {us_text(gpu['memcpy_us'])}, "
                 f"memset {us_text(gpu['memset_us'])}, idle {us_text(gpu['idle_us'])}\n")
    if gpu.get("work_negligible") and gpu.get("busy_of_host_pct") is not None:
        share = gpu["busy_of_host_pct"]
        lines.append(f"the GPU worked {us_text(gpu['kernel_us'] + gpu['memcpy_us'] + gpu['memset_us'])} in "
                     f"{us_text(gpu.get('host_us'))} of host time ({'< 0.01' if share < 0.01 else f'{share:.2f}'}%): "
                     "busy % covers that work alone; kernel and precision findings are left out\n", style="yellow")
    idle = gpu.get("idle_breakdown_us") or {}
    if gpu.get("idle_us"):
        parts = ", ".join(f"{k.replace('_', ' ')} {us_text(v)}" for k, v in sorted(idle.items(), key=lambda kv: -kv[1])
                          if v)
        lines.append(f"idle because: {parts}\n")
    if gpu.get("collectives_only_us"):
        lines.append(f"collectives alone (transfer, or waiting for other ranks): {us_text(gpu['collectives_only_us'])}, "
                     f"{pct_text(gpu.get('collectives_only_pct'))} of the window\n")
    tc = f"{pct_text(gpu.get('tensor_core_pct'))} of kernel time" if vendor in ("", "nvidia") \
        else f"not applicable on {words} devices"
    lines.append(f"tensor cores: {tc}; "
                 f"attribution: {doc.get('attribution', {}).get('level', '?')} level, "
                 f"{pct_text(doc.get('attribution', {}).get('attributed_pct'))} of kernel time")
    return Panel(lines, title="dnnprof", expand=False)


def _serving_text(s: dict[str, Any]) -> str:
    """One line of the serving section: prefill, decode and the time per output token with its split."""
    def ms(x: float | None) -> str:
        return us_text(None if x is None else 1000.0 * x)

    pre = s.get("prefill")
    dec = s["decode"]
    text = "serving loop: "
    if pre:
        text += f"prefill {pre['iterations']}x, median {ms(pre['median_ms'])}; "
    text += (f"decode {dec['iterations']}x, {ms(s['time_per_output_token_ms'])} per output token "
             f"({s.get('decode_tokens_per_s')} tokens/s per sequence)")
    b = s.get("time_per_output_token_breakdown_ms")
    if b:
        text += (f": compute {ms(b['compute_ms'])}, communication {ms(b['communication_ms'])}, "
                 f"idle {ms(b['idle_ms'])}")
    return text


def _fitted(title: Any, columns: list[tuple[str, str]], rows: list[list[str]], flexible: dict[int, int],
            width: int, optional: tuple[int, ...] = (), name_room: int = 0) -> Table:
    """A table whose number columns keep their full width and whose name columns (index → weight) are cut in the
    middle to fit ``width`` cells (full names are in --json). On a narrow terminal the ``optional`` columns
    (least important first) are left out until the names have ``name_room`` cells."""
    drop = columns_to_drop([c for c, _ in columns], rows, flexible, optional, width, name_room)
    if drop:
        keep = [i for i in range(len(columns)) if i not in drop]
        flexible = {keep.index(i): w for i, w in flexible.items()}
        columns = [columns[i] for i in keep]
        rows = [[r[i] for i in keep] for r in rows]
    header = [c for c, _ in columns]
    widths, cut = fit_rows(header, rows, flexible, width)
    t = Table(title=title, title_justify="left", expand=False)
    for (col, just), w in zip(columns, widths, strict=True):
        t.add_column(col, justify=just, no_wrap=True, min_width=w, max_width=w,
                     overflow="ellipsis")
    for r in cut:
        _add_row(t, *r)
    return t


def _kernels(doc: dict[str, Any], top: int, width: int) -> Table:
    occ_key = "theoretical_occupancy_pct" if any("theoretical_occupancy_pct" in k for k in doc["kernels"]) \
        else "est_achieved_occupancy_pct"
    columns = [("Time %", "right"), ("Total", "right"), ("Calls", "right"), ("Avg", "right"), ("Max", "right"),
               ("Family", "left"), ("TC", "center"), ("Occ." if occ_key.startswith("theo") else "Est.occ", "right"),
               ("Phase", "left"), ("Layer", "left"), ("Kernel", "left")]
    counters = any(k.get("bound") or k.get("sm_throughput_pct") is not None for k in doc["kernels"])
    if counters:  # Nsight Compute speed of light, for the kernels that have counters
        columns = [*columns[:8], ("SM %", "right"), ("Mem %", "right"), ("Bound", "left"), *columns[8:]]
    nvidia = (doc.get("device") or {}).get("vendor") in (None, "", "nvidia")

    def tc_mark(k: dict[str, Any]) -> str:  # tensor cores are read from NVIDIA kernel names only
        return ("✓" if k.get("tensor_core") else "") if nvidia else "-"

    rows = []
    for k in doc["kernels"][:top]:
        cells = [pct_text(k["pct"]), us_text(k["total_us"]), f"{k['calls']:,}", us_text(k["mean_us"]),
                 us_text(k["max_us"]), k["family"], tc_mark(k), pct_text(k.get(occ_key))]
        if counters:
            cells += [pct_text(k.get("sm_throughput_pct")), pct_text(k.get("memory_throughput_pct")),
                      k.get("bound") or "-"]
        rows.append([*cells, k["phase"], k["layer"] or "-", k["short_name"]])
    n = len(columns)
    names = {c: i for i, (c, _) in enumerate(columns)}
    # Left out first on a narrow terminal: what the JSON and the wider views still show.
    optional = tuple(names[c] for c in ("Max", "TC", "Bound", "Mem %", "SM %", "Family", "Calls",
                                                 "Occ.", "Est.occ", "Avg") if c in names)
    return _fitted(f"Top kernels (of {len(doc['kernels'])} distinct)", columns, rows, {n - 2: 1, n - 1: 2}, width,
                   optional, name_room=60)


def _memory_events(m: dict[str, Any]) -> str:
    """One line on the allocator events of a --full window."""
    def where(d: dict[str, Any]) -> str:
        dev = d.get("device")
        return f"{d.get('device_type') or '?'}" + (f":{dev}" if isinstance(dev, int) and dev >= 0 else "")

    per = "; ".join(f"{where(d)} peak {bytes_text(d.get('peak_total_allocated_bytes'))} allocated, "
                    f"{bytes_text(d.get('peak_total_reserved_bytes'))} reserved" for d in m.get("devices", []))
    big = (m.get("largest_allocations") or [{}])[0]
    where = f" (largest {bytes_text(big.get('bytes'))} by {big.get('op') or '?'})" if big.get("bytes") else ""
    return (f"memory events: {m['events']:,} ({m['allocations']:,} allocations, {bytes_text(m['allocated_bytes'])}; "
            f"{m['frees']:,} frees){where}; {per}")


def _groups(title: str, rows: list[dict[str, Any]], key: str, top: int, calls_key: str, width: int) -> Table:
    columns = [("Time %", "right"), ("Total", "right"), ("Kernels", "right"), ("Name", "left")]
    cells = [[pct_text(r["pct"]), us_text(r["total_us"]), f"{r[calls_key]:,}", str(r[key])] for r in rows[:top]]
    return _fitted(markup(title), columns, cells, {3: 1}, width)


def _phases(doc: dict[str, Any]) -> Table:
    ph = doc["phases"]
    total = sum(ph.values()) or 1.0
    bad = unreliable(doc, "phases")
    t = Table(title=markup("Phases (kernel time)" + (f" — {bad}" if bad else "")), title_justify="left", expand=False)
    for name in ("forward", "backward", "optimizer", "other"):
        t.add_column(name, justify="right")
    _add_row(t, *(f"{us_text(ph[f'{n}_us'])} ({100 * ph[f'{n}_us'] / total:.0f}%)"
                for n in ("forward", "backward", "optimizer", "other")))
    return t


def _memcpy(doc: dict[str, Any]) -> Table:
    t = Table(title="Memory copies", title_justify="left", expand=False)
    for col in ("Kind", "Host memory", "Count", "Bytes", "Total"):
        t.add_column(col, justify="right" if col in ("Count", "Bytes", "Total") else "left")
    for m in doc["memcpy"]:
        _add_row(t, m["kind"], m.get("host_memory") or "-", f"{m['count']:,}", bytes_text(m["bytes"]), us_text(m["total_us"]))
    return t


def _host_ops(doc: dict[str, Any], top: int, width: int) -> Table:
    columns = [("Self %", "right"), ("Self", "right"), ("Total", "right"), ("Calls", "right"), ("Op", "left")]
    rows = [[pct_text(r["self_pct"]), us_text(r["self_us"]), us_text(r["total_us"]), f"{r['calls']:,}", r["name"]]
            for r in doc["host_ops"][:top]]
    return _fitted("Top host ops (self time on the CPU)", columns, rows, {4: 1}, width)


def _findings(doc: dict[str, Any]) -> Table:
    t = Table(title="Findings (ranked by expected gain)", title_justify="left", expand=False, show_lines=True)
    t.add_column("Severity", no_wrap=True)
    t.add_column("Gain", justify="right", no_wrap=True)
    t.add_column("Finding", overflow="fold", max_width=110)
    for f in doc["findings"]:
        body = Text(f"{f['title']}  [{f['id']}]", style="bold")
        ev = f.get("evidence") or {}
        if isinstance(ev, dict) and ev.get("summary"):
            body.append(f"\n{ev['summary']}")
        worst = offenders(ev, 1)
        if worst:
            body.append("\nworst: " + worst[0], style="dim")
        if f.get("unreliable"):  # rests on a broken self-check: no recommendation
            body.append(f"\nwithheld, not a recommendation: {f['unreliable']}", style="red")
        else:
            body.append(f"\n→ {f['recommendation']}", style="green")
        if f.get("how_estimated"):
            body.append(f"\ngain estimate: {f['how_estimated']}", style="dim")
        gain = f.get("est_gain_pct")
        if gain is not None and gain <= 0:
            body.append(f"\n{gain_text(gain)} in this profile", style="dim")
        _add_row(t, Text(f["severity"], style=_SEVERITY_STYLE.get(f["severity"], "")), gain_text(gain, short=True),
                  body)
    return t


def straggler_text(r: dict[str, Any]) -> str:
    """"straggler 1 (the others wait 32.4 ms/step for it)", "no straggler" …, from ``summary.ranks``."""
    if r.get("straggler_rank") is None:
        return "no straggler"
    wait = r.get("straggler_wait_us_per_step")
    return f"straggler {r['straggler_rank']}" + (f" (the others wait {us_text(wait)}/step for it)" if wait else "")


def _ranks(r: dict[str, Any]) -> Table:
    t = Table(title=f"Ranks ({r['count']}): slowest {r['slowest_rank']}, {straggler_text(r)}, step "
                    f"spread {pct_text(r['step_median_spread_pct'])}", title_justify="left")
    for col in ("Rank", "GPU", "Steps", "Step (median)", "Busy", "Compute/step", "NCCL/step", "Exposed NCCL/step"):
        t.add_column(col, justify="right")
    for x in r["per_rank"]:
        _add_row(t, str(x["rank"]), str(x["device"]), str(x["steps"]), us_text(x["step_median_us"]),
                  pct_text(x["busy_pct"]), us_text(x["compute_us_per_step"]), us_text(x["nccl_us_per_step"]),
                  us_text(x["exposed_nccl_us_per_step"]))
    return t


def _collectives(c: dict[str, Any], top: int) -> Table:
    """Per (collective, group, size): how often, how long the ranks waited for the last one, the transfer after."""
    t = Table(title=f"Collectives across ranks ({c['instances']} matched by {c['matched_by'].replace('_', ' ')}, "
                    f"{c['unmatched']} unmatched): waiting {us_text(c['wait_us_total'])} in all",
              title_justify="left")
    for col in ("Collective", "Group", "Size", "Count", "Wait (total)", "Wait (max)", "Transfer (mean)", "Last"):
        t.add_column(col, justify="left" if col in ("Collective", "Group") else "right")
    for k in c["by_collective"][:top]:
        last = ", ".join(f"rank {r} ×{n}" for r, n in k["last_rank_counts"].items()) or "-"
        _add_row(t, k["name"], k["pg_name"] or "-", bytes_text(k["size_bytes"] if k["size_bytes"] >= 0 else None),
                 str(k["count"]), us_text(k["wait_us_total"]), us_text(k["wait_us_max"]),
                 us_text(k["transfer_us_mean"]), last)
    return t


def unreliable(doc: dict[str, Any], key: str) -> str:
    """"unreliable: check step-windows" when a broken self-check says ``key`` (``gpu.busy_pct``, ``phases``,
    ``finding:gpu-idle``) rests on it, else ""."""
    broken = [c["id"] for c in doc.get("checks") or [] if not c.get("ok") and key in (c.get("affects") or [])]
    return f"unreliable: check {', '.join(broken)}" if broken else ""


def _checks(doc: dict[str, Any]) -> Text | None:
    """One line per broken self-check (nothing when all hold)."""
    broken = [c for c in doc.get("checks") or [] if not c.get("ok")]
    if not broken:
        return None
    out = Text("Checks broken (numbers resting on them are marked unreliable)\n", style="bold red")
    for c in broken:
        out.append(f"✗ {c['id']}: {c['detail']}\n", style="red")
    return out


def render(doc: dict[str, Any], console: Console | None = None, top: int = 15) -> None:
    """Print the report of a summary document. Every string of ``doc`` is shown literally (no markup, no control
    characters): names come from other people's traces."""
    doc = clean_doc(doc)
    if console is None:
        console = Console()
        if not console.is_terminal:  # pipes and CI logs: no 80-column squeeze
            console.width = max(console.width, 180)
    width = console.width
    parts: list[Any] = [_header(doc)]
    checks = _checks(doc)
    if checks is not None:
        parts.append(checks)
    if not doc["kernels"] and doc.get("host_ops"):
        parts.append(_host_ops(doc, top, width))
    if doc["kernels"]:
        parts.append(_kernels(doc, top, width))
        if doc.get("layers"):
            parts.append(_groups(f"Top layers ({doc.get('attribution', {}).get('level', '')} level)",
                                 doc["layers"], "name", top, "kernel_calls", width))
        if doc.get("families"):
            parts.append(_groups("Kernel families", doc["families"], "family", top, "calls", width))
        parts.append(_phases(doc))
    if doc["memcpy"]:
        parts.append(_memcpy(doc))
    if doc["kernels"] and doc.get("host_ops"):
        parts.append(_host_ops(doc, min(top, 8), width))
    if doc.get("roofline"):
        from dnnprof.render.counters_table import roofline_line

        parts.append(Text(roofline_line(doc["roofline"])))
    if doc.get("memory_events"):
        parts.append(Text(_memory_events(doc["memory_events"])))
    if doc.get("ranks"):
        parts.append(_ranks(doc["ranks"]))
    if doc.get("collectives"):
        parts.append(_collectives(doc["collectives"], min(top, 8)))
    if doc.get("findings"):
        parts.append(_findings(doc))
    console.print(Group(*parts))
