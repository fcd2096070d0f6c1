"""The dashboard page: served with its assets as files, or written as one self-contained HTML file with the
assets inlined, the data embedded as JSON, and a Content-Security-Policy that allows exactly those inlined scripts
(by their sha256) and no network."""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from importlib import resources
from typing import Any

#: Every file the page loads, in order (package folder ``static/``). The server serves these and nothing else.
STYLES = ["vendor/uPlot.min.css", "app.css"]
SCRIPTS = ["vendor/uPlot.iife.min.js", "core.js", "charts.js", "view_overview.js", "view_kernels.js",
           "view_layers.js", "view_ops.js", "view_timeline.js", "view_memory.js", "view_counters.js",
           "view_ranks.js", "view_findings.js", "view_sweep.js", "view_diff.js", "view_report.js", "main.js"]
ASSETS = [*STYLES, *SCRIPTS]


def asset_bytes(name: str) -> bytes:
    return resources.files("dnnprof.serve").joinpath("static", *name.split("/")).read_bytes()


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _json_script(doc: Any) -> str:
    """JSON for a ``<script type="application/json">``: '<', '>' and '&' escaped, so no string can close it."""
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_BODY = """<header><h1>dnnprof</h1><select id="input-pick" aria-label="input"></select>
<nav id="tabs"></nav></header><main id="view"><p class="muted">Loading…</p></main>"""


def page_html(inline: bool, data: Any = None, report_html: str | None = None) -> str:
    """The page. ``inline``: one self-contained file with ``data`` (see ``data.bundle``) embedded and, when
    given, the printable report (``render.html_report``) as its Report view."""
    head = ['<!doctype html><html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">', "<title>dnnprof view</title>",
            '<link rel="icon" href="data:,">']
    body = [f"<body>{_BODY}"]
    if not inline:
        head += [f'<link rel="stylesheet" href="/static/{s}">' for s in STYLES]
        body += [f'<script src="/static/{s}"></script>' for s in SCRIPTS]
        return "\n".join(head) + "</head>" + "\n".join(body) + "</body></html>\n"
    styles = [asset_bytes(s).decode() for s in STYLES]
    scripts = [asset_bytes(s).decode().replace("</script", "<\\/script") for s in SCRIPTS]
    # Scripts: exactly the inlined ones, by hash. Styles may be inline (the printable report's bars are style
    # attributes; with a hash listed a browser would ignore 'unsafe-inline'); a style cannot run code.
    csp = ("default-src 'none'; script-src " + " ".join(_sha(s) for s in scripts) + "; style-src 'unsafe-inline';"
           " img-src data:; frame-src 'self' about: data:; object-src 'none'; base-uri 'none'; form-action 'none'")
    head.insert(1, f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">')
    head += [f"<style>{s}</style>" for s in styles]
    body.append(f'<script type="application/json" id="dnnprof-data">{_json_script(data)}</script>')
    if report_html is not None:  # the printable report, shown in a sandboxed frame that can run nothing
        body.append(f'<script type="application/json" id="dnnprof-report">{_json_script(report_html)}</script>')
    body += [f"<script>{s}</script>" for s in scripts]
    return "\n".join(head) + "</head>" + "\n".join(body) + "</body></html>\n"
