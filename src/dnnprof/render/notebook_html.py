"""A profile's card in a Jupyter notebook (``_repr_html_``): one HTML fragment, no scripts, every name escaped.

Reads a ``dnnprof.summary/1`` document and computes nothing new: the device, the steps, GPU busy, the longest
kernels and layers, the findings' titles. The full report is ``dnnprof.load(path).html(file)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

#: Longest names are cut to this many characters in the card (the full name is in the cell's title).
NAME_CHARS = 90


def _ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:,.2f} ms"


def _name(s: Any) -> str:
    text = str(s or "")
    short = text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 1] + "…"
    return f'<span title="{escape(text)}">{escape(short)}</span>'


def _table(title: str, head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    if not rows:
        return ""
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<h4>{escape(title)}</h4><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def profile_card(doc: dict[str, Any], top: int = 5) -> str:
    """The HTML card of one summary document: its ``top`` kernels, layers and findings."""
    src = doc.get("source") or {}
    dev = doc.get("device") or {}
    steps = doc.get("steps") or {}
    gpu = doc.get("gpu") or {}
    facts = [("device", escape(str(dev.get("name") or "unknown"))),
             ("steps", escape(str(steps.get("count", 0)))),
             ("step time median", _ms(steps.get("median_us"))),
             ("GPU busy", "–" if gpu.get("busy_pct") is None else f"{gpu['busy_pct']:.1f}%")]
    t = doc.get("throughput") or {}
    if t.get("items_per_s"):
        facts.append(("throughput", f"{t['items_per_s']:,.1f} {escape(str(t.get('unit') or 'items/s'))}"))
    head = " · ".join(f"{k}: <b>{v}</b>" for k, v in facts)
    kernels = [(_name(k.get("short_name") or k.get("name")), escape(str(k.get("calls", ""))),
                _ms(k.get("total_us")), f"{k.get('pct') or 0:.1f}%") for k in (doc.get("kernels") or [])[:top]]
    layers = [(_name(r.get("name")), escape(str(r.get("kernel_calls", ""))), _ms(r.get("total_us")),
               f"{r.get('pct') or 0:.1f}%") for r in (doc.get("layers") or [])[:top]]
    findings = [(escape(str(f.get("severity", ""))), _name(f.get("id")), _name(f.get("title")))
                for f in (doc.get("findings") or [])[:top]]
    return (
        '<div class="dnnprof">'
        f"<p><b>dnnprof</b> {_name(src.get('path'))} <small>({escape(str(src.get('format') or ''))})</small></p>"
        f"<p>{head}</p>"
        + _table("Kernels", ("kernel", "calls", "total", "share"), kernels)
        + _table("Layers", ("layer", "kernel calls", "total", "share"), layers)
        + _table("Findings", ("severity", "id", "finding"), findings)
        + "</div>"
    )
