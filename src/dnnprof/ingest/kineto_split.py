"""Read a big plain-JSON Kineto trace on two cores: this process decodes the first half of the events, a second
process the rest, and the two sets of columns are joined in file order.

The halves meet at an event boundary near the middle of the file. The cut is proven the way
:mod:`~dnnprof.ingest.trace_stream` proves its cuts: this process reads up to the cut, closes the array after it
and decodes the last stretch; JSON's parse state is fixed by the prefix, so a stretch that decodes as whole events
ending at the cut means the cut fell between two events. When that fails, or the second process meets anything
it cannot split, the caller reads the file in one piece, which also words the errors. The columns do not depend on
where events were cut (rows are sorted stably from file order, names interned in the order of the sorted
tables), so the profile is the one-piece reader's, byte for byte.

gzip files are read in one piece: inflating is sequential, and the inflated text of a compressed trace is the
same size as a plain one's.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.ingest.column_spill import SpilledColumns
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.kineto_tables import EventColumns
from dnnprof.ingest.trace_stream import SplitError, read_range, split_events

#: Plain files from this size are read on two cores (below it, starting the second process costs more than it saves).
PARALLEL_MIN_BYTES = 64 << 20

_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_SCAN_BYTES = 1 << 20  # how far from the middle a boundary is looked for
_HEAD = b'{"traceEvents":['

def worth_splitting(path: Path, min_bytes: int = PARALLEL_MIN_BYTES) -> bool:
    """Whether ``path`` is a plain (not gzip) file of at least ``min_bytes`` and a second core is there."""
    try:
        if path.stat().st_size < min_bytes or (os.cpu_count() or 1) < 2:
            return False
        with path.open("rb") as f:
            return f.read(2) != b"\x1f\x8b"
    except OSError:
        return False


def _cut(path: Path, size: int) -> tuple[int, int] | None:
    """(end of the first half: just after an event's '}', start of the second: the next event's '{'), near the
    middle of the file; None when no candidate is found there."""
    mid = size // 2
    with path.open("rb") as f:
        f.seek(mid)
        window = f.read(_SCAN_BYTES)
    m = _SEPARATOR.search(window)
    if m is None:
        return None
    return mid + m.start() + 1, mid + m.end() - 1


def read_in_two(path: Path, decode: Callable[[memoryview, Counter[str]], list[Any]],
                add: Callable[[EventColumns, list[Any]], None], chunk_bytes: int, tally: Counter[str],
                progress: Callable[[int, int], None] | None = None,
                spill: Path | None = None) -> tuple[EventColumns, bytes] | None:
    """Columns of every event and the document without its events, or None when the file does not split here.

    ``decode``/``add`` turn one JSON array of events into columns (the second process uses the same ones, from
    :mod:`dnnprof.ingest.kineto`). ``progress(bytes_done, events)`` is told about both halves as they go. With
    ``spill``, both halves write their columns under that folder rather than keeping them in memory.

    The second half is read by a fresh interpreter (never a fork: the host may run threads, and never
    multiprocessing's spawn, which re-runs the caller's main script); it leaves its columns in a pickle and its
    progress in two int64 of a small shared file, both in a private temporary folder.

    Raises:
        TraceError: unreadable file (from either half).
    """
    size = path.stat().st_size
    cut = _cut(path, size)
    if cut is None:
        return None
    first_end, second_start = cut
    with tempfile.TemporaryDirectory(prefix="dnnprof-split-") as tmp:
        result, shared_path = Path(tmp) / "half.pickle", Path(tmp) / "progress"
        shared_path.write_bytes(bytes(16))
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder holding this dnnprof package
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        with (Path(tmp) / "stderr").open("w+b") as errors:  # a file, not a pipe: a chatty child never blocks
            proc = subprocess.Popen(
                [sys.executable, "-c", "from dnnprof.ingest.kineto_split import second_half_main; second_half_main()",
                 str(path), str(second_start), str(size), str(chunk_bytes), str(result), str(shared_path),
                 "" if spill is None else str(spill / "second")],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)
            try:
                with shared_path.open("r+b") as f, mmap.mmap(f.fileno(), 16) as mm:

                    def theirs() -> tuple[int, int]:  # a copy of the bytes: no view may outlive the map
                        done, events = np.frombuffer(mm[:16], dtype=np.int64).tolist()
                        return done, events

                    first = _first_half(path, first_end, decode, add, chunk_bytes, tally, progress, theirs, proc,
                                        None if spill is None else SpilledColumns(spill / "first"))
                    if first is None:
                        return None
                    proc.wait()
                    if progress is not None:
                        progress(size, theirs()[1] + first[0].events)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            errors.seek(0)
            stderr = errors.read()
        if proc.returncode == _SPLIT_EXIT:
            return None
        if proc.returncode == _ERROR_EXIT:
            raise TraceError(stderr.decode(errors="replace").strip().splitlines()[-1])
        if proc.returncode != 0:
            return None  # the second process died (killed, out of memory): the caller reads the file in one piece
        with result.open("rb") as f:
            later, tail, later_tally = pickle.load(f)
    cols, envelope = first
    cols.extend(later)
    bad_utf8 = tally["bad_utf8"] or later_tally["bad_utf8"]
    tally.update(later_tally)
    if bad_utf8:
        tally["bad_utf8"] = 1
    return cols, envelope[:-1] + tail


class _Columns(EventColumns):
    """EventColumns that count the events added (for progress)."""

    events = 0


def _first_half(path: Path, first_end: int, decode: Callable[[memoryview, Counter[str]], list[Any]],
                add: Callable[[EventColumns, list[Any]], None], chunk_bytes: int, tally: Counter[str],
                progress: Callable[[int, int], None] | None, theirs: Callable[[], tuple[int, int]],
                proc: subprocess.Popen[bytes], spill: SpilledColumns | None) -> tuple[_Columns, bytes] | None:
    cols = _Columns(spill)
    mine = [0]

    def report() -> None:
        if progress is not None:
            done, events = theirs()
            progress(mine[0] + done, cols.events + events)

    def on_read(n: int) -> None:
        mine[0] = n

    def on_chunk(chunk: memoryview) -> None:
        events = decode(chunk, tally)
        add(cols, events)
        cols.events += len(events)
        report()

    try:
        envelope = split_events(chain(read_range(path, 0, first_end, chunk_bytes, on_read), [b"]}"]), on_chunk,
                                chunk_bytes)
    except SplitError:
        return None
    if not envelope.endswith(b"[]}"):  # the events array did not end at this half's closing bracket
        return None
    while progress is not None and proc.poll() is None:
        report()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.1)
    return cols, envelope


_SPLIT_EXIT, _ERROR_EXIT = 3, 4


def second_half_main() -> None:
    """Entry point of the second process: columns of the events from ``start`` to the end of the file, the
    document's text after the events array (``]`` excluded) and the tally, pickled into ``result``; exit status 3
    when the text does not split, 4 with the message on stderr for an unreadable file."""
    import gc

    from dnnprof.ingest.kineto import _add_events, _decode_events

    gc.disable()
    path, start, stop, chunk_bytes, result, shared_path, spill = sys.argv[1:8]
    cols = EventColumns(SpilledColumns(Path(spill)) if spill else None)
    tally: Counter[str] = Counter()
    counts = [0, 0]
    with open(shared_path, "r+b") as f, mmap.mmap(f.fileno(), 16) as mm:

        def on_read(n: int) -> None:
            counts[0] = n

        def on_chunk(chunk: memoryview) -> None:
            events = _decode_events(chunk, tally)
            _add_events(cols, events)
            counts[1] += len(events)
            mm[:16] = np.array(counts, dtype=np.int64).tobytes()

        try:
            envelope = split_events(chain([_HEAD], read_range(Path(path), int(start), int(stop), int(chunk_bytes),
                                                              on_read)), on_chunk, int(chunk_bytes))
        except (SplitError, RecursionError):
            sys.exit(_SPLIT_EXIT)
        except TraceError as e:
            print(e, file=sys.stderr)
            sys.exit(_ERROR_EXIT)
    with open(result, "wb") as out:
        pickle.dump((cols, envelope[len(_HEAD) + 1:], tally), out, protocol=pickle.HIGHEST_PROTOCOL)
