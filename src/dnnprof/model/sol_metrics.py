"""The Nsight Compute metrics that make up the two speed-of-light throughputs, for a cheaper collection.

ncu's "Compute (SM) Throughput" (``sm__throughput``) and "Memory Throughput" (``gpu__compute_memory_throughput``)
are each the maximum of a breakdown of unit throughputs (``ncu --metrics breakdown:<metric>`` lists them). Asking
for the two top-level metrics makes ncu collect every part: 10 replay passes per kernel launch on an H100/H200
with Nsight Compute 2025.3, and each pass of a kernel replays it after restoring all the device memory the
process holds. The parts listed here are the ones that decide the maximum in practice:

* measured on a GPT-2 training step (bf16 autocast, AdamW; H100, 75 launches covering 95.8 % of the step's GPU
  time): the maximum over these parts equals ncu's own throughput on every launch, so every bound class agrees;
* the pipes a workload of another precision saturates are added (FP64, FMA, ALU, shared pipe, L1 banks, L2 data),
  so an fp64 or fp32 kernel is not mistaken for a latency-bound one.

A throughput computed from parts can only be lower than ncu's (a maximum over a subset); the analysis says which
source each number came from. Names are the ``.avg.pct_of_peak_sustained_elapsed`` form on sm_70 and later.
"""

from __future__ import annotations

SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
PCT = ".avg.pct_of_peak_sustained_elapsed"

#: Parts of ``sm__throughput``: instruction issue and the execution pipes.
SM_THROUGHPUT_PARTS = tuple(m + PCT for m in (
    "sm__inst_executed", "sm__issue_active", "sm__pipe_tensor_cycles_active", "sm__pipe_fp64_cycles_active",
    "sm__pipe_fma_cycles_active", "sm__pipe_fmaheavy_cycles_active", "sm__pipe_alu_cycles_active",
    "sm__pipe_shared_cycles_active", "sm__inst_executed_pipe_adu", "sm__inst_executed_pipe_xu",
    "sm__inst_executed_pipe_lsu",
))
#: Parts of ``gpu__compute_memory_throughput``: DRAM, L2 and L1 traffic.
MEMORY_THROUGHPUT_PARTS = tuple(m + PCT for m in (
    "dram__cycles_active", "l1tex__data_pipe_lsu_wavefronts", "l1tex__data_bank_reads", "l1tex__data_bank_writes",
    "lts__t_sectors", "lts__t_tag_requests", "lts__xbar2lts_cycles_active", "lts__lts2xbar_cycles_active",
    "lts__d_sectors",
))
