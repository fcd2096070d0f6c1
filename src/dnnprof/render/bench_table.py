"""``dnnprof bench``'s table: one row per backend × batch size, then the reasons, diagnoses and knees."""

from __future__ import annotations

from typing import Any

from dnnprof.model.units import number_text
from dnnprof.render.safe_text import clean

HEADER = ["backend", "batch", "status", "samples/s", "tokens/s", "p50 ms", "p90 ms", "p99 ms", "mean ms",
          "H2D ms", "compute ms", "D2H ms", "enqueue ms", "CV %"]


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def _num(v: float | None) -> str:
    return "-" if v is None else number_text(round(v, 1) if v >= 100 else v)


def rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in doc["results"]:
        lat = r.get("latency_ms") or {}
        out.append([r["backend"], str(r["batch_size"]), r["status"], _num(r["throughput_samples_per_s"]),
                    _num(r.get("throughput_tokens_per_s")), _ms(lat.get("p50")), _ms(lat.get("p90")),
                    _ms(lat.get("p99")), _ms(lat.get("mean")), _ms(r["h2d_ms"]), _ms(r.get("compute_ms")),
                    _ms(r["d2h_ms"]), _ms(r["enqueue_ms"]),
                    "-" if r["cv_pct"] is None else f"{r['cv_pct']:.3g}"])
    return out


def visible(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows without the columns that are empty in every row (H2D/D2H/enqueue on a CPU, tokens/s)."""
    body = rows(doc)
    mean, compute = HEADER.index("mean ms"), HEADER.index("compute ms")
    same = all(r[compute] == r[mean] for r in body)  # on a CPU the call is the compute: one column says it
    keep = [i for i, _ in enumerate(HEADER) if i < 3 or (any(r[i] != "-" for r in body) and
                                                        not (same and i == compute))]
    return [HEADER[i] for i in keep], [[r[i] for i in keep] for r in body]


def notes(doc: dict[str, Any]) -> list[str]:
    """Sentences under the table: why a backend was skipped, failed or wrong; diagnoses; knees; run dirs."""
    lines = []
    for r in doc["results"]:
        where = f"{r['backend']} batch {r['batch_size']}"
        if r["status"] != "ok" and r["reason"]:
            lines.append(f"{where}: {r['status']}: {r['reason']}")
        for d in r["diagnoses"]:
            lines.append(f"{where}: {d['message']}")
        if r.get("profile_run_dir"):
            lines.append(f"{where}: profiled in {r['profile_run_dir']}")
    for k in doc.get("knee") or []:
        lines.append(f"{k['backend']}: batch-size knee at {k['knee_batch_size']} "
                     f"({_num(k['knee_throughput_samples_per_s'])} samples/s, p50 {_ms(k['knee_latency_p50_ms'])} "
                     f"ms); best {_num(k['best_throughput_samples_per_s'])} samples/s at batch "
                     f"{k['best_batch_size']}")
    return lines


def title(doc: dict[str, Any]) -> str:
    dev = doc["device"]
    return f"dnnprof bench: {doc['workload']} ({doc.get('precision', '')}) on {dev.get('name', dev.get('type'))}"


def print_table(doc: dict[str, Any], console: Any = None) -> None:
    """The report on the terminal (rich)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=clean(title(doc)), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    header, body = visible(doc)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 3 else "right", no_wrap=True)
    style = {"ok": "", "skipped": "dim", "error": "red", "wrong": "bold red"}
    for r, row in zip(doc["results"], body, strict=False):
        table.add_row(*[clean(c) for c in row], style=style.get(r["status"], ""))
    console.print(table)
    for line in notes(doc):
        console.print(clean(line), markup=False, highlight=False)


def markdown(doc: dict[str, Any]) -> str:
    """The same report as a Markdown table with its notes below."""
    header, body = visible(doc)
    lines = [f"### {title(doc)}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    extra = notes(doc)
    if extra:
        lines += [""] + [f"- {n}" for n in extra]
    return "\n".join(lines) + "\n"
