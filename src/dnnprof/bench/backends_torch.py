"""PyTorch backends: eager, CUDA graphs (captured once, replayed), torch.compile in its three modes."""

from __future__ import annotations

from typing import Any

from dnnprof.bench.backends import BackendError, Runner, flatten
from dnnprof.bench.sources import Source

#: Eager runs before a CUDA graph is captured (cuDNN/cuBLAS pick algorithms and allocate workspaces).
GRAPH_WARMUP_RUNS = 3


def _forward(source: Source, model: Any, buffers: tuple[Any, ...]) -> Any:
    import torch

    def run() -> list[Any]:
        with torch.inference_mode(), source.autocast():
            return flatten(model(*buffers))

    return run


def eager(source: Source, buffers: tuple[Any, ...]) -> Runner:
    model = source.model
    return Runner(run=_forward(source, model, buffers), bare=lambda: model(*buffers))


def compiled(source: Source, buffers: tuple[Any, ...], mode: str) -> Runner:
    import torch

    fn = torch.compile(source.model, mode=None if mode == "default" else mode)
    forward = _forward(source, fn, buffers)
    if mode == "reduce-overhead":
        def run() -> list[Any]:
            torch.compiler.cudagraph_mark_step_begin()  # each query is a new step of its CUDA graph trees
            return forward()
        bare = None
    else:
        run, bare = forward, (lambda: fn(*buffers))
    run()  # compile now, not inside the warm-up count
    return Runner(run=run, close=_forget_compiled, note=f"torch.compile mode={mode}", bare=bare)


def _forget_compiled() -> None:
    """Drop the compiled code and its counters: no compiled code is in use after the trial, and a profiler in this
    process (which skips its module hooks while Dynamo's graph counters say otherwise) may hook modules again."""
    import torch

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def cuda_graph(source: Source, buffers: tuple[Any, ...]) -> Runner:
    """Capture one forward into a CUDA graph on static input buffers; ``run()`` replays it."""
    import torch

    forward = _forward(source, source.model, buffers)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_RUNS):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_out = forward()
    except RuntimeError as e:
        raise BackendError(f"cuda-graph: capture failed ({str(e).splitlines()[0][:200]}); the model syncs with "
                           "the host or changes shapes") from None

    def run() -> list[Any]:
        graph.replay()
        return static_out

    return Runner(run=run, close=graph.reset)
