"""Fit a table to the terminal: number columns keep their full width, names give way, shortened in the middle.

rich shrinks every column of a table that is too wide, numbers included (``1…`` for ``16.78 ms``). Here the
widths are decided before the table is built: columns that are not flexible keep the width of their widest cell,
and the flexible ones (kernel, layer and op names) share what is left by weight, each cut in the middle so that
both the start (the kernel family, the module) and the end (the template arguments, the leaf) stay readable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.cells import cell_len

ELLIPSIS = "…"
#: A name column is never narrower than this, even on the narrowest terminal.
MIN_NAME_WIDTH = 12
#: What a rich table with a box spends per column (two padding spaces and a rule) and once (the closing rule).
_PER_COLUMN, _PER_TABLE = 3, 1


def middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, the middle replaced by one ellipsis ("cutlass_75_te…_tn_align1")."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    head, tail = (keep + 1) // 2, keep // 2
    start = _take(text, head)
    end = _take(text[::-1], tail)[::-1] if tail else ""
    return start + ELLIPSIS + end


def _take(text: str, width: int) -> str:
    out, used = [], 0
    for ch in text:
        w = cell_len(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


def name_widths(header: Sequence[str], rows: Sequence[Sequence[str]], flexible: Mapping[int, int],
                width: int) -> tuple[list[int], dict[int, int]]:
    """Natural width of every column, and the width each flexible column (index → weight) may take in ``width``.

    A flexible column gets at most its natural width; what one does not need goes to the others.
    """
    natural = [max([cell_len(h) for h in (header[i],)] + [cell_len(r[i]) for r in rows]) for i in range(len(header))]
    fixed = sum(w for i, w in enumerate(natural) if i not in flexible)
    room = width - fixed - _PER_COLUMN * len(header) - _PER_TABLE
    give: dict[int, int] = {}
    left = dict(flexible)
    while left:
        total = sum(left.values())
        share = {i: max(MIN_NAME_WIDTH, room * wt // total) for i, wt in left.items()}
        done = {i for i in left if natural[i] <= share[i]}
        if not done:  # every remaining column needs more than its share: cut them all
            give.update(share)
            break
        for i in done:
            give[i] = natural[i]
            room -= natural[i]
            del left[i]
    return natural, give


def fit_rows(header: Sequence[str], rows: Sequence[Sequence[str]], flexible: Mapping[int, int],
             width: int) -> tuple[list[int], list[list[str]]]:
    """(width of every column, rows with the flexible cells cut in the middle) for a table in ``width``."""
    natural, give = name_widths(header, rows, flexible, width)
    cut = [[middle(c, give[i]) if i in give else c for i, c in enumerate(r)] for r in rows]
    return [give.get(i, natural[i]) for i in range(len(header))], cut


def columns_to_drop(header: Sequence[str], rows: Sequence[Sequence[str]], flexible: Mapping[int, int],
                    optional: Sequence[int], width: int, name_room: int) -> list[int]:
    """The optional columns (indices, least important first) to leave out so that the fixed columns leave at
    least ``name_room`` cells to the flexible ones; none on a wide enough terminal."""
    natural = [max([cell_len(header[i])] + [cell_len(r[i]) for r in rows]) for i in range(len(header))]
    drop: list[int] = []

    def room() -> int:
        kept = [i for i in range(len(header)) if i not in drop]
        fixed = sum(natural[i] for i in kept if i not in flexible)
        return width - fixed - _PER_COLUMN * len(kept) - _PER_TABLE

    for i in optional:
        if room() >= name_room:
            break
        drop.append(i)
    return drop
