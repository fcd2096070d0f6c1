"""What ``dnnprof bench`` measures: a built-in workload, an ONNX file, or a model a user's script hands over.

A ``Source`` gives, for any batch size, the example inputs (CPU tensors, batch first) and either a PyTorch
module or an ONNX file. Building one is cheap to call again: the ``--profile`` pass rebuilds it in a child.

The script hook: the user's script defines a function ``dnnprof_bench`` (its ``if __name__ == "__main__"`` block
does not run) returning ``(model, example_inputs)`` or ``(model, example_inputs, tokens_per_sample)``. When the
function takes a parameter it is called with each batch size; otherwise dnnprof repeats the example's rows.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import runpy
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Name of the function a user's script defines for ``dnnprof bench -- python script.py``.
HOOK = "dnnprof_bench"
#: Module name the script runs under, so its ``if __name__ == "__main__":`` block stays quiet.
SCRIPT_MODULE_NAME = "__dnnprof_bench__"
#: Interpreter names accepted before the script (``-- python script.py``).
PYTHON_NAMES = ("python", "python3")


class SourceError(ValueError):
    """The thing to benchmark cannot be loaded (bad ONNX file, script without the hook, bad example inputs)."""


@dataclass
class Source:
    """The model under test and how to make its inputs.

    Attributes:
        name: what the report calls it (workload name, ONNX file name, script name).
        kind: ``workload``, ``onnx`` or ``script``.
        device: ``cpu`` or ``cuda``.
        precision: the precision knob (fp32, fp16, bf16, amp-fp16, amp-bf16, fp64, tf32).
        model: the PyTorch module on ``device`` in eval mode (None for an ONNX file).
        onnx_path: the ONNX file (for ``--onnx``).
        input_names: names of the inputs, in call order.
        tokens_per_sample: tokens in one sample, when the model reads tokens (for tokens/s); else None.
        spec: how to rebuild this source in another process (JSON-ready).
    """

    name: str
    kind: str
    device: str
    precision: str
    make_inputs: Callable[[int], tuple[Any, ...]]
    model: Any = None
    onnx_path: Path | None = None
    input_names: list[str] = field(default_factory=list)
    tokens_per_sample: float | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    _made: dict[int, tuple[Any, ...]] = field(default_factory=dict, repr=False)

    def inputs(self, batch_size: int) -> tuple[Any, ...]:
        """Example inputs for ``batch_size`` (CPU tensors, already in the precision's input dtype). Made once per
        batch size: a script's hook may build its whole model to return them."""
        if batch_size not in self._made:
            self._made[batch_size] = self.make_inputs(batch_size)
        return self._made[batch_size]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for amp-* precisions, else a no-op context."""
        import torch

        dtype = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        # No weight-cast cache: a CUDA graph captured under autocast must not keep casts made outside it.
        return torch.autocast(device_type=self.device, dtype=dtype, cache_enabled=False)


def build_source(spec: dict[str, Any]) -> Source:
    """A source from its spec: ``{"kind": "workload"|"onnx"|"script", ...}`` (see the ``*_spec`` functions)."""
    kind = spec["kind"]
    if kind == "workload":
        return _workload_source(spec)
    if kind == "onnx":
        return _onnx_source(spec)
    if kind == "script":
        return _script_source(spec)
    raise SourceError(f"unknown source kind {kind!r}")


def workload_spec(name: str, *, device: str, precision: str, max_batch: int, seed: int = 0) -> dict[str, Any]:
    return {"kind": "workload", "name": name, "device": device, "precision": precision, "max_batch": max_batch,
            "seed": seed}


def onnx_spec(path: str, *, device: str, precision: str) -> dict[str, Any]:
    return {"kind": "onnx", "path": str(Path(path).resolve()), "device": device, "precision": precision}


def script_spec(command: list[str], *, device: str, precision: str) -> dict[str, Any]:
    """The spec of ``-- python script.py ARGS`` (or ``-- script.py ARGS``)."""
    if (command and os.path.basename(command[0]) in PYTHON_NAMES) or (command and command[0] == sys.executable):
        command = command[1:]
    if not command:
        raise SourceError("no script given after --: dnnprof bench -- python script.py")
    if command[0].startswith("-"):
        raise SourceError(f"python options are not supported before the script ({command[0]}); "
                          "give: dnnprof bench -- python script.py ARGS")
    return {"kind": "script", "path": str(Path(command[0]).resolve()), "argv": command[1:], "device": device,
            "precision": precision}


# --- built-in workloads -----------------------------------------------------------------------------------------
class _WorkloadForward:
    """Calls ``workload.infer`` with positional tensors, so exporters and CUDA graphs see a plain module."""

    @staticmethod
    def make(workload: Any, keys: list[str]) -> Any:
        from torch import nn

        class WorkloadForward(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = workload.model  # registers the parameters

            def forward(self, *tensors: Any) -> Any:
                return workload.scores(dict(zip(keys, tensors, strict=False)))

        return WorkloadForward().eval()


def _workload_source(spec: dict[str, Any]) -> Source:
    from dnnprof.workloads import build

    wl = build(spec["name"], mode="infer", device=spec["device"], precision=spec["precision"],
               batch_size=int(spec["max_batch"]), num_workers=0, pin_memory=False, seed=int(spec.get("seed", 0)))
    batch = next(iter(wl.loader))
    keys = list(batch.keys())
    import torch

    cast = wl.plan.autocast_dtype is None and wl.plan.param_dtype != torch.float32
    full = tuple(t.to(wl.plan.param_dtype) if cast and t.is_floating_point() else t for t in batch.values())

    def make(b: int) -> tuple[Any, ...]:
        return _resize(full, b)

    tokens = float(wl.params["seq_len"]) if wl.spec.unit == "tokens/s" and "seq_len" in wl.params else None
    return Source(name=spec["name"], kind="workload", device=spec["device"], precision=spec["precision"],
                  make_inputs=make, model=_WorkloadForward.make(wl, keys), input_names=keys,
                  tokens_per_sample=tokens, spec=spec, close=wl.close)


# --- ONNX files -------------------------------------------------------------------------------------------------
_ONNX_TYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 6: "int32", 7: "int64", 9: "bool",
               2: "uint8", 3: "int8"}


def onnx_inputs(path: Path) -> list[tuple[str, list[int | None], str]]:
    """(name, shape with None for free dimensions, numpy dtype name) of each graph input that is not a weight.

    Raises:
        SourceError: the file cannot be read as an ONNX model.
    """
    try:
        import onnx
    except ImportError:
        raise SourceError("reading an ONNX file needs the onnx package: pip install 'dnnprof[bench]'") from None
    if not path.is_file():
        raise SourceError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises DecodeError, ValueError and others for a bad file
        raise SourceError(f"{path}: not a readable ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
    weights = {i.name for i in model.graph.initializer}
    found = []
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        dtype = _ONNX_TYPES.get(tt.elem_type)
        if dtype is None:
            raise SourceError(f"{path}: input {vi.name!r} has ONNX element type {tt.elem_type}, which dnnprof "
                              "cannot make example data for")
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        found.append((vi.name, shape, dtype))
    if not found:
        raise SourceError(f"{path}: the ONNX graph has no inputs (an empty or truncated file?)")
    return found


def _onnx_source(spec: dict[str, Any]) -> Source:
    import torch

    path = Path(spec["path"])
    inputs = onnx_inputs(path)
    for name, shape, _ in inputs:
        if not shape:
            raise SourceError(f"{path}: input {name!r} is a scalar; dnnprof needs a batch dimension first")
        if any(d is None for d in shape[1:]):
            raise SourceError(f"{path}: input {name!r} has a free dimension besides the batch ({shape}); "
                              "export the model with fixed shapes except the batch")

    def make(b: int) -> tuple[Any, ...]:
        gen = torch.Generator().manual_seed(0)
        out = []
        for name, shape, dtype in inputs:
            if shape[0] is not None and shape[0] != b:
                raise SourceError(f"{path}: input {name!r} fixes the batch at {shape[0]}; use --batch-sizes "
                                  f"{shape[0]} or export with a free batch dimension")
            dims = (b, *[int(d or 0) for d in shape[1:]])  # free dimensions were refused above
            tdt = getattr(torch, dtype)
            if tdt.is_floating_point:
                out.append(torch.randn(dims, generator=gen).to(tdt))
            elif tdt == torch.bool:
                out.append(torch.ones(dims, dtype=torch.bool))
            else:
                out.append(torch.randint(0, 100, dims, generator=gen).to(tdt))  # ids: small, valid for any vocab
        return tuple(out)

    return Source(name=path.name, kind="onnx", device=spec["device"], precision=spec["precision"],
                  make_inputs=make, onnx_path=path, input_names=[n for n, _, _ in inputs], spec=spec)


# --- a user's script ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _script_argv(path: Path, argv: list[str]) -> Iterator[None]:
    saved, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved, saved_path


def _script_source(spec: dict[str, Any]) -> Source:
    import torch

    path = Path(spec["path"])
    if not path.is_file():
        raise SourceError(f"{path}: no such script")
    with _script_argv(path, list(spec.get("argv") or [])):
        try:
            names = runpy.run_path(str(path), run_name=SCRIPT_MODULE_NAME)
        except SystemExit as e:
            raise SourceError(f"{path}: the script exited ({e.code}) while being imported; keep its work "
                              f"under `if __name__ == \"__main__\":` and define {HOOK}()") from None
    hook = names.get(HOOK)
    if not callable(hook):
        raise SourceError(f"{path}: defines no function {HOOK}(); add one returning (model, example_inputs) "
                          "(see docs/bench.md)")
    takes_batch = bool(inspect.signature(hook).parameters)
    device, precision = spec["device"], spec["precision"]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}.get(precision)

    def call(b: int | None) -> tuple[Any, tuple[Any, ...], float | None]:
        with _script_argv(path, list(spec.get("argv") or [])):  # the hook may read its script's arguments
            try:
                got = hook(b) if takes_batch else hook()
            except SystemExit as e:
                raise SourceError(f"{path}: {HOOK}() exited: {e.code}") from None
        if not isinstance(got, tuple) or len(got) not in (2, 3):
            raise SourceError(f"{path}: {HOOK}() must return (model, example_inputs) or "
                              "(model, example_inputs, tokens_per_sample)")
        model, inputs = got[0], got[1]
        if not isinstance(model, torch.nn.Module):
            raise SourceError(f"{path}: {HOOK}() returned a {type(model).__name__} as the model; expected an "
                              "nn.Module")
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
        if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in inputs):
            raise SourceError(f"{path}: {HOOK}()'s example inputs must be tensors with a batch dimension first")
        inputs = tuple(t.detach().cpu() for t in inputs)
        if dtype is not None:
            inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
        return model, inputs, (float(got[2]) if len(got) == 3 and got[2] else None)

    model, example, tokens = call(1 if takes_batch else None)
    model = model.to(device).eval()
    if dtype is not None:
        model = model.to(dtype)

    def make(b: int) -> tuple[Any, ...]:
        return call(b)[1] if takes_batch else _resize(example, b)

    return Source(name=path.name, kind="script", device=device, precision=precision, make_inputs=make,
                  model=model, input_names=[f"input_{i}" for i in range(len(example))],
                  tokens_per_sample=tokens, spec=spec)


def _resize(inputs: tuple[Any, ...], b: int) -> tuple[Any, ...]:
    """The first ``b`` rows of each input, repeating rows when the example has fewer."""
    import torch

    out = []
    for t in inputs:
        n = t.shape[0]
        if n >= b:
            out.append(t[:b].contiguous())
        else:
            reps = -(-b // n)
            out.append(torch.cat([t] * reps)[:b].contiguous())
    return tuple(out)
