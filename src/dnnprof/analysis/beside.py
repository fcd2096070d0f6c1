"""One computation run in a second thread while the caller goes on: the analysis's parts that read the same
profile but not each other's results share the cores (numpy lets go of the interpreter while it sorts and
gathers)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Beside(Generic[T]):
    """``with Beside(fn, *args) as later: … later()``: ``fn(*args)`` runs in another thread from the block's start;
    calling the object waits for its result, or raises its error in the caller's thread. The block never ends while
    the thread runs: when the caller raises first, the thread is waited for (its own error, if any, gives way to
    the caller's). ``fn`` must not intern strings into a profile that the caller interns into meanwhile."""

    def __init__(self, fn: Callable[..., T], *args: Any) -> None:
        self._fn, self._args = fn, args
        self._box: list[tuple[bool, Any]] = []
        self._worker = threading.Thread(target=self._run, name="dnnprof-analysis", daemon=True)

    def _run(self) -> None:
        try:
            self._box.append((True, self._fn(*self._args)))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            self._box.append((False, e))

    def __enter__(self) -> Beside[T]:
        self._worker.start()
        return self

    def __call__(self) -> T:
        self._worker.join()
        ok, value = self._box[0]
        if not ok:
            raise value
        return value

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._worker.join()
