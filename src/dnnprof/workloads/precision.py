"""Precision plans: what each ``precision`` knob means for dtypes, autocast, GradScaler and TF32."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dnnprof.workloads.errors import UnsupportedConfig

#: Compute capability that brings bf16 and TF32 tensor cores (Ampere).
AMPERE = (8, 0)

_PARAM_DTYPE = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "amp-fp16": torch.float32,
    "amp-bf16": torch.float32,
}
_AUTOCAST_DTYPE = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}


@dataclass(frozen=True)
class PrecisionPlan:
    """How a precision is carried out.

    Attributes:
        name: the precision knob.
        param_dtype: dtype of weights and floating-point inputs.
        autocast_dtype: dtype for ``torch.autocast``, or ``None`` for no autocast.
        grad_scaler: whether training scales the loss with ``GradScaler`` (amp-fp16 only).
        allow_tf32: value given to ``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32``.
    """

    name: str
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    grad_scaler: bool
    allow_tf32: bool


def resolve_device(device: str) -> torch.device:
    """``torch.device`` for the device knob, checking that CUDA is there when asked for."""
    if device == "cuda" and not torch.cuda.is_available():
        raise UnsupportedConfig("device 'cuda' asked for, but torch sees no CUDA GPU; use device 'cpu'")
    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")


def plan_precision(precision: str, device: torch.device) -> PrecisionPlan:
    """The plan for ``precision`` on ``device``.

    Raises:
        UnsupportedConfig: fp16, amp-fp16 or tf32 on CPU; bf16, amp-bf16 or tf32 on a GPU before Ampere.
    """
    if device.type == "cpu" and precision in ("fp16", "amp-fp16", "tf32"):
        raise UnsupportedConfig(
            f"precision {precision!r} is not supported on CPU (CPUs have no fp16 or TF32 math worth "
            "profiling); use fp32, fp64, bf16 or amp-bf16 on CPU"
        )
    if device.type == "cuda" and precision in ("bf16", "amp-bf16", "tf32"):
        capability = torch.cuda.get_device_capability(device)
        if capability < AMPERE:
            name = torch.cuda.get_device_name(device)
            raise UnsupportedConfig(
                f"precision {precision!r} needs an Ampere or newer GPU (compute capability 8.0); "
                f"{name} is {capability[0]}.{capability[1]}"
            )
    return PrecisionPlan(
        name=precision,
        param_dtype=_PARAM_DTYPE[precision],
        autocast_dtype=_AUTOCAST_DTYPE.get(precision),
        grad_scaler=precision == "amp-fp16",
        allow_tf32=precision == "tf32",
    )


def set_tf32(allow: bool) -> Callable[[], None]:
    """Set the process-wide TF32 switches; return a function that restores the previous values."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow

    def restore() -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before

    return restore
