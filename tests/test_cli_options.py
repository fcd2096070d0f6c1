"""CLI names are a public contract: every command's options (names, short forms, defaults, flags) against a
golden list. Regenerate with ``DNNPROF_REGOLD=1`` after adding an option, and review the diff: a name that
disappears or changes is a break for users' scripts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli.main import app

GOLDEN = Path(__file__).parent / "golden" / "cli_options.json"


# Typer may ship its own copy of click: parameters and groups are recognised by their attributes, not classes.
def _describe(param: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": param.name, "kind": param.param_type_name,
                           "opts": list(param.opts), "secondary_opts": list(param.secondary_opts),
                           "type": param.type.name, "required": param.required, "multiple": param.multiple,
                           "nargs": param.nargs}
    default = param.default
    out["default"] = default if default is None or isinstance(default, (bool, int, float, str)) else repr(default)
    if param.param_type_name == "option":
        out.update(is_flag=param.is_flag, count=param.count, hidden=param.hidden)
    return out


def cli_options() -> dict[str, list[dict[str, Any]]]:
    """``{"dnnprof analyze": [param, ...], ...}`` for every command and sub-command, in declaration order."""
    found: dict[str, list[dict[str, Any]]] = {}

    def walk(cmd: Any, path: str) -> None:
        found[path] = [_describe(p) for p in cmd.params]
        for name in sorted(getattr(cmd, "commands", {})):
            walk(cmd.commands[name], f"{path} {name}")

    walk(typer.main.get_command(app), "dnnprof")
    return found


def test_every_command_keeps_its_option_names() -> None:
    got = cli_options()
    if os.environ.get("DNNPROF_REGOLD"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(GOLDEN.read_text()), ("CLI options changed: rerun with DNNPROF_REGOLD=1 and review "
                                                   "the diff (renaming or dropping one breaks users' scripts)")


def test_shared_options_read_the_same_in_every_command() -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    for command in ("analyze", "diff"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"})
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        # rich's help formatting once dropped this bracket as a style tag; an escape would show as a backslash
        assert "[default: the only rank of a single-rank trace, else 0]" in text, command
        assert "\\[" not in text, command
        assert "Only errors and notes: no report or progress on the terminal" in text, command
