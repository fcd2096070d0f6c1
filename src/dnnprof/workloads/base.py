"""The ``Workload`` base class: model + DataLoader + one ``step()`` an external loop can call.

A subclass supplies the model, datasets, optimizers and the loss/inference forward; this class owns precision,
device placement, the data iterator, the train/infer step and the bookkeeping a profiler needs
(``items_per_step``, ``items_processed``, ``memory_breakdown()``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset

from dnnprof.workloads import data as data_lib
from dnnprof.workloads.config import WorkloadConfig
from dnnprof.workloads.memory import MemoryBreakdown, memory_breakdown
from dnnprof.workloads.precision import PrecisionPlan, plan_precision, resolve_device, set_tf32
from dnnprof.workloads.registry import WorkloadSpec

#: Prefix of the ``record_function`` ranges ``step()`` opens: data, forward, backward, optimizer.
PHASE_PREFIX = "dnnprof/"


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """A ``record_function`` range named ``dnnprof/<name>`` (nearly free when no profiler is active)."""
    return record_function(PHASE_PREFIX + name)


class Workload:
    """One benchmark workload, built and ready to ``step()``.

    Attributes:
        spec: the registry entry.
        config: the resolved config (no ``None`` left).
        device: where the model runs.
        plan: the precision plan (dtypes, autocast, GradScaler, TF32).
        model: the ``nn.Module`` (for a GAN, a ``ModuleDict`` of generator and discriminator).
        optimizers: optimizers stepped in training (empty in ``infer`` mode).
        loader: the ``torch.utils.data.DataLoader`` batches come from.
        items_per_step: samples, tokens or audio seconds one step processes (nominal; see ``items_processed``).
        items_processed: items actually consumed by all ``step()`` calls so far (exact for variable-length audio).
        steps_done: ``step()`` calls so far.
        last_loss: loss tensor of the last training step (on the device; reading it synchronises).
        implementation: where the model code comes from (``torchvision.models.resnet50``, ``built-in``).
        input_desc: one line describing a batch.
    """

    implementation: str = "built-in"

    def __init__(self, spec: WorkloadSpec, config: WorkloadConfig) -> None:
        self.spec = spec
        self.config = config
        self.params: dict[str, Any] = dict(spec.params)
        self.device = resolve_device(config.device)
        self.plan: PrecisionPlan = plan_precision(config.precision, self.device)
        self._restore_tf32 = set_tf32(self.plan.allow_tf32)
        self.batch_size: int = config.batch_size  # type: ignore[assignment]  # resolved
        self.training = config.mode == "train"
        try:
            # Data first: a bad data_dir fails before a large model is built.
            dataset = (
                self.build_real_dataset(config.data_dir)
                if config.data_dir
                else self.build_synthetic_dataset()
            )
            torch.manual_seed(config.seed)
            with self.device:  # initialise weights on the device: much faster for 100M-parameter models
                model = self.build_model()
            self.model = model.to(self.device, dtype=self.plan.param_dtype)
            self.model.train(self.training)
            self.optimizers: list[torch.optim.Optimizer] = self.build_optimizers() if self.training else []
            self.scaler = _grad_scaler(self.device) if self.training and self.plan.grad_scaler else None
            self.loader: DataLoader = data_lib.make_loader(
                dataset,
                batch_size=self.batch_size,
                num_workers=config.num_workers or 0,
                pin_memory=bool(config.pin_memory),
                shuffle=config.data_dir is not None,
                seed=config.seed,
            )
            self._batches = data_lib.CyclingIterator(self.loader)
            self.items_per_step: float = self.nominal_items_per_step()
            self.items_processed: float = 0.0
            self.steps_done = 0
            self.last_loss: torch.Tensor | None = None
        except BaseException:
            # A failed build (missing package, bad data folder) must not leave TF32 switched or workers running.
            self.close()
            raise

    # ----- hooks a workload implements -----------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The model on CPU in fp32; the base class moves and casts it."""
        raise NotImplementedError

    def build_optimizers(self) -> list[torch.optim.Optimizer]:
        """Optimizers over ``self.model`` (called in train mode only, after the model is placed)."""
        raise NotImplementedError

    def build_synthetic_dataset(self) -> Dataset:
        """A ``Dataset`` of synthetic samples (dicts of CPU tensors)."""
        raise NotImplementedError

    def build_real_dataset(self, data_dir: str) -> Dataset:
        """A ``Dataset`` over the files in ``data_dir``."""
        raise NotImplementedError

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Training forward: the scalar loss of ``batch`` (already on the device)."""
        raise NotImplementedError

    def infer(self, batch: dict[str, torch.Tensor]) -> Any:
        """Inference forward of ``batch`` (already on the device); runs under ``inference_mode``."""
        raise NotImplementedError

    def generate(self, batch: dict[str, torch.Tensor]) -> Any:
        """Generate mode: a prefill over the batch's prompts, then one decode iteration per new token (runs under
        ``inference_mode``); only language models that list ``generate`` among their modes implement it."""
        raise NotImplementedError

    def scores(self, batch: dict[str, torch.Tensor]) -> Any:
        """The inference forward's raw outputs (logits, before any argmax decoding): what ``dnnprof bench`` times
        and compares across backends. Defaults to ``infer``."""
        return self.infer(batch)

    def nominal_items_per_step(self) -> float:
        """Items one step processes with the configured shapes (default: the batch size)."""
        return float(self.batch_size)

    def batch_items(self, batch: dict[str, torch.Tensor]) -> float:
        """Items in one CPU batch (default: the nominal count); speech counts unpadded audio seconds."""
        return self.items_per_step

    # ----- the step -------------------------------------------------------------------------------------
    def step(self) -> None:
        """Run one iteration: next batch to the device, then a training step, an inference forward or (generate
        mode) one generated sequence per batch item."""
        with phase("data"):
            cpu_batch = self._batches.next()
            batch = self.to_device(cpu_batch)
        if self.training:
            self.train_step(batch)
        elif self.config.mode == "generate":
            with torch.inference_mode(), self.autocast(), phase("forward"):
                self.generate(batch)
        else:
            with torch.inference_mode(), self.autocast(), phase("forward"):
                self.infer(batch)
        self.items_processed += self.batch_items(cpu_batch)
        self.steps_done += 1

    def train_step(self, batch: dict[str, torch.Tensor]) -> None:
        """zero_grad, forward + loss, backward, optimizer step (scaled for amp-fp16)."""
        (optimizer,) = self.optimizers
        optimizer.zero_grad(set_to_none=True)
        with self.autocast(), phase("forward"):
            loss = self.loss(batch)
        self.backward_and_step(loss, optimizer)
        self.last_loss = loss.detach()

    def backward_and_step(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, *, update: bool = True
    ) -> None:
        """Backward of ``loss`` and ``optimizer.step()``, through the GradScaler when there is one."""
        with phase("backward"):
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        with phase("optimizer"):
            if self.scaler is not None:
                self.scaler.step(optimizer)
                if update:
                    self.scaler.update()
            else:
                optimizer.step()

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Move a CPU batch to the device (non_blocking when pinned); cast float tensors for fp16/bf16/fp64."""
        non_blocking = bool(self.config.pin_memory) and self.device.type == "cuda"
        cast = self.plan.autocast_dtype is None and self.plan.param_dtype != torch.float32
        out = {}
        for key, t in batch.items():
            t = t.to(self.device, non_blocking=non_blocking)
            if cast and t.is_floating_point():
                t = t.to(self.plan.param_dtype)
            out[key] = t
        return out

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for amp-* precisions, else a no-op context."""
        if self.plan.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.plan.autocast_dtype)

    # ----- bookkeeping ----------------------------------------------------------------------------------
    def modules(self) -> Iterator[nn.Module]:
        """Top-level modules whose memory counts (the model)."""
        yield self.model

    def memory_breakdown(self) -> MemoryBreakdown:
        """Bytes of weights, gradients and optimizer state now (call after a training step for the full set)."""
        return memory_breakdown(self.modules(), self.optimizers)

    @property
    def num_parameters(self) -> int:
        """Distinct parameters in the model."""
        return sum(p.numel() for p in self.model.parameters())

    def synchronize(self) -> None:
        """Wait for the device to finish queued work (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts for run metadata: workload, config, dims, parameters, unit, items per step."""
        return {
            "workload": self.spec.name,
            "domain": self.spec.domain,
            "implementation": self.implementation,
            "source": self.spec.source,
            "optimizer": self.spec.optimizer if self.training else "",
            "config": self.config.as_dict(),
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()},
            "num_parameters": self.num_parameters,
            "unit": self.spec.unit,
            "items_per_step": self.items_per_step,
            "input": self.input_desc,
        }

    @property
    def input_desc(self) -> str:
        """One line describing a batch (overridden by workloads)."""
        return f"batch {self.batch_size}"

    def close(self) -> None:
        """Stop DataLoader workers and restore the TF32 switches. Safe to call twice."""
        batches = getattr(self, "_batches", None)
        if batches is not None:
            batches.close()
        self._restore_tf32()

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return f"<Workload {self.spec.name} {c.mode} {c.precision} batch={c.batch_size} on {self.device}>"


def _grad_scaler(device: torch.device) -> Any:
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device.type)
    return torch.cuda.amp.GradScaler()
