"""Spec-sheet peaks per GPU: SMs, clocks, dense FLOP/s per precision, memory bandwidth, L2, memory size.

These are the roofline ceilings used when a capture carries no Nsight Compute peak metrics. Every number is a
datasheet (or vendor whitepaper) value for **dense** math — NVIDIA's datasheets print tensor rates "with
sparsity"; those are halved here. ``None`` means the sources below do not state the value; a GPU that is not in
the table gives ``None`` from :func:`lookup_gpu` (never a guess from a similar part).

Precision keys (:data:`PRECISIONS`): ``fp64`` (FP64 FMA pipe), ``fp64_tensor`` (DMMA), ``fp32`` (FP32 FMA
pipe, non-tensor), ``tf32``/``fp16``/``bf16``/``fp8`` (tensor cores, FP32 accumulate where the sheet
distinguishes), ``int8`` (tensor TOPS).

Sources (public pages, as stored in the reference index):
* [H100] H100 SXM5/PCIe datasheet table as reproduced at archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html
  (sparse tensor values, "Specifications 1/2 lower without sparsity"); per-datatype dense table and clocks at
  glennklockwood.com/garden/processors/h100; reference/occupancy_ncu_nvml.md §5.
* [H200] reference/occupancy_ncu_nvml.md §5 and §6.1 (measured: 132 SMs, 60 MiB L2, 1980 MHz, 4.8 TB/s).
* [A100] NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) as tabulated at
  glennklockwood.com/garden/processors/A100 and upb-pc2.atlassian.net (PC2 "NVIDIA A100 40GB with NVLINK",
  deviceQuery: 108 SMs, 1410 MHz, L2 41943040 B).
* [A10] sysrqmts.com A10 PCIe spec page (72 SMs, 1695 MHz, 600.2 GB/s, 6 MB L2, 31.24 TFLOPS FP32); tensor rates
  from the NVIDIA A10 datasheet (62.5 TF32, 125 FP16/BF16, 250 INT8 dense).
* [L4] NVIDIA L4 datasheet values as listed at store.sourcecode.com and grokipedia "NVIDIA L4 vs L40S"
  (30.3 FP32, 120 TF32 / 242 FP16 / 485 FP8 and INT8 sparse, 300 GB/s), fpsbench.com (2040 MHz, 48 MB L2).
* [L40] L40/L40S datasheet table at mullet.se (product 355414) and omegaco.ae (L40S: 142 SMs' worth of 18,176
  CUDA cores, 864 GB/s, 91.6 FP32, 183/366 TF32, 362/733 FP16, 733/1466 FP8).
* [V100] developer.nvidia.com/programming-tensor-cores-cuda-9-0 (125 tensor TFLOPS), sysrqmts.com T4 vs V100
  (80 SMs, 1530 MHz SXM / 1380 MHz PCIe, 15.7 FP32, 7.8 FP64, 897 GB/s, 6 MB L2).
* [T4] sysrqmts.com T4 vs V100 and hmc-tech.com T4 vs V100 (40 SMs, 1590 MHz, 8.1 FP32, 65 FP16 tensor,
  130 INT8 tensor, 320 GB/s, 4 MB L2).
* [4090] waredb.com GeForce RTX 4090 (82.58 FP32, 82.58 TF32, 165.15 FP16/BF16 tensor with FP32 accumulate,
  660.6 INT8, 1008 GB/s, 72 MB L2) and techgoing.com (128 SMs, 2520 MHz boost).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Precision keys of :meth:`GpuSpec.peak_flops_per_s`.
PRECISIONS = ("fp64", "fp64_tensor", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")

_MiB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet numbers for one GPU product. Rates are dense TFLOPS (TOPS for int8); None when unstated
    (V100 ships with 16 or 32 GB, so its memory size is None)."""

    name: str
    compute_capability: str
    sm_count: int
    boost_clock_mhz: float | None
    memory_gb: float | None
    memory_bandwidth_gb_s: float
    l2_bytes: int | None
    tflops: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def peak_flops_per_s(self, precision: str) -> float | None:
        """Peak rate in FLOP/s (OP/s for int8) for one of :data:`PRECISIONS`, or None when unknown."""
        if precision not in PRECISIONS:
            raise KeyError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        v = self.tflops.get(precision)
        return None if v is None else v * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_s * 1e9

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "compute_capability": self.compute_capability, "sm_count": self.sm_count,
            "boost_clock_mhz": self.boost_clock_mhz, "memory_gb": self.memory_gb,
            "memory_bandwidth_gb_s": self.memory_bandwidth_gb_s, "l2_bytes": self.l2_bytes,
            "peak_tflops": {p: self.tflops.get(p) for p in PRECISIONS}, "source": self.source,
        }


def _tf(fp64: float | None, fp64_tensor: float | None, fp32: float | None, tf32: float | None,
        fp16: float | None, bf16: float | None, fp8: float | None, int8: float | None) -> dict[str, float]:
    vals = dict(zip(PRECISIONS, (fp64, fp64_tensor, fp32, tf32, fp16, bf16, fp8, int8), strict=True))
    return {k: v for k, v in vals.items() if v is not None}


# Hopper dense rates: FP32 = 132 SM x 128 lanes x 2 x 1.98 GHz; tensor = 132 x 4096 FLOP/clk x 1.83 GHz [H100].
_H100_SXM_TF = _tf(33.5, 66.9, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9)
# H100 PCIe datasheet: 26 / 51 / 51 and sparse 756 / 1513 / 3026 -> dense halves [H100].
_H100_PCIE_TF = _tf(25.6, 51.2, 51.2, 378.0, 756.5, 756.5, 1513.0, 1513.0)
_A100_TF = _tf(9.7, 19.5, 19.5, 156.0, 312.0, 312.0, None, 624.0)  # [A100]

#: The table. Order matters only for readability; matching is by :data:`_RULES`.
SPECS: dict[str, GpuSpec] = {s.name: s for s in (
    GpuSpec("H100 SXM5 80GB", "9.0", 132, 1980, 80, 3350, 50 * _MiB, _H100_SXM_TF, "[H100]"),
    GpuSpec("H100 PCIe 80GB", "9.0", 114, None, 80, 2000, 50 * _MiB, _H100_PCIE_TF, "[H100]"),
    GpuSpec("H200 SXM 141GB", "9.0", 132, 1980, 141, 4800, 60 * _MiB, _H100_SXM_TF, "[H200]"),
    GpuSpec("A100 SXM4 40GB", "8.0", 108, 1410, 40, 1555, 40 * _MiB, _A100_TF, "[A100]"),
    GpuSpec("A100 SXM4 80GB", "8.0", 108, 1410, 80, 2039, 40 * _MiB, _A100_TF, "[A100]"),
    GpuSpec("A100 PCIe 40GB", "8.0", 108, 1410, 40, 1555, 40 * _MiB, _A100_TF, "[A100]"),
    GpuSpec("A100 PCIe 80GB", "8.0", 108, 1410, 80, 1935, 40 * _MiB, _A100_TF, "[A100]"),
    GpuSpec("A10", "8.6", 72, 1695, 24, 600, 6 * _MiB, _tf(None, None, 31.2, 62.5, 125, 125, None, 250), "[A10]"),
    GpuSpec("L4", "8.9", 58, 2040, 24, 300, 48 * _MiB, _tf(None, None, 30.3, 60, 121, 121, 242.5, 242.5), "[L4]"),
    GpuSpec("L40S", "8.9", 142, None, 48, 864, None, _tf(None, None, 91.6, 183, 362.05, 362.05, 733, 733),
            "[L40]"),
    GpuSpec("L40", "8.9", 142, None, 48, 864, None, _tf(None, None, 90.5, 90.5, 181.05, 181.05, 362, 362), "[L40]"),
    GpuSpec("V100 SXM2", "7.0", 80, 1530, None, 900, 6 * _MiB, _tf(7.8, None, 15.7, None, 125, None, None, None),
            "[V100]"),
    GpuSpec("V100 PCIe", "7.0", 80, 1380, None, 900, 6 * _MiB, _tf(7.0, None, 14.0, None, 112, None, None, None),
            "[V100]"),
    GpuSpec("T4", "7.5", 40, 1590, 16, 320, 4 * _MiB, _tf(None, None, 8.1, None, 65, None, None, 130), "[T4]"),
    GpuSpec("GeForce RTX 4090", "8.9", 128, 2520, 24, 1008, 72 * _MiB,
            _tf(None, None, 82.6, 82.6, 165.2, 165.2, None, 660.6), "[4090]"),
)}

_WORD = re.compile(r"[a-z0-9]+")
_NOISE = frozenset({"nvidia", "tesla", "geforce", "hbm3", "hbm3e", "hbm2", "hbm2e", "tensor", "core", "gpu"})


def _tokens(name: str) -> set[str]:
    return {t for t in _WORD.findall(name.lower()) if t not in _NOISE}


# (spec name, required tokens, forbidden tokens, memory rule) — first matching rule wins. The memory rule is
# "40"/"80" when the product exists in both sizes and the name or the memory size must say which.
_RULES: tuple[tuple[str, frozenset[str], frozenset[str], str], ...] = (
    ("H200 SXM 141GB", frozenset({"h200"}), frozenset({"nvl", "nvl2"}), ""),
    ("H100 PCIe 80GB", frozenset({"h100", "pcie"}), frozenset({"nvl"}), ""),
    ("H100 SXM5 80GB", frozenset({"h100"}), frozenset({"pcie", "nvl", "94gb", "96gb", "64gb"}), ""),
    ("A100 PCIe 40GB", frozenset({"a100", "pcie"}), frozenset(), "40"),
    ("A100 PCIe 80GB", frozenset({"a100", "pcie"}), frozenset(), "80"),
    ("A100 SXM4 40GB", frozenset({"a100"}), frozenset({"pcie"}), "40"),
    ("A100 SXM4 80GB", frozenset({"a100"}), frozenset({"pcie"}), "80"),
    ("A10", frozenset({"a10"}), frozenset(), ""),
    ("L40S", frozenset({"l40s"}), frozenset(), ""),
    ("L40", frozenset({"l40"}), frozenset(), ""),
    ("L4", frozenset({"l4"}), frozenset(), ""),
    ("V100 PCIe", frozenset({"v100", "pcie"}), frozenset(), ""),
    ("V100 SXM2", frozenset({"v100"}), frozenset({"pcie", "fhhl"}), ""),
    ("T4", frozenset({"t4"}), frozenset(), ""),
    ("GeForce RTX 4090", frozenset({"rtx", "4090"}), frozenset({"d", "laptop", "mobile"}), ""),
)


def _memory_class(tokens: set[str], memory_bytes: int | None) -> str:
    if "40gb" in tokens:
        return "40"
    if "80gb" in tokens:
        return "80"
    if memory_bytes is not None and memory_bytes > 0:
        return "80" if memory_bytes > 60 * 2**30 else "40"
    return ""


def lookup_gpu(name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The spec of a GPU by its device name (``torch.cuda.get_device_name``, nvidia-smi, ncu's display name).

    Matching is by whole words, case-insensitive, ignoring "NVIDIA"/"Tesla"/"GeForce": ``"NVIDIA H100 80GB HBM3"``
    → H100 SXM5, ``"NVIDIA A100-SXM4-40GB"`` → A100 SXM4 40GB, ``"Tesla T4"`` → T4. A product sold with two memory
    sizes (A100) needs the size in the name or ``memory_bytes``. Unknown or ambiguous names give None.
    """
    toks = _tokens(name or "")
    if not toks:
        return None
    mem = _memory_class(toks, memory_bytes)
    for spec_name, required, forbidden, mem_rule in _RULES:
        if required <= toks and not (forbidden & toks):
            if mem_rule and mem != mem_rule:
                continue
            return SPECS[spec_name]
    return None
