"""Errors raised by the workload suite. All are ``ValueError`` subclasses the CLI turns into one-line messages."""

from __future__ import annotations


class WorkloadError(ValueError):
    """Base class of every error the workload suite raises on purpose."""


class UnknownWorkload(WorkloadError):
    """A workload name that is not in the registry; the message lists the valid names."""

    def __init__(self, name: str, valid: list[str]) -> None:
        super().__init__(f"unknown workload {name!r}; valid workloads: {', '.join(valid)}")
        self.name = name
        self.valid = valid


class InvalidConfig(WorkloadError):
    """An unknown knob or a knob value outside its choices; the message lists what is valid."""


class UnsupportedConfig(WorkloadError):
    """A valid configuration this machine cannot run (fp16 on CPU, bf16 before Ampere, no CUDA, ...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DataError(WorkloadError):
    """A ``data_dir`` that holds no usable files, or a file that cannot be decoded."""


class MissingDependency(WorkloadError, ImportError):
    """An optional package (torch, transformers, torchvision, pillow) is missing or fails to import."""

    def __init__(self, package: str, message: str) -> None:
        super().__init__(message)
        self.package = package
