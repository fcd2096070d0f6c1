"""Where a reader reports how far it got: bytes read and events decoded, to whoever listens.

Readers call :func:`report` as they go; a command that shows a progress bar installs a listener with
:func:`listening` around the read. Nothing listens by default (the call then costs one lookup). Kept out of the
readers' signatures so that every path to a reader (a trace, a run directory, a folder of ranks) reports alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

#: listener(path, bytes_done, bytes_total, events): bytes of the file read so far (compressed bytes for gzip).
Listener = Callable[[Path, int, int, int], None]

_LISTENER: ContextVar[Listener | None] = ContextVar("dnnprof_ingest_progress", default=None)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every reader's progress to ``listener`` inside the block."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def current() -> Listener | None:
    """The listener installed now, or None."""
    return _LISTENER.get()
