"""What a profiling run produced, as ``run_command``/``profile_workload`` return it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunResult:
    """What a profiling run produced.

    Attributes:
        run_dir: the final run directory (``…-<ts>`` or ``…-<ts>.incomplete``).
        complete: True when the profile covers every planned window.
        status: the collector's status (``complete``, ``partial``, ``no_steps``, ``too_few_steps``, ``not_started``).
        exit_code: the profiled command's exit code (128 + signal number when killed by a signal).
        interrupted: Ctrl-C (or SIGTERM) ended the run.
        messages: sentences for the user (what happened, how to fix it).
        summary: the summary.json document, when a profile was built and summarised.
    """

    run_dir: Path
    complete: bool
    status: str
    exit_code: int
    interrupted: bool = False
    messages: list[str] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def profile_dir(self) -> Path | None:
        p = self.run_dir / "profile"
        return p if p.is_dir() else None

    def load_profile(self) -> Any:
        from dnnprof.model.profile import Profile

        if self.profile_dir is None:
            raise FileNotFoundError(f"{self.run_dir}: this run has no profile")
        return Profile.load(self.profile_dir)
