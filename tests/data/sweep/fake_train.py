"""A stand-in training script for sweep tests: holds BATCH MiB of memory, and can fail or hang on request.

Usage: python fake_train.py BATCH_SIZE. Environment: MIB_PER_SAMPLE (default 1), FAIL_AT / HANG_AT (a batch size),
MARK (file that gets this process's pid when it hangs), LOG (file that gets one line per run: the batch size).
No torch, so a trial takes a fraction of a second; under ``--memory-limit`` the allocations hit RLIMIT_AS for real.
"""

import os
import sys
import time

batch = int(sys.argv[1])
if os.environ.get("LOG"):
    with open(os.environ["LOG"], "a") as f:
        f.write(f"{batch}\n")
if batch == int(os.environ.get("FAIL_AT") or 0):
    raise RuntimeError(f"planted failure at batch {batch}")
if batch == int(os.environ.get("HANG_AT") or 0):
    if os.environ.get("MARK"):
        with open(os.environ["MARK"], "w") as f:
            f.write(str(os.getpid()))
    time.sleep(3600)
held = [bytearray(1 << 20) for _ in range(batch * int(os.environ.get("MIB_PER_SAMPLE") or 1))]
print(f"batch {batch}: holding {len(held)} MiB")
