"""``Trainer(callbacks=[DnnprofCallback(...)])``: a Hugging Face ``Trainer`` run profiled as ``dnnprof run`` profiles a
script.

Each optimizer update (``on_step_end``) is one step, carrying ``per_device_train_batch_size`` ×
``gradient_accumulation_steps`` samples. The capture starts at ``on_train_begin`` and the run directory is written
at ``on_train_end``; its path is printed and kept in ``callback.path``. Only the main process records.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("dnnprof.integrations.hf needs transformers: pip install transformers") from None

from dnnprof.api.session import ProfileSession


class DnnprofCallback(TrainerCallback):
    """A ``TrainerCallback`` that writes a dnnprof run directory.

    Args:
        warmup_steps, steps, full, counters, out, name, nvml, quiet: as :func:`dnnprof.profile`.
    """

    def __init__(self, *, warmup_steps: int = 5, steps: int = 10, full: bool = False, counters: bool = False,
                 out: str | os.PathLike[str] | None = None, name: str | None = None, nvml: bool = True,
                 quiet: bool = False) -> None:
        self._options: dict[str, Any] = dict(warmup_steps=warmup_steps, steps=steps, full=full, counters=counters,
                                             out=out, name=name, nvml=nvml, quiet=quiet,
                                             explicit_steps=True)
        ProfileSession(**self._options)  # a bad setting fails here, where the Trainer is built
        self._session: ProfileSession | None = None
        self._items: float | None = None
        #: The run directory once training ended (None before, and on other processes).
        self.path: Path | None = None
        self.result: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session is not None or not getattr(state, "is_world_process_zero", True):
            return
        per_device = getattr(args, "per_device_train_batch_size", None)
        accumulate = getattr(args, "gradient_accumulation_steps", 1) or 1
        self._items = float(per_device * accumulate) if per_device else None
        self._session = ProfileSession(**self._options).start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session is not None:
            self._session.step(self._items)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        session, self._session = self._session, None
        if session is not None:
            self.result = session.stop()
            self.path = session.path
