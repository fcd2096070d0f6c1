"""Stream a Chrome-trace JSON document as JSON arrays of whole events, while it is read and gunzipped.

A 40 MB trace then never sits in memory as one buffer, nor as one list of decoded events: the caller decodes
each array of a few thousand events, keeps compact columns and drops the events before the next one.

Event boundaries are found cheaply (an event's closing ``}`` followed by ``,`` and the next ``{``) and proven
by the decoder rather than trusted: JSON is parsed left to right with a state fixed by the prefix, so when
``[`` + a stretch of the ``traceEvents`` array + ``]`` decodes, the stretch ended exactly between two elements of
that array. When the cut was wrong (a ``}, {`` inside an event's nested objects) the stretch fails to decode and
another cut is tried. The rest of the document (everything but the events) is checked the same way: it must
decode with an empty ``traceEvents`` array in place, the key must sit at the top level and appear once. Any
document that does not fit this shape raises :class:`SplitError`; the caller then decodes the whole buffer,
which also produces the precise error message for files that are not valid traces.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from dnnprof.ingest.errors import TraceError

#: Decoded text per chunk: large enough that per-chunk overheads vanish, small enough that the text and its
#: decoded events stay in a core's cache (256-768 KiB measured fastest on a 512 KiB-L2 EPYC; 2 MiB is 50% slower).
CHUNK_BYTES = 1 << 19

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\s*,\s*\{")  # after an event's closing brace: the comma and the next event's opening
_CUT_TRIES = 4  # cut candidates tried (right to left) before a stretch is declared unsplittable
_END_TRIES = 16  # candidates for the array's closing bracket


class SplitError(Exception):
    """The document does not have the shape the splitter handles; decode the whole buffer instead."""


def read_pieces(path: Path, piece_bytes: int = CHUNK_BYTES,
                on_read: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The file's bytes in pieces of about ``piece_bytes``, gunzipped when the file is gzip (by magic number).

    ``on_read(n)`` is told, before each piece, how many bytes of the file (compressed ones for gzip) lie behind it.

    Raises:
        TraceError: unreadable file, corrupt or truncated gzip (the messages of a one-shot read).
    """
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    with f:
        try:
            head = f.read(2)
            if head != b"\x1f\x8b":
                yield head
                done = len(head)
                while piece := f.read(piece_bytes):
                    done += len(piece)
                    if on_read is not None:
                        on_read(done)
                    yield piece
                return
            raw = head + f.read()
        except OSError as e:
            raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    yield from _inflate(path, raw, piece_bytes, on_read)


def read_range(path: Path, start: int, stop: int, piece_bytes: int = CHUNK_BYTES,
               on_read: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Bytes ``start:stop`` of a plain (not gzip) file in pieces; ``on_read`` as in :func:`read_pieces`, counted
    from ``start``."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            pos = start
            while pos < stop and (piece := f.read(min(piece_bytes, stop - pos))):
                pos += len(piece)
                if on_read is not None:
                    on_read(pos - start)
                yield piece
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def _inflate(path: Path, raw: bytes, piece_bytes: int,
             on_read: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Inflate one gzip member in bounded pieces; data after its end is ignored, like a one-shot inflate."""
    d = zlib.decompressobj(31)  # wbits 31: gzip framing
    view = memoryview(raw)
    step = max(piece_bytes // 16, 1 << 12)  # compressed bytes per call (traces compress ~20x)
    pos = 0
    try:
        while not d.eof:
            if d.unconsumed_tail:
                data: bytes | memoryview = d.unconsumed_tail
            elif pos < len(raw):
                data, pos = view[pos:pos + step], pos + step
            else:
                data = b""  # drain what zlib still holds
            out = d.decompress(data, piece_bytes)
            if out:
                if on_read is not None:
                    on_read(min(pos, len(raw)))
                yield out
            elif not data:
                break
    except zlib.error as e:
        raise TraceError(f"{path}: corrupt gzip ({e})") from None
    if not d.eof:
        raise TraceError(f"{path}: truncated gzip (the file ends before the compressed data does)")


def split_events(pieces: Iterator[bytes], on_chunk: Callable[[memoryview], None],
                 chunk_bytes: int = CHUNK_BYTES) -> bytes:
    """Feed ``on_chunk`` the ``traceEvents`` array as JSON arrays of whole events, in order.

    Args:
        pieces: the document's bytes, in pieces of any size.
        on_chunk: decodes one array (``b"[...]"``, a view valid during the call); raises
            ``msgspec.DecodeError`` when it is not valid JSON (the cut was wrong), and must then leave no trace
            of the attempt.
        chunk_bytes: text per array, about.

    Returns:
        The document with an empty ``traceEvents`` array in place of the events (``{"traceEvents":[]}`` for a
        bare array of events), checked to be valid JSON.

    Raises:
        SplitError: the document does not have the expected shape, or a stretch of events does not decode.
    """
    it = iter(pieces)
    buf = b""
    head = None
    close = b""  # what the document lacks after its last byte to be an object
    for piece in it:
        buf += piece
        lead = buf.lstrip()
        if not lead:
            continue
        if lead[:1] == b"[":  # the Chrome trace format also allows a bare array of events
            head, close, buf = b'{"traceEvents":', b"}", buf[len(buf) - len(lead) + 1:]
            break
        if lead[:1] != b"{":
            raise SplitError("not a JSON object")
        m = _KEY.search(buf)
        if m:
            head, buf = buf[:m.end() - 1], buf[m.end():]
            break
    if head is None:
        raise SplitError("no traceEvents array")
    _check_json(head + b"[]}", "traceEvents is not a top-level key")

    # buf always starts with the '[' of the next array: cuts write ']' and '[' over separators in place, so
    # the text is copied once (into buf), never sliced into new bytes objects.
    buf = bytearray(b"[") + buf
    for piece in it:
        buf += piece
        while len(buf) >= chunk_bytes and _emit(buf, on_chunk, chunk_bytes):
            pass
    return head + b"[]" + _emit_last(buf, on_chunk, head, close) + close


def _decode_view(buf: bytearray, end: int, on_chunk: Callable[[memoryview], None]) -> None:
    """on_chunk(buf[:end]) without a copy; the views are released even when on_chunk raises (a traceback
    that still holds one must not pin buf's size)."""
    whole = memoryview(buf)
    view = whole[:end]
    try:
        on_chunk(view)
    finally:
        view.release()
        whole.release()


def _boundaries(buf: bytearray, size: int) -> Iterator[tuple[int, re.Match[bytes]]]:
    """Cut candidates (an event's closing brace, the separator after it): from ``size`` leftwards, then beyond
    ``size`` rightwards (an event longer than ``size``)."""
    i = buf.rfind(b"}", 1, size)
    while i >= 0:
        if m := _SEPARATOR.match(buf, i + 1):
            yield i, m
        i = buf.rfind(b"}", 1, i)
    i = buf.find(b"}", size)
    while i >= 0:
        if m := _SEPARATOR.match(buf, i + 1):
            yield i, m
        i = buf.find(b"}", i + 1)


def _emit(buf: bytearray, on_chunk: Callable[[memoryview], None], size: int) -> bool:
    """Decode the whole events in about the first ``size`` bytes of ``buf`` and remove them from ``buf``.

    Returns False when ``buf`` holds no event boundary yet (one event longer than what was read).
    """
    for tries, (i, m) in enumerate(_boundaries(buf, size)):
        if tries == _CUT_TRIES:
            break
        saved, buf[i + 1] = buf[i + 1], 0x5D  # ']' over the first byte of the separator
        try:
            _decode_view(buf, i + 2, on_chunk)
        except msgspec.DecodeError:
            buf[i + 1] = saved  # a brace inside an event: try another one
            continue
        start = m.end() - 1  # the next event's '{'; the byte before it is still part of the separator
        buf[start - 1] = 0x5B  # '['
        del buf[:start - 1]
        return True
    else:
        return False
    raise SplitError("no event boundary decodes")


def _emit_last(buf: bytearray, on_chunk: Callable[[memoryview], None], head: bytes, close: bytes) -> bytes:
    """The events up to the array's closing bracket; returns the text after it."""
    end = len(buf)
    for _ in range(_END_TRIES):
        j = buf.rfind(b"]", 1, end)
        if j < 0:
            break
        end, tail = j, bytes(buf[j + 1:])
        if b'"traceEvents"' in tail or not _is_json(head + b"[]" + tail + close):
            continue
        try:
            _decode_view(buf, j + 1, on_chunk)
        except msgspec.DecodeError:
            continue
        return tail
    raise SplitError("no end of the events array")


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):  # invalid UTF-8: the whole-buffer path replaces it
        return False
    return True


def _check_json(data: bytes, problem: str) -> None:
    if not _is_json(data):
        raise SplitError(problem)
