"""One computation started in a second thread while the caller goes on: the analysis's parts that read the same
profile but not each other's results share the cores (numpy lets go of the interpreter while it sorts and
gathers)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def beside(fn: Callable[..., T], *args: Any, thread: bool = True) -> Callable[[], T]:
    """Start ``fn(*args)`` in another thread; the returned function waits for its result, or raises its error in
    the caller's thread. ``fn`` must not intern strings into a profile that the caller interns into meanwhile.
    ``thread=False``: ``fn`` runs when its result is asked for, in the caller's thread (one after the other, for
    inputs so big that the two computations' memory must not add up)."""
    if not thread:
        return lambda: fn(*args)
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box.append((False, e))

    thread = threading.Thread(target=run, name="dnnprof-analysis", daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    return result
