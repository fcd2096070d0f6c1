"""The backends ``dnnprof bench`` compares, by name: what each needs, and how it is prepared.

Every backend turns (source, batch size, input buffers on the device) into a ``Runner``: ``run()`` computes the
outputs from the buffers' current contents (the timed loop refills them) and returns them as a flat list. A
backend that cannot run here says why (``unavailable``) and is reported ``skipped``; one that fails while being
prepared or run is reported ``error``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dnnprof.bench.sources import Source

#: Every backend name, in report order. ``compile`` is torch.compile's default mode.
BACKENDS = ("eager", "cuda-graph", "compile", "compile-max-autotune", "compile-reduce-overhead", "onnxruntime",
            "onnxruntime-trt", "tensorrt", "openvino")
#: What ``--backends`` runs when not given.
DEFAULT_BACKENDS = ("eager", "cuda-graph", "compile", "onnxruntime", "tensorrt", "openvino")
#: Backends that run a PyTorch module (an ONNX file has none).
TORCH_BACKENDS = ("eager", "cuda-graph", "compile", "compile-max-autotune", "compile-reduce-overhead")


class BackendError(RuntimeError):
    """A backend failed to prepare or run (reported as status ``error`` with this message)."""


@dataclass
class Runner:
    """A prepared backend: ``run()`` reads the input buffers and returns the outputs (flat list)."""

    run: Callable[[], list[Any]]
    close: Callable[[], None] = lambda: None
    note: str = ""
    #: ``run()`` returns only once the device is done (ONNX Runtime): its host time is not an enqueue time.
    synchronous: bool = False
    #: The same call without the context managers ``run()`` enters (inference mode, autocast) and without
    #: flattening: the timed loop enters them once around all its iterations, as a hand-written loop would.
    bare: Callable[[], Any] | None = None


def unavailable(name: str, source: Source) -> str | None:
    """Why backend ``name`` cannot run ``source`` here, or None when it can."""
    if name in TORCH_BACKENDS and source.model is None:
        return "an ONNX file has no PyTorch model to run"
    if name == "cuda-graph" and source.device != "cuda":
        return "CUDA graphs need --device cuda"
    if name in ("onnxruntime", "onnxruntime-trt", "openvino", "tensorrt") and source.precision.startswith("amp-"):
        return f"{source.precision} is torch.autocast, which ONNX export does not carry; use fp16 or bf16"
    if name in ("onnxruntime", "onnxruntime-trt", "openvino", "tensorrt") and source.model is not None:
        for pkg in ("onnx", "onnxscript"):
            if importlib.util.find_spec(pkg) is None:
                return f"exporting to ONNX needs the {pkg} package (pip install 'dnnprof[bench]')"
    if name in ("onnxruntime", "onnxruntime-trt"):
        if importlib.util.find_spec("onnxruntime") is None:
            return "onnxruntime is not installed (pip install 'dnnprof[bench]', or onnxruntime-gpu for CUDA)"
        import onnxruntime as ort

        want = "TensorrtExecutionProvider" if name == "onnxruntime-trt" else (
            "CUDAExecutionProvider" if source.device == "cuda" else "CPUExecutionProvider")
        if want not in ort.get_available_providers():
            return f"this onnxruntime has no {want} (has {', '.join(ort.get_available_providers())})"
    if name == "tensorrt":
        if source.device != "cuda":
            return "TensorRT needs --device cuda"
        if importlib.util.find_spec("tensorrt") is None:
            return "tensorrt is not installed (pip install tensorrt)"
    if name == "openvino":
        if source.device != "cpu":
            return "OpenVINO runs on the CPU here: use --device cpu"
        if importlib.util.find_spec("openvino") is None:
            return "openvino is not installed (pip install 'dnnprof[bench]')"
    return None


def prepare(name: str, source: Source, buffers: tuple[Any, ...], batch_size: int, onnx: Any) -> Runner:
    """Backend ``name`` ready to run on ``buffers`` (``onnx``: an ``OnnxFiles`` cache for the ONNX backends).

    Raises:
        BackendError: preparing failed (export, compile, engine build, graph capture); the message says which.
    """
    from dnnprof.bench import backends_onnx, backends_torch

    makers: dict[str, Callable[[], Runner]] = {
        "eager": lambda: backends_torch.eager(source, buffers),
        "cuda-graph": lambda: backends_torch.cuda_graph(source, buffers),
        "compile": lambda: backends_torch.compiled(source, buffers, "default"),
        "compile-max-autotune": lambda: backends_torch.compiled(source, buffers, "max-autotune"),
        "compile-reduce-overhead": lambda: backends_torch.compiled(source, buffers, "reduce-overhead"),
        "onnxruntime": lambda: backends_onnx.onnxruntime(source, buffers, onnx.path(batch_size), trt=False),
        "onnxruntime-trt": lambda: backends_onnx.onnxruntime(source, buffers, onnx.path(batch_size), trt=True),
        "tensorrt": lambda: backends_onnx.tensorrt(source, buffers, onnx.path(batch_size)),
        "openvino": lambda: backends_onnx.openvino(source, buffers, onnx.path(batch_size)),
    }
    try:
        return makers[name]()
    except BackendError:
        raise
    except Exception as e:
        raise BackendError(f"{name}: {type(e).__name__}: {_first_line(e)}") from e


def flatten(out: Any) -> list[Any]:
    """Tensors/arrays of a model's output in a fixed order (tuples, lists, dicts and HF ModelOutputs)."""
    if out is None:
        return []
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return [out]
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        return [x for v in out.values() for x in flatten(v)]
    if isinstance(out, (list, tuple)):
        return [x for v in out for x in flatten(v)]
    return []


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:300]
