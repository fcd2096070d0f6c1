"""Options several commands share, declared once so their names and help read the same everywhere.

Each is a factory: the command passes what differs (a default, the document it writes) and gets a
``typer.Option``. An option that means something else in one command (``sweep --steps``: timed steps per trial,
``device --device``: an index) is declared in that command, with a comment saying why.
"""

from __future__ import annotations

from typing import Any

import typer


def json_out(document: str) -> Any:
    """``--json FILE``: write ``document`` (``dnnprof.summary/1``, …) to a file, or stdout for ``-``."""
    return typer.Option(None, "--json", help=f"Write the {document} JSON here ('-' = stdout).")


def json_flag() -> Any:
    """``--json``: print JSON on stdout instead of tables."""
    return typer.Option(False, "--json", help="Print JSON instead of tables.")


def top(default: int) -> Any:
    """``--top N``: rows per table."""
    return typer.Option(default, "--top", min=1, help="Rows to show in each table.")


def rank() -> Any:
    """``--rank``: which rank of a multi-GPU trace."""
    # Plain help (click's formatter, cli/main.py): rich's would take "[default: …]" for a style tag and drop it.
    return typer.Option(None, "--rank", show_default=False,
                        help="Rank of a multi-GPU trace to report on [default: the only rank of a single-rank "
                             "trace, else 0].")


def quiet() -> Any:
    """``--quiet/-q``: errors and notes only."""
    return typer.Option(False, "--quiet", "-q", help="Only errors and notes: no report or progress on the terminal "
                                                     "(the files asked for are still written).")


# --- the capture options of `run` and `profile` ---------------------------------------------------------------
def run_out() -> Any:
    """``--out``: the run directory."""
    return typer.Option(None, "--out", help="Run directory (default dnnprof-runs/<name>-<UTC time>).")


def steps() -> Any:
    """``--steps``: the profiled window."""
    return typer.Option(10, "--steps", help="Steps in the profiled window.")


def warmup_steps() -> Any:
    """``--warmup-steps``: unprofiled steps before the window."""
    return typer.Option(5, "--warmup-steps", help="Unprofiled steps before the window (>= 2).")


def full() -> Any:
    """``--full``: the detail window after the timed one."""
    return typer.Option(False, "--full", help="Also shapes, stacks, modules and memory events, recorded in 2 steps "
                                              "after the timed ones and joined onto them (on a GPU; without one, a "
                                              "single window).")


def counters() -> Any:
    """``--counters``: an Nsight Compute pass after the run."""
    return typer.Option(False, "--counters", help="Then run one step again under Nsight Compute for hardware "
                                                  "counters.")


def no_nvml() -> Any:
    """``--no-nvml``."""
    return typer.Option(False, "--no-nvml", help="Do not sample NVML/GPM.")


def nvml_period_ms() -> Any:
    """``--nvml-period-ms``."""
    return typer.Option(50.0, "--nvml-period-ms", help="NVML/GPM sampling period (5–1000 ms).")
