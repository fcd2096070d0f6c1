"""The knobs every workload takes, their defaults and their validation (no torch needed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnprof.workloads.errors import InvalidConfig
from dnnprof.workloads.registry import DEVICES, GENERATE_MODES, PRECISIONS, WorkloadSpec

#: Worker processes when ``num_workers`` is not given: data loading overlaps the GPU step on CUDA and
#: stays in the main process (deterministic, no fork) on CPU.
DEFAULT_CUDA_WORKERS = 2


@dataclass(frozen=True)
class WorkloadConfig:
    """How to build and run one workload.

    Attributes:
        batch_size: samples per step; ``None`` takes the workload's default.
        precision: one of ``PRECISIONS``. ``fp64/fp16/bf16`` cast model and inputs; ``amp-*`` use
            ``torch.autocast`` (plus ``GradScaler`` for fp16); ``tf32`` is fp32 with TF32 math on,
            ``fp32`` turns TF32 off.
        mode: ``train`` (forward, loss, backward, optimizer step), ``infer`` (forward under inference_mode) or, for
            GPT-2, ``generate`` (a prompt prefill then greedy decode iterations with a static KV cache).
        device: ``cuda`` or ``cpu``.
        data_dir: folder of real files (.wav, images or .txt) instead of synthetic data.
        num_workers: DataLoader worker processes; ``None`` means 2 on CUDA and 0 on CPU.
        pin_memory: pin host batches; ``None`` means on for CUDA. Needs CUDA.
        seed: seeds model initialisation and synthetic data.
    """

    batch_size: int | None = None
    precision: str = "fp32"
    mode: str = "train"
    device: str = "cuda"
    data_dir: str | None = None
    num_workers: int | None = None
    pin_memory: bool | None = None
    seed: int = 0

    @classmethod
    def knobs(cls) -> list[str]:
        """Names of every knob, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, knobs: Mapping[str, Any]) -> WorkloadConfig:
        """A config from a mapping of knob -> value.

        Raises:
            InvalidConfig: a key is not a knob; the message lists the valid knobs.
        """
        return cls().with_knobs(knobs)

    def with_knobs(self, knobs: Mapping[str, Any]) -> WorkloadConfig:
        """A copy with some knobs replaced (unknown knob names raise ``InvalidConfig``)."""
        valid = self.knobs()
        unknown = sorted(set(knobs) - set(valid))
        if unknown:
            raise InvalidConfig(
                f"unknown workload knob(s) {', '.join(unknown)}; valid knobs: {', '.join(valid)}"
            )
        return dataclasses.replace(self, **dict(knobs))

    def resolve(self, spec: WorkloadSpec) -> WorkloadConfig:
        """Check every value and fill the ``None`` defaults for ``spec``.

        Raises:
            InvalidConfig: a value outside its choices or range; the message lists what is valid.
        """
        _choice("precision", self.precision, spec.precisions)
        _choice("mode", self.mode, spec.modes)
        _choice("device", self.device, DEVICES)
        batch_size = spec.default_batch_size if self.batch_size is None else self.batch_size
        _positive_int("batch_size", batch_size, minimum=1)
        workers = (
            (DEFAULT_CUDA_WORKERS if self.device == "cuda" else 0)
            if self.num_workers is None
            else self.num_workers
        )
        _positive_int("num_workers", workers, minimum=0)
        pin = (self.device == "cuda") if self.pin_memory is None else self.pin_memory
        if not isinstance(pin, bool):
            raise InvalidConfig(f"pin_memory must be true or false, got {pin!r}")
        if pin and self.device != "cuda":
            raise InvalidConfig(
                "pin_memory=True needs device 'cuda' (pinned memory only speeds host-to-GPU copies)"
            )
        _positive_int("seed", self.seed, minimum=0)
        data_dir = self.data_dir
        if data_dir is not None:
            path = Path(data_dir)
            if not path.is_dir():
                raise InvalidConfig(f"{data_dir}: data_dir is not a directory")
            data_dir = str(path)
        return dataclasses.replace(
            self, batch_size=batch_size, num_workers=workers, pin_memory=pin, data_dir=data_dir
        )

    def as_dict(self) -> dict[str, Any]:
        """The knobs as a JSON-ready dict."""
        return dataclasses.asdict(self)


def knob_rows() -> list[dict[str, str]]:
    """Every knob with its default and choices, as table rows (all values strings)."""
    choices = {
        "precision": "|".join(PRECISIONS),
        "mode": "|".join(GENERATE_MODES) + " (generate: GPT-2 only)",
        "device": "|".join(DEVICES),
        "batch_size": "integer >= 1 (default: the workload's)",
        "data_dir": "folder of .wav / image / .txt files (default: synthetic data)",
        "num_workers": f"integer >= 0 (default: {DEFAULT_CUDA_WORKERS} on cuda, 0 on cpu)",
        "pin_memory": "true|false (default: true on cuda)",
        "seed": "integer >= 0",
    }
    defaults = WorkloadConfig()
    return [
        {
            "knob": k,
            "default": "" if getattr(defaults, k) is None else str(getattr(defaults, k)),
            "choices": choices[k],
        }
        for k in WorkloadConfig.knobs()
    ]


def _choice(knob: str, value: object, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise InvalidConfig(f"unknown {knob} {value!r}; valid choices: {', '.join(valid)}")


def _positive_int(knob: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidConfig(f"{knob} must be an integer >= {minimum}, got {value!r}")
