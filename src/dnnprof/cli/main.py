"""The ``dnnprof`` command: one module per sub-command, each with a ``register(app)`` function."""

from __future__ import annotations

import importlib
import sys

import typer

from dnnprof import __version__
from dnnprof.cli.errors import UserError
from dnnprof.model.outputs import OutputError
from dnnprof.render.safe_text import clean

#: Sub-command modules under dnnprof.cli, in the order ``dnnprof --help`` lists them. Each module must import
#: cheaply (torch, pyarrow and friends are imported inside the command body).
COMMANDS = [
    "analyze",
    "diff",
    "device",
    "occupancy",
    "run",
    "profile",
    "workloads",
    "sweep",
    "report",
    "counters",
    "monitor",
    "query",
    "view",
    "bench",
]

app = typer.Typer(
    name="dnnprof",
    help="Why is my deep-learning job slow on an NVIDIA GPU, and what should I change?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: rich's help formatter alone costs ~0.15 s of start-up
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dnnprof {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """dnnprof: profile, analyse and explain deep-learning performance on NVIDIA GPUs."""


for _name in COMMANDS:
    importlib.import_module(f"dnnprof.cli.{_name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. User errors print one line on stderr and exit 2, no traceback."""
    try:
        # Without standalone mode click returns typer.Exit's code instead of exiting: pass it on.
        rc = app(args=argv, standalone_mode=False)
    except UserError as e:
        print(f"dnnprof: error: {clean(e)}", file=sys.stderr)
        return e.exit_code
    except OutputError as e:  # an output that would destroy what dnnprof did not write, or cannot be written
        print(f"dnnprof: error: {clean(e)}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        print("dnnprof: aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("dnnprof: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if isinstance(e, _click_exceptions()):  # a usage error: click's own message, exit 2
            e.show()
            return e.exit_code
        raise
    return rc if isinstance(rc, int) else 0


def _click_exceptions() -> tuple[type[Exception], ...]:
    """click's usage-error base class: typer >= 0.2x carries its own copy of click (``typer._click``), older typer
    uses the ``click`` package; either may raise."""
    found: list[type[Exception]] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


if __name__ == "__main__":
    sys.exit(main())
