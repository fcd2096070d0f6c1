"""``dnnprof bench WORKLOAD | --onnx FILE | -- python script.py``: an inference benchmark across backends."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli.errors import UserError

_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
PRECISIONS = ("fp32", "fp64", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16")


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]`` (positive, distinct, in the given order)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise UserError(f"--batch-sizes: {part!r} is not a positive integer (give e.g. 1,8,64)")
        if int(part) not in out:
            out.append(int(part))
    return out


def parse_backends(text: str) -> list[str]:
    from dnnprof.bench.backends import BACKENDS

    out: list[str] = []
    for name in (p.strip() for p in text.split(",")):
        if name not in BACKENDS:
            raise UserError(f"--backends: unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
        if name not in out:
            out.append(name)
    return out


def _device(device: str | None) -> str:
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise UserError(f"--device: unknown device {device!r}; use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: torch sees no CUDA GPU; use --device cpu")
    return device


def source_spec(workload: str | None, onnx: Path | None, extra: list[str], *, device: str, precision: str,
                batch_sizes: list[int]) -> dict[str, Any]:
    """Which of the three sources the arguments name (exactly one), as a spec."""
    from dnnprof.bench.sources import PYTHON_NAMES, onnx_spec, script_spec, workload_spec

    # After ``--`` click hands the first word to WORKLOAD: ``-- python x.py`` arrives as ("python", ["x.py"]).
    scripted = workload is not None and (workload.endswith(".py") or Path(workload).name in PYTHON_NAMES)
    command = [workload, *extra] if scripted else extra
    given = [x for x in (command and "a script", onnx and "--onnx",
                         workload is not None and not scripted and "a workload") if x]
    if len(given) != 1:
        raise UserError("give one thing to benchmark: a workload name, --onnx FILE, or -- python script.py"
                        + (f" (got {' and '.join(given)})" if given else ""))
    if onnx is not None:
        return onnx_spec(str(onnx), device=device, precision=precision)
    if command:
        return script_spec(command, device=device, precision=precision)
    return workload_spec(str(workload), device=device, precision=precision, max_batch=max(batch_sizes))


def bench(
    ctx: typer.Context,
    workload: str | None = typer.Argument(None, help="Workload name (dnnprof workloads lists them)."),
    onnx: Path | None = typer.Option(None, "--onnx", help="Benchmark this ONNX file instead."),
    batch_sizes: str = typer.Option("1,8", "--batch-sizes", help="Comma-separated batch sizes."),
    precision: str = typer.Option("fp32", "--precision", help="fp32|fp64|tf32|fp16|bf16|amp-fp16|amp-bf16."),
    warmup: int = typer.Option(10, "--warmup", help="Untimed iterations first (after compile/build)."),
    iterations: int | None = typer.Option(None, "--iterations", help="Timed iterations (default 100)."),
    duration: float | None = typer.Option(None, "--duration", help="Time for this many seconds instead."),
    backends: str = typer.Option("eager,cuda-graph,compile,onnxruntime,tensorrt,openvino", "--backends",
                                 help="Comma-separated: eager, cuda-graph, compile, compile-max-autotune, "
                                      "compile-reduce-overhead, onnxruntime, onnxruntime-trt, tensorrt, openvino."),
    device: str | None = typer.Option(None, "--device", help="cuda|cpu (default: cuda when there is one)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the dnnprof.bench/1 document here ('-': "
                                                              "stdout)."),
    profile: bool = typer.Option(False, "--profile", help="Then profile each backend that ran (one pass each, its "
                                                          "own run directory)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table, only errors (and --json)."),
) -> None:
    """Inference benchmark across backends, trtexec-style: throughput, latency percentiles, H2D / compute / D2H,
    enqueue time, CV, diagnoses and the batch-size knee. Every backend's outputs are checked against eager.

    A script hands over its model through a function dnnprof_bench() returning (model, example_inputs); see
    docs/bench.md. Exit code 1 when a backend's outputs are wrong.
    """
    sizes = parse_batch_sizes(batch_sizes)
    names = parse_backends(backends)
    if precision not in PRECISIONS:
        raise UserError(f"--precision: unknown precision {precision!r}; precisions: {', '.join(PRECISIONS)}")
    if iterations is not None and duration is not None:
        raise UserError("give --iterations or --duration, not both")
    if (iterations is not None and iterations < 1) or (duration is not None and duration <= 0) or warmup < 0:
        raise UserError("--iterations and --duration must be positive, --warmup at least 0")
    extra = [a for a in ctx.args if a != "--"]
    dev = _device(device)
    spec = source_spec(workload, onnx, extra, device=dev, precision=precision, batch_sizes=sizes)

    from dnnprof.analysis.bench_report import bench_document
    from dnnprof.bench.session import run_bench
    from dnnprof.bench.sources import SourceError, build_source
    from dnnprof.bench.trial import Settings
    from dnnprof.workloads.errors import WorkloadError

    settings = Settings(warmup=warmup, iterations=None if duration else (iterations or 100), duration_s=duration)
    # logs and pipes: a line per stage, so a timeout says where (none yet: still loading the model); an error
    # while loading stays one line
    lines = not quiet and not sys.stderr.isatty()
    try:
        source = build_source(spec)
        if source.onnx_path is not None:
            source.inputs(sizes[0])  # a fixed batch in the file that the sizes do not match: say so now
    except (SourceError, WorkloadError) as e:
        raise UserError(str(e)) from None
    try:
        with _progress(enabled=not quiet and sys.stderr.isatty(), total=len(names) * len(sizes),
                       lines=lines) as progress:
            raw = run_bench(source, names, sizes, settings, progress=progress)
    finally:
        source.close()
    if profile:
        _profile_pass(spec, raw)
    doc = bench_document(raw)
    if json_out is not None:
        from dnnprof.render.json_out import write_json

        write_json(doc, json_out)
    if not quiet and str(json_out) != "-":
        from dnnprof.render.bench_table import print_table

        print_table(doc)
    if any(r["status"] == "wrong" for r in doc["results"]):
        raise typer.Exit(1)


def _profile_pass(spec: dict[str, Any], raw: dict[str, Any]) -> None:
    """One profiled pass per backend that ran, at its first measured batch size; the run directory is linked."""
    from dnnprof.bench.profile_pass import profile_backend
    from dnnprof.runs.finish import ChildRefused
    from dnnprof.runs.rundir import RunDirError

    seen: set[str] = set()
    for t in raw["trials"]:
        if t["status"] != "ok" or t["backend"] in seen:
            continue
        seen.add(t["backend"])
        try:
            result = profile_backend(spec, t["backend"], t["batch_size"])
        except (ChildRefused, RunDirError, ValueError) as e:
            print(f"dnnprof: --profile {t['backend']}: {e}", file=sys.stderr)
            continue
        t["profile_run_dir"] = str(result.run_dir)
        for m in result.messages:
            print(f"dnnprof: --profile {t['backend']}: {m}", file=sys.stderr)


_T0 = time.monotonic()
#: Seconds between two redraws of the progress bar.
REFRESH_S = 0.1


def _line(text: str) -> None:
    print(f"dnnprof bench [{time.monotonic() - _T0:6.1f} s] {text}", file=sys.stderr, flush=True)


class _progress:
    """A rich progress bar on stderr while trials run on a terminal; elsewhere, with ``lines``, one line per stage
    (``eager batch 1: started``, ``… done``) so a log cut by a time limit shows what was running."""

    def __init__(self, *, enabled: bool, total: int, lines: bool = False) -> None:
        self.enabled, self.total, self.lines = enabled, total, lines
        self._bar: Any = None
        self._task: Any = None
        self._label, self._finished = "", False
        self._drawn = 0.0

    def _print(self, label: str, done: float) -> None:
        if label != self._label:
            self._label, self._finished = label, False
            _line(f"{label}: started ({min(int(done) + 1, self.total)}/{self.total})")
        elif done == int(done) and not self._finished:
            self._finished = True
            _line(f"{label}: done")

    def __enter__(self) -> Any:
        if not self.enabled:
            return self._print if self.lines else None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        # No refresh thread: drawing in one would take the GIL in the middle of a timed query. The bar is drawn
        # from the progress callback, which the timed loop calls between queries, at most REFRESH_S apart.
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.1f}/"
                             "{task.total:.0f}"), TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                             auto_refresh=False)
        self._bar.start()
        self._task = self._bar.add_task("bench", total=self.total)
        return self._update

    def _update(self, label: str, done: float) -> None:
        self._bar.update(self._task, description=label, completed=done)
        now = time.monotonic()
        if label != self._label or now - self._drawn >= REFRESH_S:
            self._label, self._drawn = label, now
            self._bar.refresh()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def register(app: typer.Typer) -> None:
    app.command("bench", context_settings=_CONTEXT,
                options_metavar="[OPTIONS] [WORKLOAD | --onnx FILE | -- python script.py ARGS...]")(bench)
