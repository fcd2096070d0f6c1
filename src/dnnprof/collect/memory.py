"""GPU memory per step and the TBD-style breakdown (weights, gradients, optimizer state, activations/other).

Per step: the caching allocator's peak allocated and reserved bytes since the previous boundary
(``torch.cuda.max_memory_allocated`` semantics, reset at every boundary). Breakdown: the static part is measured
on the live tensors at the end of a profiled step (gradients still exist after ``optimizer.step()``); the rest of
the peak is activations, workspaces and input batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class StepMemory:
    """Reads and resets the allocator's peak counters of one CUDA device."""

    def __init__(self, torch: Any, device: int) -> None:
        self.torch = torch
        self.device = device
        stats = getattr(torch._C, "_cuda_memoryStats", None)
        # The nested C++ dict is ~10x cheaper than torch.cuda.memory_stats(), which flattens it in Python.
        self._stats = (lambda: stats(device)) if stats is not None else None

    def read_and_reset(self) -> tuple[int, int]:
        """(peak allocated, peak reserved) bytes since the last call; then reset the peaks."""
        cuda = self.torch.cuda
        if self._stats is not None:
            s = self._stats()
            alloc = int(s["allocated_bytes"]["all"]["peak"])
            reserved = int(s["reserved_bytes"]["all"]["peak"])
        else:
            alloc = int(cuda.max_memory_allocated(self.device))
            reserved = int(cuda.max_memory_reserved(self.device))
        cuda.reset_peak_memory_stats(self.device)
        return alloc, reserved


def _unique_bytes(tensors: Iterable[Any]) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None or t.numel() == 0:
            continue
        key = (t.data_ptr(), t.nbytes)
        if key not in seen:
            seen.add(key)
            total += int(t.nbytes)
    return total


def static_breakdown(torch: Any, modules: Iterable[Any], optimizers: Iterable[Any]) -> dict[str, int]:
    """Weights, gradients and optimizer-state bytes of the given root modules and optimizers.

    Weights are the modules' parameters and buffers plus any optimizer parameter outside them (a script whose
    modules were never seen still gets its trained parameters counted); every tensor is counted once.
    """
    modules = list(modules)
    optimizers = list(optimizers)
    params = [p for m in modules for p in m.parameters()]
    params += [p for opt in optimizers for g in opt.param_groups for p in g["params"]]
    buffers = [b for m in modules for b in m.buffers()]
    state = [v for opt in optimizers for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "weights_bytes": _unique_bytes([*params, *buffers]),
        "gradients_bytes": _unique_bytes(p.grad for p in params),
        "optimizer_state_bytes": _unique_bytes(state),
    }
