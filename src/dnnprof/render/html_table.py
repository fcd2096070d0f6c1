"""The one HTML table of dnnprof's pages: every cell is text and is escaped, unless it is :class:`Markup`.

Names in a profile (kernels, layers, ops, paths) come from the traced program and may hold ``<script>`` or a quote
that ends an attribute; a table that trusted its callers would need every caller to remember. Here a plain ``str``
is always escaped, and HTML goes in only when render code wraps what it built from escaped pieces in ``Markup``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape


class Markup(str):
    """HTML that render code built from escaped pieces; :func:`table` puts it in as it is."""

    __slots__ = ()


#: A column heading: its text, or ``(text, numeric)`` where numeric columns align right.
Head = str | tuple[str, bool]


def cell_html(value: str | Markup) -> str:
    """A cell's HTML: ``Markup`` as it is, anything else escaped as text."""
    return value if isinstance(value, Markup) else escape(str(value))


def table(head: Sequence[Head], rows: Iterable[Sequence[str | Markup]]) -> str:
    """``<table>`` with ``head`` and ``rows``; cells of a numeric column get ``class="n"``."""
    cols = [(h, False) if isinstance(h, str) else h for h in head]
    th = "".join(f'<th class="n">{escape(t)}</th>' if num else f"<th>{escape(t)}</th>" for t, num in cols)
    body = []
    for row in rows:
        tds = "".join(f'<td class="n">{cell_html(c)}</td>' if i < len(cols) and cols[i][1] else
                      f"<td>{cell_html(c)}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"
