"""``dnnprof occupancy``: the exact CUDA occupancy calculator, for one launch or a JSONL batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError

#: Keys a ``--batch`` line may carry: required ones, then optional ones with their defaults.
BATCH_REQUIRED = ("cc", "block_size", "registers_per_thread")
BATCH_OPTIONAL: dict[str, Any] = {
    "static_smem": 0,
    "dynamic_smem": 0,
    "max_dynamic_smem": None,
    "carveout_pct": None,
    "smem_config_bytes": None,
    "barriers": 1,
}


def register(app: typer.Typer) -> None:
    """Add the ``occupancy`` command to ``app``."""

    @app.command("occupancy")
    def occupancy(
        cc: str | None = typer.Option(None, "--cc", help="Compute capability, e.g. 9.0 (H100/H200)."),
        block_size: int | None = typer.Option(None, "--block-size", help="Threads per block."),
        registers: int | None = typer.Option(None, "--registers", help="Registers per thread."),
        static_smem: int = typer.Option(0, "--static-smem", help="Static shared memory per block, bytes."),
        dynamic_smem: int = typer.Option(0, "--dynamic-smem", help="Dynamic shared memory per block, bytes."),
        max_dynamic_smem: int | None = typer.Option(
            None,
            "--max-dynamic-smem",
            help="The function's MaxDynamicSharedMemorySize attribute, bytes (default: opted in to the maximum).",
        ),
        carveout: int | None = typer.Option(
            None,
            "--carveout",
            help="Preferred shared-memory carveout, percent 0..100 (default: driver default).",
        ),
        smem_config: int | None = typer.Option(
            None,
            "--smem-config",
            help="Shared-memory configuration the driver chose, bytes (ncu launch__shared_mem_config_size).",
        ),
        barriers: int = typer.Option(
            1, "--barriers", help="Named barriers per block (sm_90+; __syncthreads = 1)."
        ),
        as_json: bool = opt.json_flag(),
        batch: str | None = typer.Option(
            None,
            "--batch",
            help="JSONL file (or - for stdin): one configuration per line, one JSON result out.",
        ),
    ) -> None:
        """Theoretical occupancy, limiters and allocation of a kernel launch (equals the CUDA driver's answer)."""
        if batch is not None:
            _run_batch(Path(batch))
            return
        missing = [
            n
            for n, v in (("--cc", cc), ("--block-size", block_size), ("--registers", registers))
            if v is None
        ]
        if missing:
            raise UserError(f"occupancy: missing {', '.join(missing)} (or give --batch FILE.jsonl)")
        from dnnprof.analysis.occupancy import OccupancyInputError, compute_occupancy

        try:
            res = compute_occupancy(
                cc or "",
                block_size or 0,
                registers or 0,
                static_smem,
                dynamic_smem,
                max_dynamic_smem=max_dynamic_smem,
                carveout_pct=carveout,
                smem_config_bytes=smem_config,
                barriers_per_block=barriers,
            )
        except OccupancyInputError as e:
            raise UserError(f"occupancy: {e}") from None
        if as_json:
            typer.echo(json.dumps(res.to_dict()))
        else:
            _print_table(res)


def _run_batch(path: Path) -> None:
    from dnnprof.analysis.occupancy import OccupancyInputError, compute_occupancy

    name = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{name}: cannot read: {e.strerror or e}") from None
    out: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{name}:{lineno}: not valid JSON: {e.msg}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - set(BATCH_REQUIRED) - set(BATCH_OPTIONAL))
        if unknown:
            raise UserError(f"{name}:{lineno}: unknown key(s) {', '.join(unknown)}")
        missing = [k for k in BATCH_REQUIRED if obj.get(k) is None]
        if missing:
            raise UserError(f"{name}:{lineno}: missing key(s) {', '.join(missing)}")
        args = {**BATCH_OPTIONAL, **obj}
        for k in ("static_smem", "dynamic_smem", "barriers"):
            if args[k] is None:
                args[k] = BATCH_OPTIONAL[k]
        try:
            res = compute_occupancy(
                args["cc"],
                args["block_size"],
                args["registers_per_thread"],
                args["static_smem"],
                args["dynamic_smem"],
                max_dynamic_smem=args["max_dynamic_smem"],
                carveout_pct=args["carveout_pct"],
                smem_config_bytes=args["smem_config_bytes"],
                barriers_per_block=args["barriers"],
            )
        except OccupancyInputError as e:
            raise UserError(f"{name}:{lineno}: {e}") from None
        out.append(json.dumps(res.to_dict()))
    if out:
        typer.echo("\n".join(out))


def _print_table(res: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (
        f"sm_{res.cc.replace('.', '')}: {res.block_size} threads, {res.registers_per_thread} registers, "
        f"{res.static_smem} B static + {res.dynamic_smem} B dynamic shared memory"
    )
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("resource")
    table.add_column("blocks/SM", justify="right")
    table.add_column("limiter", justify="center")
    for name, value in res.limits.items():
        shown = "no limit" if value is None else str(value)
        if name == "barriers" and value is None:
            shown = "n/a"
        table.add_row(name, shown, "*" if name in res.limiters else "")
    console = Console()
    console.print(table)
    console.print(
        f"Theoretical occupancy: [bold]{res.occupancy_pct:.2f} %[/bold] — {res.active_blocks_per_sm} blocks = "
        f"{res.active_warps_per_sm} of {res.max_warps_per_sm} warps per SM; "
        f"limited by {' + '.join(res.limiters) or 'nothing'}"
    )
    console.print(
        f"Allocated: {res.registers_per_warp_allocated} registers/warp, {res.registers_per_block_allocated} "
        f"registers/block; {res.smem_per_block_allocated_bytes} B shared memory/block "
        f"(incl. {res.smem_reserved_per_block_bytes} B reserved; per-block limit {res.smem_per_block_limit_bytes} B) "
        f"of a {res.smem_config_bytes} B shared-memory configuration"
    )
    if res.reason:
        console.print(f"[red]Cannot launch:[/red] {res.reason}")
