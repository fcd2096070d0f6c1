"""The one bootstrap (``collect/_boot/sitecustomize.py``): every installer whose variable is set runs once, in order,
as in a sweep's profile trial (``dnnprof sweep`` then ``dnnprof run`` both put it on PYTHONPATH); a failing installer
is reported and the others still run; the environment's own sitecustomize runs after it, once."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from dnnprof.collect import bootstrap, trial_hooks
from dnnprof.collect.config import BOOT_DIR, ENV_OWNER, ENV_PKG_ROOT, ENV_RUN_DIR, with_boot

SITE = BOOT_DIR / "sitecustomize.py"

# Runs inside the child: which installers are live (each inserts its torch import watcher).
PROBE = """
import json, os, sys
watchers = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "TorchImportWatcher"]
hooks = sys.modules.get("dnnprof.collect.trial_hooks")
print(json.dumps({"watchers": len(watchers), "collector": "dnnprof.collect.bootstrap" in sys.modules,
                  "trial_hooks": hooks is not None and hooks._state is not None,
                  "owner": os.environ.get("DNNPROF_OWNER_PID"), "pid": os.getpid()}))
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    own = tmp_path / "site"
    own.mkdir(exist_ok=True)
    (own / "sitecustomize.py").write_text("import sys\nprint('environment sitecustomize ran', file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DNNPROF_")}
    # The environment's own sitecustomize first after the bootstrap; then whatever made dnnprof importable here.
    env["PYTHONPATH"] = os.pathsep.join([str(own), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = with_boot(with_boot(env))  # as a sweep's profile trial: the sweep's, then `dnnprof run`'s
    env.update(extra)
    return env


def _installers() -> list[tuple[str, str, str | None, str, str | None]]:
    tree = ast.parse(SITE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "INSTALLERS":
            return list(ast.literal_eval(node.value))
    raise AssertionError("no INSTALLERS table in the bootstrap")


def test_the_table_names_the_variables_and_files_the_parents_use() -> None:
    table = _installers()
    assert [row[0] for row in table] == [ENV_RUN_DIR, trial_hooks.ENV_TRIAL]
    assert table[0][1:] == ("dnnprof.collect.bootstrap:install", ENV_OWNER, table[0][3], bootstrap.BOOT_ERROR_FILE)
    assert table[1][1] == "dnnprof.collect.trial_hooks:install"
    assert f'ENV_PKG_ROOT = "{ENV_PKG_ROOT}"' in SITE.read_text()


def test_with_boot_puts_the_one_boot_dir_first_once(tmp_path: Path) -> None:
    env = with_boot(with_boot({"PYTHONPATH": f"a{os.pathsep}{BOOT_DIR}{os.pathsep}b"}))
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_DIR), "a", "b"]
    assert (Path(env[ENV_PKG_ROOT]) / "dnnprof" / "__init__.py").is_file()
    assert with_boot({})["PYTHONPATH"] == str(BOOT_DIR)


def test_both_installers_run_once_and_chain_to_the_environment_sitecustomize(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = tmp_path / "script.json"
    env = _env(tmp_path, DNNPROF_RUN_DIR=str(run_dir), DNNPROF_SWEEP_TRIAL="t1", DNNPROF_SWEEP_RESULT=str(result))
    # The boot dir twice on the path, as when `dnnprof run` is started under a sweep that did not deduplicate.
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Error in sitecustomize" not in proc.stderr and "RecursionError" not in proc.stderr
    assert proc.stderr.count("environment sitecustomize ran") == 1
    seen = json.loads(proc.stdout)
    assert seen["watchers"] == 2 and seen["collector"] and seen["trial_hooks"]
    assert seen["owner"] == str(seen["pid"])
    assert json.loads(result.read_text())["torch_imported"] is False  # the trial hooks reported at exit
    assert not (run_dir / bootstrap.BOOT_ERROR_FILE).exists()


def test_no_variable_no_installer(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {**seen, "watchers": 0, "collector": False, "trial_hooks": False, "owner": None}
    assert proc.stderr.count("environment sitecustomize ran") == 1


def test_a_failing_installer_is_reported_and_the_script_still_runs(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "dnnprof"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no dnnprof here')\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = _env(tmp_path, DNNPROF_RUN_DIR=str(run_dir), DNNPROF_SWEEP_TRIAL="t1")
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(broken.parent), env["PYTHONPATH"]])
    env.pop(ENV_PKG_ROOT)
    proc = subprocess.run([sys.executable, "-c", "print('script ran')"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "script ran"
    assert ("dnnprof: collector could not start (ImportError: no dnnprof here); the script runs unprofiled"
            in proc.stderr)
    assert "dnnprof sweep: trial hooks could not start (ImportError: no dnnprof here)" in proc.stderr
    assert (run_dir / bootstrap.BOOT_ERROR_FILE).read_text() == "ImportError: no dnnprof here\n"
    assert proc.stderr.count("environment sitecustomize ran") == 1
