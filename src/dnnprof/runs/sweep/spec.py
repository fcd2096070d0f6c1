"""What a sweep runs: the target, the batch sizes, precisions, modes and limits, parsed and checked (no torch).

Everything a user types on ``dnnprof sweep`` is validated here, so a bad option fails before any trial starts,
with a message that names the option and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dnnprof.collect.limits import MemoryLimit as MemoryLimit  # parsed here, applied in the trial process
from dnnprof.workloads.registry import MODES, PRECISIONS, get_spec

#: Largest batch ``auto`` tries when nothing runs out first (``--max-batch-size``).
DEFAULT_MAX_BATCH = 65536
#: Placeholders a script's argv may hold; each is replaced by the trial's value.
PLACEHOLDERS = ("batch_size", "precision", "mode", "device", "steps")
#: Environment variables every trial process gets (scripts read these when they have no placeholders).
ENV_BATCH_SIZE = "DNNPROF_BATCH_SIZE"
ENV_PRECISION = "DNNPROF_PRECISION"
ENV_MODE = "DNNPROF_MODE"
ENV_DEVICE = "DNNPROF_DEVICE"
ENV_STEPS = "DNNPROF_STEPS"
#: Precisions CPUs are not asked to run (the workload suite refuses them on CPU too).
CPU_UNSUPPORTED = frozenset({"fp16", "amp-fp16", "tf32"})
PROFILE_POINT_WORDS = ("default", "max", "all", "none")

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
    "t": 1024**4, "tib": 1024**4, "tb": 1000**4,
}


class SweepSpecError(ValueError):
    """A sweep option that cannot be used; the message names the option and what is allowed."""


def parse_size(text: str) -> MemoryLimit:
    """``16GiB``, ``8G`` (binary), ``8GB`` (decimal), ``512MiB``, ``123456`` (bytes) or ``50%``.

    Raises:
        SweepSpecError: not a size.
    """
    t = text.strip().replace(" ", "")
    if t.endswith("%"):
        try:
            pct = float(t[:-1])
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise SweepSpecError(f"--memory-limit {text!r}: a percentage must be in (0, 100]")
        return MemoryLimit(text, fraction=pct / 100.0)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", t)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise SweepSpecError(f"--memory-limit {text!r}: expected a size such as 16GiB, 512MiB, 8GB or 50%")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1024**2:
        raise SweepSpecError(f"--memory-limit {text!r}: below 1 MiB, nothing could run")
    return MemoryLimit(text, bytes=n)


@dataclass(frozen=True)
class BatchPlan:
    """``--batch-sizes``: ``auto`` (search to the largest that fits) or an explicit ascending list."""

    auto: bool
    sizes: tuple[int, ...] = ()
    text: str = "auto"


def parse_batch_sizes(text: str) -> BatchPlan:
    """``auto``; ``1,8,32``; ``A..B`` (A, 2A, 4A … up to and including B); ``A..B:S`` (A to B in steps of S).

    Raises:
        SweepSpecError: anything else, zero or negative sizes, an empty range.
    """
    t = text.strip().lower()
    if t == "auto":
        return BatchPlan(auto=True, text="auto")
    sizes: set[int] = set()
    for part in (p.strip() for p in t.split(",") if p.strip()):
        m = re.fullmatch(r"(\d+)\.\.(\d+)(?::(\d+))?", part)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            step = int(m.group(3)) if m.group(3) else None
            if a < 1 or b < a or step == 0:
                raise SweepSpecError(f"--batch-sizes {part!r}: a range needs 1 <= A <= B (and a step >= 1)")
            if step:
                sizes.update(range(a, b + 1, step))
            else:
                x = a
                while x < b:
                    sizes.add(x)
                    x *= 2
                sizes.add(b)
        elif part.isdigit() and int(part) >= 1:
            sizes.add(int(part))
        else:
            raise SweepSpecError(f"--batch-sizes {text!r}: expected auto, a list (1,8,32) or a range (1..256, "
                                 "8..64:8) of positive integers")
    if not sizes:
        raise SweepSpecError("--batch-sizes is empty")
    return BatchPlan(auto=False, sizes=tuple(sorted(sizes)), text=text)


def parse_choices(text: str, valid: tuple[str, ...], option: str) -> tuple[str, ...]:
    """A comma list of choices, in the order given, without repeats."""
    out: list[str] = []
    for word in (w.strip().lower() for w in text.split(",")):
        if not word:
            continue
        if word not in valid:
            raise SweepSpecError(f"{option}: unknown value {word!r}; valid: {', '.join(valid)}")
        if word not in out:
            out.append(word)
    if not out:
        raise SweepSpecError(f"{option} is empty; valid: {', '.join(valid)}")
    return tuple(out)


def parse_profile_points(text: str) -> tuple[str, ...]:
    """``default,max`` (the default), ``all``, ``none`` or batch sizes (``1,64,max``)."""
    out: list[str] = []
    for word in (w.strip().lower() for w in text.split(",") if w.strip()):
        if word not in PROFILE_POINT_WORDS and not (word.isdigit() and int(word) >= 1):
            raise SweepSpecError(f"--profile-points: unknown value {word!r}; use default, max, all, none or "
                                 "batch sizes")
        out.append(word)
    if "none" in out:
        return ()
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Target:
    """What each trial runs: a built-in workload, or a command (``python train.py …``).

    Attributes:
        kind: ``workload`` or ``script``.
        name: the workload name, or the script's file name.
        argv: the command for a script (may hold ``{batch_size}`` … placeholders); empty for a workload.
        default_batch_size: the workload's default batch size; for a script, ``--default-batch-size``.
    """

    kind: str
    name: str
    argv: tuple[str, ...] = ()
    default_batch_size: int | None = None

    def command(self, values: dict[str, Any]) -> list[str]:
        """The script's argv with placeholders filled in."""
        out = []
        for arg in self.argv:
            for key in PLACEHOLDERS:
                arg = arg.replace("{" + key + "}", str(values[key]))
            out.append(arg)
        return out


def workload_target(name: str) -> Target:
    """A target for a registered workload (``UnknownWorkload`` lists the valid names)."""
    spec = get_spec(name)
    return Target(kind="workload", name=spec.name, default_batch_size=spec.default_batch_size)


def script_target(argv: list[str], default_batch_size: int | None = None) -> Target:
    """A target for a command; the name is the first ``.py`` file in it, else the program."""
    if not argv:
        raise SweepSpecError("nothing to run after '--' (e.g. dnnprof sweep -- python train.py --bs {batch_size})")
    name = next((Path(a).name for a in argv if a.endswith(".py")), Path(argv[0]).name)
    return Target(kind="script", name=name, argv=tuple(argv), default_batch_size=default_batch_size)


@dataclass(frozen=True)
class SweepSpec:
    """Everything one sweep needs.

    Attributes:
        target: what runs.
        out: the sweep directory (``sweep.json``, ``trials.jsonl``, ``trials/``, ``runs/``).
        batches: ``--batch-sizes``.
        precisions: ``--precisions``, in order.
        modes: ``--modes``, in order.
        device: ``cuda`` or ``cpu``.
        memory_limit: ``--memory-limit`` or None.
        counters: profile trials collect Nsight Compute counters.
        timeout_s: wall-clock limit of one trial.
        steps: timed steps per trial.
        warmup_steps: untimed steps first.
        min_time_s: a probe keeps stepping until its timed window is at least this long (GPU: for NVML GPM).
        max_batch_size: the largest batch ``auto`` tries.
        profile_points: which batch sizes get a full ``dnnprof profile`` trial.
        time_budget_s: stop starting trials after this long (None: no budget).
    """

    target: Target
    out: Path
    batches: BatchPlan = field(default_factory=lambda: BatchPlan(auto=True))
    precisions: tuple[str, ...] = ("fp32",)
    modes: tuple[str, ...] = ("train",)
    device: str = "cuda"
    memory_limit: MemoryLimit | None = None
    counters: bool = False
    timeout_s: float = 600.0
    steps: int = 5
    warmup_steps: int = 2
    min_time_s: float | None = None
    max_batch_size: int = DEFAULT_MAX_BATCH
    profile_points: tuple[str, ...] = ("default", "max")
    time_budget_s: float | None = None

    def validate(self) -> SweepSpec:
        """Raise ``SweepSpecError`` naming the bad option."""
        for p in self.precisions:
            if p not in PRECISIONS:
                raise SweepSpecError(f"--precisions: unknown {p!r}; valid: {', '.join(PRECISIONS)}")
        for m in self.modes:
            if m not in MODES:
                raise SweepSpecError(f"--modes: unknown {m!r}; valid: {', '.join(MODES)}")
        if self.device not in ("cuda", "cpu"):
            raise SweepSpecError(f"--device: unknown {self.device!r}; valid: cuda, cpu")
        if self.steps < 1 or self.warmup_steps < 0:
            raise SweepSpecError("--steps must be >= 1 and --warmup-steps >= 0")
        if not self.timeout_s > 0:
            raise SweepSpecError("--timeout must be > 0 seconds")
        if self.max_batch_size < 1:
            raise SweepSpecError("--max-batch-size must be >= 1")
        return self

    @property
    def probe_min_time_s(self) -> float:
        """Timed-window floor of a probe: 1 s on GPU (GPM needs > 0.1 s windows), none on CPU."""
        if self.min_time_s is not None:
            return self.min_time_s
        return 1.0 if self.device == "cuda" else 0.0

    def config_json(self) -> dict[str, Any]:
        """The options as JSON (stored in sweep.json; a resumed sweep must match ``identity()``)."""
        return {
            "target": asdict(self.target) | {"argv": list(self.target.argv)},
            "batch_sizes": self.batches.text,
            "precisions": list(self.precisions),
            "modes": list(self.modes),
            "device": self.device,
            "memory_limit": self.memory_limit.text if self.memory_limit else None,
            "counters": self.counters,
            "timeout_s": self.timeout_s,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "max_batch_size": self.max_batch_size,
            "profile_points": list(self.profile_points),
            "time_budget_s": self.time_budget_s,
        }

    def identity(self) -> dict[str, Any]:
        """What finished trials depend on: a resumed sweep with other values here cannot reuse them."""
        return {
            "target": {"kind": self.target.kind, "name": self.target.name, "argv": list(self.target.argv)},
            "device": self.device,
            "memory_limit": self.memory_limit.text if self.memory_limit else None,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "counters": self.counters,
        }


def trial_bound(max_batch: int) -> int:
    """The promised number of search trials for ``auto``: ceil(log2(max)) + 3."""
    return math.ceil(math.log2(max(max_batch, 1))) + 3


def default_device() -> str:
    """``cuda`` when this machine shows an NVIDIA GPU (no CUDA context is created), else ``cpu``."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    return "cuda" if Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir() else "cpu"
