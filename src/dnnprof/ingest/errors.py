"""Errors raised while reading foreign trace files."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace file is missing, unreadable or not in a format dnnprof understands.

    The message always names the file and the problem, so the CLI can print it as one line.
    """
