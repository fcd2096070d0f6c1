"""Orchestration around captures, in the parent process: run directories and their lifecycle (``session``,
``finish``, ``rundir``), the Nsight Compute counters pass, and sweeps (``sweep/``). It starts the profiled process,
whose own code is in ``dnnprof.collect``, and analyses what comes back."""
