"""Read a big plain-JSON Kineto trace on several cores: the file is cut into segments of whole events, this
process and a few helper processes take the segments in turn, and the columns are joined in file order.

Segments are taken from a shared counter, so the processes finish within about one segment's time of each other
whatever each core's speed or start-up lag. Cuts sit at event boundary candidates (an event's ``}``, a comma and
the next ``{``) and are proven the way :mod:`~dnnprof.ingest.trace_stream` proves its cuts: a segment is read as
``[`` + its text + ``]`` and must decode as whole events ending exactly at its end. JSON's parse state is fixed by
the prefix, so when the first segment (which starts at the file's start) decodes that way its end is a true
boundary, so the next segment starts at one, and so on to the last. When any segment fails, or a helper meets
anything it cannot split, the caller reads the file in one piece, which also words the errors. The columns do not
depend on where events were cut (rows are sorted stably from file order, names interned in the order of the sorted
tables), so the profile is the one-piece reader's, byte for byte.

gzip files are read in one piece: inflating is sequential, and the inflated text of a compressed trace is the
same size as a plain one's.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.ingest.column_spill import SpilledColumns
from dnnprof.ingest.errors import TraceError
from dnnprof.ingest.kineto_tables import EventColumns
from dnnprof.ingest.trace_stream import SplitError, read_range, split_events

try:
    import fcntl
except ImportError:  # not POSIX: no shared counter, every file is read in one piece
    fcntl = None  # type: ignore[assignment]

#: Plain files from this size are read by several processes (below it, starting another costs more than it saves).
PARALLEL_MIN_BYTES = 64 << 20
#: Most processes one read uses, this one included (each helper holds ~40 MB; its columns go to disk).
MAX_WORKERS = 8
#: The smallest segment's text: the processes end within about its time (~0.1 s) of each other.
SEGMENT_BYTES = 8 << 20
#: The environment variable that sets how many processes a big read may use (1: one piece).
WORKERS_ENV = "DNNPROF_READ_WORKERS"

_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_SCAN_BYTES = 1 << 20  # how far from a segment's nominal start a boundary is looked for
_HEAD = b'{"traceEvents":['
_EMPTY = _HEAD + b"]}"  # what a middle segment's text leaves once its events are taken out
_BOARD = struct.Struct("<qq")  # (next segment to take, failed); then (bytes done, events) per process


def read_workers() -> int:
    """Processes a big read may use: the cores this process may run on, at most :data:`MAX_WORKERS`, or what
    ``DNNPROF_READ_WORKERS`` says (at least 1)."""
    given = os.environ.get(WORKERS_ENV, "").strip()
    if given:
        try:
            return max(1, int(given))
        except ValueError:
            raise TraceError(f"{WORKERS_ENV}={given!r}: give a whole number of processes (1 reads in one piece)") \
                from None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def worth_splitting(path: Path, min_bytes: int = PARALLEL_MIN_BYTES, workers: int | None = None) -> bool:
    """Whether ``path`` is a plain (not gzip) file of at least ``min_bytes`` and a second process may help."""
    try:
        if path.stat().st_size < min_bytes or fcntl is None:
            return False
        if (read_workers() if workers is None else workers) < 2:
            return False
        with path.open("rb") as f:
            return f.read(2) != b"\x1f\x8b"
    except OSError:
        return False


def cut_points(size: int, workers: int, smallest: int = SEGMENT_BYTES) -> list[int]:
    """Nominal starts of the segments after the first: each segment is 1/(2·workers) of the text left after the
    ones before it, and at least ``smallest`` bytes (guided self-scheduling). The big early segments keep the number
    of segments (and of their joins) small; the small late ones let the processes end together."""
    cuts, at = [], 0
    while True:
        at += max(smallest, (size - at) // (2 * workers), 1)
        if at >= size:
            return cuts
        cuts.append(at)


def segments(path: Path, size: int, nominal: list[int]) -> list[tuple[int, int]]:
    """(start, end) byte ranges covering the file, cut near the ``nominal`` positions: the first starts at 0, the
    last ends at ``size``, each other end lies just after an event candidate's ``}`` and the next start on the
    following ``{``. A nominal cut with no candidate near it is dropped (one range: the file does not split)."""
    cuts: list[tuple[int, int]] = []
    with path.open("rb") as f:
        for at in nominal:
            if cuts and at < cuts[-1][1]:
                at = cuts[-1][1]
            f.seek(at)
            m = _SEPARATOR.search(f.read(_SCAN_BYTES))
            if m is not None:
                cuts.append((at + m.start() + 1, at + m.end() - 1))
    starts = [0] + [b for _, b in cuts]
    ends = [a for a, _ in cuts] + [size]
    return list(zip(starts, ends, strict=True))


class _Board:
    """A small file the processes share: the next segment to take and a failure flag (changed under a lock), and
    each process's progress."""

    def __init__(self, path: Path, workers: int, create: bool = False) -> None:
        if create:
            path.write_bytes(bytes(_BOARD.size + 16 * workers))
        self._fd = os.open(path, os.O_RDWR)
        self.workers = workers

    def close(self) -> None:
        os.close(self._fd)

    def take(self, count: int) -> int | None:
        """The next segment's index, or None when all are taken or a process failed."""
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            nxt, failed = _BOARD.unpack(os.pread(self._fd, _BOARD.size, 0))
            if failed or nxt >= count:
                return None
            os.pwrite(self._fd, _BOARD.pack(nxt + 1, failed), 0)
            return int(nxt)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def fail(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            nxt, _ = _BOARD.unpack(os.pread(self._fd, _BOARD.size, 0))
            os.pwrite(self._fd, _BOARD.pack(nxt, 1), 0)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def report(self, worker: int, done: int, events: int) -> None:
        os.pwrite(self._fd, struct.pack("<qq", done, events), _BOARD.size + 16 * worker)

    def progress(self) -> tuple[int, int]:
        """(bytes, events) of all processes together."""
        raw = os.pread(self._fd, 16 * self.workers, _BOARD.size)
        both = np.frombuffer(raw, dtype="<i8").reshape(-1, 2).sum(axis=0)
        return int(both[0]), int(both[1])


class _Columns(EventColumns):
    """EventColumns that count the events added (for progress)."""

    events = 0


#: One segment's result: its columns, its document text (the first segment's holds the head of the document, the
#: last one's the text after the events array), its tally.
_Part = tuple[_Columns, bytes, Counter]


def _work(path: Path, ranges: list[tuple[int, int]], board: _Board, worker: int,
          decode: Callable[[memoryview, Counter[str]], list[Any]], add: Callable[[EventColumns, list[Any]], None],
          chunk_bytes: int, spill: Path | None,
          on_progress: Callable[[], None] | None = None) -> dict[int, _Part] | None:
    """Read the segments this process takes until none is left: {index: part}, or None when one of them does not
    split (the board then tells the others to stop)."""
    parts: dict[int, _Part] = {}
    before = [0, 0]  # bytes and events of this process's finished segments

    while (i := board.take(len(ranges))) is not None:
        start, end = ranges[i]
        last = i == len(ranges) - 1
        cols = _Columns(None if spill is None else SpilledColumns(spill / f"segment{i}"))
        tally: Counter[str] = Counter()
        read = [0]

        def on_read(n: int, read: list[int] = read) -> None:
            read[0] = n

        def on_chunk(chunk: memoryview, cols: _Columns = cols, tally: Counter[str] = tally,
                     read: list[int] = read) -> None:
            events = decode(chunk, tally)
            add(cols, events)
            cols.events += len(events)
            board.report(worker, before[0] + read[0], before[1] + cols.events)
            if on_progress is not None:
                on_progress()

        pieces: Iterator[bytes] = read_range(path, start, end, chunk_bytes, on_read)
        if i > 0:
            pieces = chain([_HEAD], pieces)
        if not last:
            pieces = chain(pieces, [b"]}"])
        try:
            text = split_events(pieces, on_chunk, chunk_bytes)
        except SplitError:
            board.fail()
            return None
        if i > 0 and last:
            ok = text.startswith(_HEAD[:-1] + b"[]")
            text = text[len(_HEAD) + 1:]
        else:  # the events array must end at the "]" put after this segment (then "}" is all that is left)
            ok = text == _EMPTY if i > 0 else text.endswith(b"[]}")
        if not ok:
            board.fail()
            return None
        parts[i] = (cols, text, tally)
        before[0] += end - start
        before[1] += cols.events
    return parts


def read_in_parallel(path: Path, decode: Callable[[memoryview, Counter[str]], list[Any]],
                     add: Callable[[EventColumns, list[Any]], None], chunk_bytes: int, tally: Counter[str],
                     progress: Callable[[int, int], None] | None = None, spill: Path | None = None,
                     workers: int | None = None,
                     segment_bytes: int | None = None) -> tuple[EventColumns, bytes] | None:
    """Columns of every event and the document without its events, or None when the file does not split here.

    ``decode``/``add`` turn one JSON array of events into columns (the helpers use the same ones, from
    :mod:`dnnprof.ingest.kineto`). ``progress(bytes_done, events)`` is told about all processes as they go. With
    ``spill``, every segment's columns go under that folder rather than into memory. ``workers``: processes in
    all, this one included (default :func:`read_workers`); ``segment_bytes``: the smallest segment (default
    :data:`SEGMENT_BYTES`).

    The helpers are fresh interpreters (never a fork: the host may run threads, and never multiprocessing's
    spawn, which re-runs the caller's main script); each leaves its segments' columns in a pickle, in a private
    temporary folder.

    Raises:
        TraceError: unreadable file (from any process).
    """
    size = path.stat().st_size
    workers = read_workers() if workers is None else workers
    ranges = segments(path, size, cut_points(size, workers, SEGMENT_BYTES if segment_bytes is None else segment_bytes))
    workers = min(workers, len(ranges))
    if workers < 2:
        return None
    with tempfile.TemporaryDirectory(prefix="dnnprof-split-") as tmp:
        folder = Path(tmp)
        board = _Board(folder / "board", workers, create=True)
        np.save(folder / "ranges.npy", np.array(ranges, dtype=np.int64))
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder holding this dnnprof package
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"  # a helper only decodes: no BLAS thread pool spinning beside it
        procs: list[tuple[subprocess.Popen[bytes], Any]] = []
        try:
            with contextlib.ExitStack() as stack:
                stack.callback(board.close)
                for w in range(1, workers):
                    errors = stack.enter_context((folder / f"stderr{w}").open("w+b"))  # a file: never blocks
                    procs.append((subprocess.Popen(
                        [sys.executable, "-c", "from dnnprof.ingest.kineto_split import helper_main; helper_main()",
                         str(path), str(folder), str(w), str(workers), str(chunk_bytes),
                         "" if spill is None else str(spill)],
                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors), errors))

                def report() -> None:
                    if progress is not None:
                        progress(*board.progress())

                mine = _work(path, ranges, board, 0, decode, add, chunk_bytes, spill,
                             report if progress is not None else None)
                if mine is None:
                    return None
                for proc, _ in procs:
                    while proc.poll() is None:
                        report()
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(0.1)
                if progress is not None:
                    progress(size, board.progress()[1])
                parts = dict(mine)
                for w, (proc, errors) in enumerate(procs, 1):
                    if proc.returncode == _ERROR_EXIT:
                        errors.seek(0)
                        raise TraceError(errors.read().decode(errors="replace").strip().splitlines()[-1])
                    if proc.returncode != 0:
                        return None  # did not split, or died (killed, out of memory): read in one piece
                    with (folder / f"parts{w}.pickle").open("rb") as f:
                        parts.update(pickle.load(f))
        finally:
            for proc, _ in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    if sorted(parts) != list(range(len(ranges))):
        return None
    text = parts[0][1][:-1] + parts[len(ranges) - 1][1]  # the head, "[]", the text after the events array
    cols = parts[0][0]
    bad_utf8 = False
    for i in range(len(ranges)):
        part_cols, _, part_tally = parts.pop(i)
        if i:
            cols.extend(part_cols)
        bad_utf8 |= bool(part_tally["bad_utf8"])
        tally.update(part_tally)
    if bad_utf8:
        tally["bad_utf8"] = 1
    return cols, text


_SPLIT_EXIT, _ERROR_EXIT = 3, 4


def helper_main() -> None:
    """Entry point of a helper process: read segments until none is left, then pickle {index: part} into the
    folder's ``parts<N>.pickle``; exit status 3 when a segment does not split, 4 with the message on stderr for an
    unreadable file."""
    import gc

    from dnnprof.ingest.kineto import _add_events, _decode_events

    gc.disable()
    path, folder, worker, workers, chunk_bytes, spill = sys.argv[1:7]
    ranges = [(int(a), int(b)) for a, b in np.load(Path(folder) / "ranges.npy").tolist()]
    board = _Board(Path(folder) / "board", int(workers))
    try:
        parts = _work(Path(path), ranges, board, int(worker), _decode_events, _add_events, int(chunk_bytes),
                      Path(spill) if spill else None)
    except RecursionError:
        board.fail()
        sys.exit(_SPLIT_EXIT)
    except TraceError as e:
        board.fail()
        print(e, file=sys.stderr)
        sys.exit(_ERROR_EXIT)
    if parts is None:
        sys.exit(_SPLIT_EXIT)
    with (Path(folder) / f"parts{worker}.pickle").open("wb") as out:
        pickle.dump(parts, out, protocol=pickle.HIGHEST_PROTOCOL)
