"""dnnprof: why is my deep-learning job slow on an NVIDIA GPU, and what should I change."""

from __future__ import annotations

__version__ = "0.1.0"
