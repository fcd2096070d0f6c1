"""Outputs of a backend against the eager reference: a fast wrong answer is reported ``wrong``, not ``ok``."""

from __future__ import annotations

from typing import Any

#: Largest error allowed, relative to the reference's largest magnitude, per precision. fp32 leaves room for
#: fused/reordered reductions (Inductor, ONNX Runtime, TensorRT); half precisions for their 10/7-bit mantissas.
TOLERANCE = {"fp64": 1e-6, "fp32": 1e-3, "tf32": 1e-2, "fp16": 2e-2, "amp-fp16": 2e-2, "bf16": 6e-2,
             "amp-bf16": 6e-2}


def tolerance(precision: str) -> float:
    return TOLERANCE.get(precision, 1e-3)


def compare(outputs: list[Any], reference: list[Any], tol: float) -> tuple[bool, float | None, str]:
    """(within tolerance, largest relative error, why not) of float64 arrays ``outputs`` vs ``reference``."""
    import numpy as np

    if len(outputs) != len(reference):
        return False, None, f"{len(outputs)} outputs where the reference has {len(reference)}"
    worst = 0.0
    for i, (a, r) in enumerate(zip(outputs, reference, strict=False)):
        if a.shape != r.shape:
            return False, None, f"output {i} has shape {list(a.shape)}, the reference {list(r.shape)}"
        if not np.isfinite(a).all() and np.isfinite(r).all():
            return False, None, f"output {i} has NaN or inf values where the reference has none"
        finite = np.isfinite(r)
        scale = float(np.abs(r[finite]).max()) if finite.any() else 0.0
        err = float(np.abs(a[finite] - r[finite]).max()) if finite.any() else 0.0
        worst = max(worst, err / max(scale, 1e-12))
    if worst > tol:
        return False, worst, f"outputs differ from eager by {worst:.3g} (relative to the largest value), over " \
                             f"the {tol:g} allowed"
    return True, worst, ""
