"""A progress bar on stderr while a big trace is read: bytes read, events decoded, elapsed time, rate.

Shown only when stderr is a terminal, not with ``--quiet``, and only once reading has taken
:data:`DELAY_S` (a small trace finishes without one). Drawn by rich; it is transient, so the report that
follows starts on a clean line.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from dnnprof.ingest.progress import listening

#: Seconds of reading before the bar appears.
DELAY_S = 1.0


@contextlib.contextmanager
def reading_progress(quiet: bool = False, stream: IO[str] | None = None, terminal: bool | None = None,
                     delay_s: float = DELAY_S, clock: Any = time.monotonic) -> Iterator[None]:
    """Show a progress bar for the readers running inside the block.

    Args:
        quiet: never show one.
        stream: where to draw (default: stderr).
        terminal: whether ``stream`` is a terminal (default: ask it; tests force it).
        delay_s: reading time before the bar appears.
        clock: monotonic seconds (tests pass a fake one).
    """
    stream = sys.stderr if stream is None else stream
    is_tty = stream.isatty() if terminal is None else terminal
    if quiet or not is_tty:
        yield
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    bar = Progress(TextColumn("reading {task.description}"), BarColumn(), DownloadColumn(),
                   TextColumn("{task.fields[events]:,} events"), TimeElapsedColumn(), TransferSpeedColumn(),
                   console=Console(file=stream, force_terminal=True), transient=True)
    start = clock()
    tasks: dict[Path, Any] = {}

    def listener(path: Path, done: int, total: int, events: int) -> None:
        if not tasks and clock() - start < delay_s:
            return
        if not tasks:
            bar.start()
        if path not in tasks:
            tasks[path] = bar.add_task(path.name, total=total or None, events=0)
        bar.update(tasks[path], completed=done, events=events)

    try:
        with listening(listener):
            yield
    finally:
        if tasks:
            bar.stop()
