"""Names from a trace are data, never markup or terminal commands.

Kernel, op, layer, file and device names and note texts come from other people's programs and files. Before any of
them reaches a terminal, rich markup or a Markdown report, it goes through one of these functions:

- ``clean``: terminal escape sequences (CSI ``ESC [ … m``, OSC ``ESC ] … BEL``, other ``ESC x``) are removed, every
  other C0/C1 control character and the bidirectional overrides become a space (a newline in a name must not
  break a line or a table row), and runs of spaces they leave are kept as they are.
- ``cell``: a cleaned ``rich.text.Text`` for a table cell (a ``str`` cell would be parsed as markup).
- ``markup``: a cleaned string with rich markup escaped, for the few places that build markup strings.
- ``md``: a cleaned string with Markdown and HTML special characters escaped, for Markdown reports.
- ``xml_text``: a cleaned string with XML special characters escaped, for SVG (XML 1.0 forbids most controls).
- ``clean_doc``: ``clean`` applied to every string of a JSON-like document (keys and values).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

# ESC-introduced sequences first (CSI with parameters, OSC/DCS/APC/PM/SOS strings up to BEL or ST, two-byte
# escapes), the 8-bit CSI/OSC forms, then any control character left on its own.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clear screen
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC (window title, hyperlinks), DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # two-byte escapes (ESC c resets the terminal), or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x9d-\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit DCS/OSC/PM/APC strings
)
# Other C0 controls (tab and newline included: a name is one line), DEL, C1 controls, and the Unicode
# bidirectional overrides/isolates that make text display in an order other than the one it is stored in.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Inline Markdown: emphasis, code spans, links and images (``[``), table cells (``|``), strike-through. The
# characters that matter only at the start of a line (``#``, ``-``, ``>``) never start one: names sit inside a
# table cell or after text of ours.
# An underscore inside a word never starts emphasis in GitHub Markdown: left as it is, kernel names stay readable.
_MD_SPECIAL = re.compile(r"([\\`*{}\[\]|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def clean(value: Any) -> str:
    """``value`` as text fit for a terminal: escape sequences removed, other control characters made spaces."""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():  # fast path: nearly every name is plain
        text = _CONTROLS.sub(" ", _ESCAPES.sub("", text))
    return text


def cell(value: Any, style: str = "") -> Text:
    """A table cell showing ``value`` literally (never parsed as markup)."""
    from rich.text import Text  # imported here: the CLI imports this module at start-up and must stay quick

    return Text(clean(value), style=style)


def markup(value: Any) -> str:
    """``value`` cleaned and with rich markup escaped, to put inside a markup string."""
    from rich.markup import escape

    return escape(clean(value))


def md(value: Any) -> str:
    """``value`` as literal Markdown text: one line, HTML and Markdown special characters escaped."""
    text = clean(value)
    text = "".join(_HTML.get(ch, ch) for ch in text)
    return _MD_SPECIAL.sub(r"\\\1", text)


def xml_text(value: Any) -> str:
    """``value`` as text inside an SVG/XML element or attribute: controls removed, ``<&>"'`` escaped."""
    from html import escape

    return escape(clean(value))


def clean_doc(doc: Any) -> Any:
    """A copy of a JSON-like document with every string (keys too) passed through ``clean``."""
    if isinstance(doc, str):
        return clean(doc)
    if isinstance(doc, dict):
        return {clean(k) if isinstance(k, str) else k: clean_doc(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [clean_doc(v) for v in doc]
    return doc
