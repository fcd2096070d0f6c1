"""A stand-in probe module for the fork-server tests: ``main(args)`` behaves as ``args[0]`` says."""

from __future__ import annotations

import os
import sys
import time


def main(args: list[str]) -> int:
    what = args[0]
    print(f"fake probe {what} pid {os.getpid()} env {os.environ.get('FAKE_PROBE_VALUE', '')}")
    print("to stderr", file=sys.stderr)
    if what == "ok":
        return 0
    if what == "fail":
        return 3
    if what == "raise":
        raise ValueError("broken trial")
    if what == "abort":
        os.abort()
    if what == "hang":
        time.sleep(600)
    return 0
