"""The profiled process of ``dnnprof profile WORKLOAD``: build the workload, step it, mark every step.

Run by the session as ``python -m dnnprof.collect.workload_main --workload NAME --knobs JSON`` with the collector
bootstrap active; it runs exactly as many steps as the collector's plan needs, then exits. Without a collector
(run by hand) it runs ``--max-steps`` steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import dnnprof
from dnnprof.collect.config import ENV_RUN_DIR
from dnnprof.model.run_format import CHILD_ERROR_FILE


def _fail(message: str) -> int:
    """Leave the error for the parent (which prints it once), or print it when run by hand."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if run_dir and os.path.isdir(run_dir):
        with open(os.path.join(run_dir, CHILD_ERROR_FILE), "w") as f:
            f.write(message + "\n")
    else:
        print(f"dnnprof: error: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dnnprof.collect.workload_main")
    p.add_argument("--workload", required=True)
    p.add_argument("--knobs", default="{}", help="workload knobs as a JSON object")
    p.add_argument("--max-steps", type=int, default=30, help="steps to run when no collector is active")
    args = p.parse_args(argv)
    from dnnprof.workloads import WorkloadError, build

    try:
        workload = build(args.workload, json.loads(args.knobs))
    except WorkloadError as e:
        return _fail(str(e))
    from dnnprof.collect.bootstrap import controller

    ctl = controller()
    limit = args.max_steps
    if ctl is not None:
        info = {**workload.describe(), "name": workload.spec.name}
        ctl.set_workload(info, list(workload.modules()), list(workload.optimizers))
    with workload:
        done = 0
        previous = workload.items_processed
        while done < (limit if ctl is None else ctl.plan.total_steps + 1):  # a steady warm-up extends the plan
            workload.step()
            items = workload.items_processed - previous
            previous = workload.items_processed
            done += 1
            dnnprof.step(items=items)
            if ctl is not None and ctl.done:
                break
        workload.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
