"""Bytes held by weights, gradients and optimizer state: the static part of a TBD-style memory breakdown.

Activations and other memory are what is left of the allocator's peak: ``peak - (weights + gradients +
optimizer state)``. Each helper sums ``Tensor.nbytes`` once per distinct tensor, so tied weights (GPT-2's
embedding and LM head) count once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class MemoryBreakdown:
    """Static memory of a workload, in bytes.

    Attributes:
        weights_bytes: parameters plus buffers (batch-norm statistics, position ids).
        gradients_bytes: ``.grad`` of every parameter that has one.
        optimizer_state_bytes: every tensor in the optimizers' state (momentum, Adam moments, steps).
    """

    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int

    @property
    def static_bytes(self) -> int:
        """Weights + gradients + optimizer state."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_state_bytes

    def activations_other_bytes(self, peak_allocated_bytes: int) -> int:
        """What the peak holds beyond the static part (activations, workspaces, batches); never negative."""
        return max(0, peak_allocated_bytes - self.static_bytes)

    def as_dict(self, peak_allocated_bytes: int | None = None) -> dict[str, int]:
        """JSON-ready dict; adds ``activations_other_bytes`` and ``peak_allocated_bytes`` when a peak is given."""
        out = {
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
        }
        if peak_allocated_bytes is not None:
            out["activations_other_bytes"] = self.activations_other_bytes(peak_allocated_bytes)
            out["peak_allocated_bytes"] = peak_allocated_bytes
        return out


def _unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t.numel() == 0:
            continue
        key = (t.data_ptr(), t.nbytes)
        if key not in seen:
            seen.add(key)
            total += t.nbytes
    return total


def _params(modules: Iterable[nn.Module]) -> Iterator[nn.Parameter]:
    for m in modules:
        yield from m.parameters()


def weights_bytes(modules: Iterable[nn.Module]) -> int:
    """Bytes of the parameters and buffers of ``modules``."""
    modules = list(modules)
    buffers = (b for m in modules for b in m.buffers())
    return _unique_bytes([*_params(modules), *buffers])


def gradients_bytes(modules: Iterable[nn.Module]) -> int:
    """Bytes of the parameters' ``.grad`` tensors (0 before the first backward or after ``zero_grad``)."""
    return _unique_bytes(p.grad for p in _params(modules) if p.grad is not None)


def optimizer_state_bytes(optimizers: Iterable[torch.optim.Optimizer]) -> int:
    """Bytes of every tensor in the optimizers' state (0 before the first ``optimizer.step``)."""
    return _unique_bytes(
        v
        for opt in optimizers
        for state in opt.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )


def memory_breakdown(
    modules: Iterable[nn.Module], optimizers: Iterable[torch.optim.Optimizer]
) -> MemoryBreakdown:
    """Weights, gradients and optimizer-state bytes of ``modules`` trained by ``optimizers``."""
    modules = list(modules)
    return MemoryBreakdown(
        weights_bytes=weights_bytes(modules),
        gradients_bytes=gradients_bytes(modules),
        optimizer_state_bytes=optimizer_state_bytes(optimizers),
    )
