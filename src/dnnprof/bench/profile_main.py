"""The profiled process of ``dnnprof bench --profile``: one backend at one batch size, each query a step.

Run as ``python -m dnnprof.bench.profile_main --spec JSON --backend NAME --batch-size N`` with the collector
bootstrap active (``dnnprof.runs.session.run_command``); it runs as many queries as the collector's plan needs.
"""

from __future__ import annotations

import argparse
import json
import sys

import dnnprof
from dnnprof.collect.workload_main import _fail


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dnnprof.bench.profile_main")
    p.add_argument("--spec", required=True, help="the source spec as a JSON object")
    p.add_argument("--backend", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--max-steps", type=int, default=30, help="queries to run when no collector is active")
    args = p.parse_args(argv)
    from dnnprof.bench.backends import BackendError, prepare
    from dnnprof.bench.backends_onnx import OnnxFiles
    from dnnprof.bench.sources import SourceError, build_source
    from dnnprof.collect.bootstrap import controller

    try:
        source = build_source(json.loads(args.spec))
        host = source.inputs(args.batch_size)
        buffers = tuple(t.to(source.device) for t in host)
        onnx = OnnxFiles(source)
        runner = prepare(args.backend, source, buffers, args.batch_size, onnx)
    except (SourceError, BackendError, ValueError) as e:
        return _fail(str(e))
    ctl = controller()
    done = 0
    try:
        while done < (args.max_steps if ctl is None else ctl.plan.total_steps + 1):  # steady warm-up extends it
            for dst, src in zip(buffers, host, strict=False):
                if dst is not src:
                    dst.copy_(src, non_blocking=True)
            outs = runner.run()
            for o in outs:
                if hasattr(o, "is_cuda") and o.is_cuda:
                    o.cpu()
            done += 1
            dnnprof.step(items=args.batch_size)
            if ctl is not None and ctl.done:
                break
    finally:
        runner.close()
        onnx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
