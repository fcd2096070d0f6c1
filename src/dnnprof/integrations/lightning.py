"""``Trainer(profiler=DnnprofProfiler(...))``: a Lightning run profiled as ``dnnprof run`` profiles a script.

Each training batch (Lightning's ``run_training_batch`` action) is one step; under ``trainer.validate``,
``test`` or ``predict`` each ``*_step`` call is. The capture starts when the Trainer sets the profiler up and
the run directory is written when it tears it down; its path is printed and kept in ``profiler.path``.
Only the process of local rank 0 records (the others run unprofiled).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from lightning.pytorch.profilers import Profiler
except ImportError:  # the older package name
    try:
        from pytorch_lightning.profilers import Profiler  # type: ignore[assignment,no-redef,unused-ignore]
    except ImportError:
        raise ImportError("dnnprof.integrations.lightning needs Lightning: pip install lightning") from None

from dnnprof.api.session import ProfileSession

#: The action that ends one step, per Trainer stage.
STEP_ACTIONS = {"fit": "run_training_batch", "validate": ".validation_step", "test": ".test_step",
                "predict": ".predict_step"}


class DnnprofProfiler(Profiler):
    """A Lightning profiler that writes a dnnprof run directory.

    Args:
        warmup_steps, steps, full, counters, out, name, nvml, quiet: as :func:`dnnprof.profile`.
    """

    def __init__(self, *, warmup_steps: int = 5, steps: int = 10, full: bool = False, counters: bool = False,
                 out: str | os.PathLike[str] | None = None, name: str | None = None, nvml: bool = True,
                 quiet: bool = False) -> None:
        super().__init__()
        self._session: ProfileSession | None = None  # before the check: Profiler.__del__ tears down even then
        self._options: dict[str, Any] = dict(warmup_steps=warmup_steps, steps=steps, full=full, counters=counters,
                                             out=out, name=name, nvml=nvml, quiet=quiet,
                                             explicit_steps=True)
        ProfileSession(**self._options)  # a bad setting fails here, where the Trainer is built
        self._step_action = ""
        #: The run directory once the Trainer is done with the profiler (None before, and on other ranks).
        self.path: Path | None = None
        self.result: Any = None

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if self._session is not None or (local_rank or 0) != 0:
            return
        self._step_action = STEP_ACTIONS.get(str(stage), "run_training_batch")
        self._session = ProfileSession(**self._options).start()

    def start(self, action_name: str) -> None:
        """Nothing to do when an action starts: steps end at :meth:`stop`."""

    def stop(self, action_name: str) -> None:
        s = self._session
        if s is None:
            return
        if action_name == self._step_action or (self._step_action.startswith(".")
                                                and action_name.endswith(self._step_action)):
            s.step()

    def teardown(self, stage: str | None) -> None:
        session, self._session = self._session, None
        if session is not None:
            self.result = session.stop()
            self.path = session.path
        super().teardown(stage)

    def summary(self) -> str:
        return f"dnnprof run directory: {self.path}" if self.path is not None else ""
