"""Backends that run an ONNX graph: ONNX Runtime (CPU, CUDA or TensorRT execution provider), TensorRT, OpenVINO.

A PyTorch source is exported once (``torch.onnx.export``, batch dimension free; per batch size when the
exporter cannot keep it free) into a temporary folder shared by these backends.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

from dnnprof.bench.backends import BackendError, Runner
from dnnprof.bench.sources import Source

#: Batch size of the example the exporter traces: 0 and 1 would be specialised into the graph by torch.export.
EXPORT_EXAMPLE_BATCH = 2
#: Largest batch a dynamically exported graph declares.
MAX_EXPORT_BATCH = 1 << 16
#: TensorRT builder workspace (bytes).
TRT_WORKSPACE_BYTES = 4 << 30


class OnnxFiles:
    """ONNX files of one source, exported on first use (one with a free batch, else one per batch size)."""

    def __init__(self, source: Source, folder: Path | None = None) -> None:
        self.source = source
        self._tmp = None if folder else tempfile.TemporaryDirectory(prefix="dnnprof-bench-")
        self.folder = Path(folder or self._tmp.name)  # type: ignore[union-attr]
        self._dynamic: Path | None = None
        self._dynamic_failed = False
        self._static: dict[int, Path] = {}
        self.errors: dict[int, str] = {}

    def path(self, batch_size: int) -> Path:
        """The ONNX file to run at ``batch_size`` (raises BackendError when the export fails)."""
        if self.source.onnx_path is not None:
            return self.source.onnx_path
        if self._dynamic is None and not self._dynamic_failed:
            try:
                self._dynamic = self._export(EXPORT_EXAMPLE_BATCH, dynamic=True)
            except Exception:  # noqa: BLE001 - any exporter failure: fall back to fixed shapes below
                self._dynamic_failed = True
        if self._dynamic is not None:
            return self._dynamic
        if batch_size in self.errors:
            raise BackendError(self.errors[batch_size])
        if batch_size not in self._static:
            try:
                self._static[batch_size] = self._export(batch_size, dynamic=False)
            except Exception as e:  # noqa: BLE001 - reported as the ONNX backends' error
                self.errors[batch_size] = f"ONNX export failed: {type(e).__name__}: {str(e).strip()[:300]}"
                raise BackendError(self.errors[batch_size]) from None
        return self._static[batch_size]

    def _export(self, batch_size: int, *, dynamic: bool) -> Path:
        import torch

        src = self.source
        example = tuple(t.to(src.device) for t in src.inputs(batch_size))
        path = self.folder / (f"{_stem(src.name)}-dyn.onnx" if dynamic else f"{_stem(src.name)}-b{batch_size}.onnx")
        kwargs: dict[str, Any] = {"input_names": list(src.input_names), "dynamo": True}
        if dynamic:
            batch = torch.export.Dim("batch", min=1, max=MAX_EXPORT_BATCH)
            shapes = tuple({0: batch} for _ in example)
            params = list(inspect.signature(src.model.forward).parameters.values())
            packed = len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL
            kwargs["dynamic_shapes"] = (shapes,) if packed else shapes  # forward(*tensors) takes them as one
        # The exporter prints its progress and logs warnings about absent optional packages: keep them quiet.
        quiet = logging.getLogger("torch.onnx")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(src.model, example, str(path), **kwargs)
        finally:
            quiet.setLevel(level)
        return path

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(name).stem) or "model"


def feeds_for(graph_inputs: list[str], source: Source, buffers: tuple[Any, ...]) -> list[Any]:
    """The buffer of each graph input, by name (an exporter drops inputs the model never reads, e.g. labels)."""
    names = list(source.input_names)
    if all(n in names for n in graph_inputs):
        return [buffers[names.index(n)] for n in graph_inputs]
    if len(graph_inputs) == len(buffers):
        return list(buffers)
    raise BackendError(f"the ONNX graph's inputs {graph_inputs} do not match the model's {names}")


def _numpy(t: Any) -> Any:
    return t.numpy() if hasattr(t, "numpy") else t


def onnxruntime(source: Source, buffers: tuple[Any, ...], path: Path, *, trt: bool) -> Runner:
    """An ``InferenceSession``; on CUDA the inputs and outputs stay on the GPU through IOBinding."""
    import onnxruntime as ort
    import torch

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if source.device == "cpu" and not trt:
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        feeds = {n: _numpy(b) for n, b in zip(names, feeds_for(names, source, buffers), strict=False)}  # CPU tensors share memory with these arrays
        return Runner(run=lambda: sess.run(None, feeds), note="CPUExecutionProvider")
    stream = str(torch.cuda.current_stream().cuda_stream)
    cuda_opts = {"device_id": str(torch.cuda.current_device()), "user_compute_stream": stream}
    providers: list[Any] = [("CUDAExecutionProvider", cuda_opts)]
    if trt:
        providers.insert(0, ("TensorrtExecutionProvider", {"device_id": cuda_opts["device_id"],
                                                           "user_compute_stream": stream,
                                                           "trt_fp16_enable": source.precision == "fp16"}))
    sess = ort.InferenceSession(str(path), opts, providers=providers)
    names = [i.name for i in sess.get_inputs()]
    buffers = tuple(feeds_for(names, source, buffers))
    first = sess.run(None, {n: b.cpu().numpy() for n, b in zip(names, buffers, strict=False)})
    outs = [torch.from_numpy(a).to(source.device) for a in first]
    binding = sess.io_binding()
    dev = torch.cuda.current_device()
    for n, b in zip(names, buffers, strict=False):
        binding.bind_input(n, "cuda", dev, _numpy_dtype(b), list(b.shape), b.data_ptr())
    for o, t in zip(sess.get_outputs(), outs, strict=False):
        binding.bind_output(o.name, "cuda", dev, _numpy_dtype(t), list(t.shape), t.data_ptr())

    def run() -> list[Any]:
        sess.run_with_iobinding(binding)
        return outs

    return Runner(run=run, note=providers[0][0], synchronous=True)


def _numpy_dtype(t: Any) -> Any:
    import torch

    return torch.empty((), dtype=t.dtype).numpy().dtype


def openvino(source: Source, buffers: tuple[Any, ...], path: Path) -> Runner:
    """OpenVINO on the CPU, the graph reshaped to this batch's static shapes (latency hint)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    names = [i.get_any_name() for i in model.inputs]
    buffers = tuple(feeds_for(names, source, buffers))
    model.reshape({n: list(b.shape) for n, b in zip(names, buffers, strict=False)})
    compiled = core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    arrays = [_numpy(b) for b in buffers]

    def run() -> list[Any]:
        request.infer(arrays)
        return [request.get_output_tensor(i).data for i in range(len(compiled.outputs))]

    return Runner(run=run, note="OpenVINO CPU, PERFORMANCE_HINT=LATENCY")


def tensorrt(source: Source, buffers: tuple[Any, ...], path: Path) -> Runner:
    """A TensorRT engine built from the ONNX file for this batch's shapes (trtexec's path, in-process)."""
    import tensorrt as trt
    import torch

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    major = int(trt.__version__.split(".")[0])
    # TensorRT 10 networks are explicit-batch only; before 10 the flag must be asked for.
    network = builder.create_network(0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BackendError(f"tensorrt: the ONNX parser refused the graph: {errors[:300]}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, TRT_WORKSPACE_BYTES)
    if source.precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif source.precision == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    elif source.precision == "tf32":
        config.set_flag(trt.BuilderFlag.TF32)
    names = [network.get_input(i).name for i in range(network.num_inputs)]
    buffers = tuple(feeds_for(names, source, buffers))
    profile = builder.create_optimization_profile()
    for name, b in zip(names, buffers, strict=False):
        profile.set_shape(name, tuple(b.shape), tuple(b.shape), tuple(b.shape))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BackendError("tensorrt: the engine build failed (see TensorRT's messages above)")
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()
    for name, b in zip(names, buffers, strict=False):
        context.set_input_shape(name, tuple(b.shape))
        context.set_tensor_address(name, b.data_ptr())
    outs = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) != trt.TensorIOMode.OUTPUT:
            continue
        dtype = torch.from_numpy(__import__("numpy").empty(0, dtype=trt.nptype(engine.get_tensor_dtype(name)))).dtype
        t = torch.empty(tuple(context.get_tensor_shape(name)), dtype=dtype, device=source.device)
        context.set_tensor_address(name, t.data_ptr())
        outs.append(t)

    def run() -> list[Any]:
        if not context.execute_async_v3(torch.cuda.current_stream().cuda_stream):
            raise BackendError("tensorrt: execute_async_v3 failed")
        return outs

    return Runner(run=run, note=f"TensorRT {trt.__version__}")
