"""JSON output: one writer for every document dnnprof emits (summary, sweep, occupancy results)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import msgspec

from dnnprof.model.outputs import write_bytes_atomic


def _clean(x: Any) -> Any:
    """NaN/inf become null: JSON has no NaN, and consumers (jq, CI scripts) choke on it. A lone surrogate (a
    ``"\\ud800"`` escape in a trace's name) becomes U+FFFD: UTF-8 cannot hold it."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else float(x)
    if isinstance(x, str):  # numpy's str_ too: the encoder takes only the built-in str
        x = str(x)
        return x if x.isascii() else x.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(x, dict):
        return {_clean(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return _clean(x.item())
    return x


def dumps(doc: Any, indent: int = 2) -> bytes:
    """Encode a document as JSON bytes (NaN → null)."""
    return msgspec.json.format(msgspec.json.encode(_clean(doc)), indent=indent)


def write_json(doc: Any, path: str | os.PathLike[str], option: str = "--json") -> Path:
    """Write JSON atomically (temp file + rename): readers never see half a file. ``-`` writes to stdout;
    ``option`` names the path in error messages.

    Raises:
        OutputError: ``path`` is a folder or its parent is a file, or it cannot be written.
    """
    if str(path) == "-":
        import sys

        sys.stdout.buffer.write(dumps(doc) + b"\n")
        sys.stdout.flush()
        return Path("-")
    return write_bytes_atomic(path, dumps(doc) + b"\n", option=option)
