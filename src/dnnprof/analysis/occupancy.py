"""Theoretical occupancy, exactly as the CUDA driver computes it (``cuOccupancyMaxActiveBlocksPerMultiprocessor``).

The algorithm is NVIDIA's ``cuda_occupancy.h`` (CUDA 12.6): blocks per SM are the minimum of five limits —
warp slots, registers (allocated per warp in units of 256, warps spread over 4 sub-partitions), shared memory
(allocated per block in units of 128 B on sm_80+, plus the 1 KB the driver reserves per block, against the SM's
shared-memory carveout), the hardware block limit, and on sm_90+ the named-barrier limit. Every limit equal to the
minimum is a *limiter*. Nsight Compute reports the same numbers as ``launch__occupancy_limit_*`` and
``sm__maximum_warps_per_active_cycle_pct``; where ncu differs from the header we follow ncu (see ``docs/occupancy.md``):
the barrier limit is capped at the block limit, and when the shared-memory configuration the driver chose
(``launch__shared_mem_config_size``) is given, the shared-memory limit is computed against it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from dnnprof.analysis.factorize import row_keys
from dnnprof.model.device import DeviceInfo
from dnnprof.model.mapped_columns import release_pages_of

KB = 1024
#: Resource names, in the order limiters are reported (ncu's ``launch__occupancy_limit_<name>`` order).
RESOURCES = ("warps", "registers", "shared_memory", "blocks", "barriers")


class OccupancyInputError(ValueError):
    """A malformed input: negative size, unknown compute capability, carveout outside -1..100."""


@dataclass(frozen=True)
class ArchSpec:
    """Per-architecture occupancy constants (cuda_occupancy.h + CUDA Programming Guide "Technical Specifications").

    Device properties (``cudaDeviceProp``) may override the per-SM and per-block capacities; the allocation
    granularities, sub-partitions, block limit and carveout sizes are architectural and only come from here.
    """

    cc: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm_bytes: int  # the largest carveout = cudaDeviceProp.sharedMemPerMultiprocessor
    smem_per_block_optin_bytes: int  # sharedMemPerBlockOptin
    smem_alloc_unit_bytes: int  # shared memory is allocated per block in these units
    reserved_smem_per_block_bytes: int  # reservedSharedMemPerBlock (the driver's 1 KB on sm_80+)
    carveouts_bytes: tuple[int, ...]  # shared-memory capacities an SM can be configured to
    smem_per_block_bytes: int = 48 * KB  # sharedMemPerBlock: the limit without opt-in
    max_threads_per_block: int = 1024
    regs_per_sm: int = 64 * KB
    regs_per_block: int = 64 * KB
    max_regs_per_thread: int = 255  # the header checks 256, but ptxas never emits more than 255
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of 256 registers
    sub_partitions: int = 4  # warps of a block are spread over 4 SM sub-partitions (schedulers)
    warp_size: int = 32

    @property
    def name(self) -> str:
        """``"9.0"``-style compute capability."""
        return f"{self.cc[0]}.{self.cc[1]}"

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def has_barrier_limit(self) -> bool:
        """Hopper and later limit resident blocks by named barriers (2 x block limit per SM)."""
        return self.cc[0] >= 9


def _kb(*sizes: int) -> tuple[int, ...]:
    return tuple(s * KB for s in sizes)


#: Volta (V100): 96 KB unified smem, 256 B allocation unit, no reserved smem.
SM_70 = ArchSpec((7, 0), 2048, 32, 96 * KB, 96 * KB, 256, 0, _kb(0, 8, 16, 32, 64, 96))
#: Turing (T4, RTX 20): 32 warps/SM, 16 blocks/SM, smem 32 or 64 KB (a 0 % carveout still gives 32 KB).
SM_75 = ArchSpec((7, 5), 1024, 16, 64 * KB, 64 * KB, 256, 0, _kb(32, 64))
#: Ampere A100: 164 KB smem/SM, 163 KB/block opt-in, 128 B unit, 1 KB reserved per block.
SM_80 = ArchSpec((8, 0), 2048, 32, 164 * KB, 163 * KB, 128, KB, _kb(0, 8, 16, 32, 64, 100, 132, 164))
#: Ampere GA10x (RTX 30, A10, A40): 48 warps/SM, 16 blocks/SM, 100 KB smem/SM.
SM_86 = ArchSpec((8, 6), 1536, 16, 100 * KB, 99 * KB, 128, KB, _kb(0, 8, 16, 32, 64, 100))
#: Jetson Orin: GA10x warp/block limits with A100's 164 KB shared memory and carveouts.
SM_87 = ArchSpec((8, 7), 1536, 16, 164 * KB, 163 * KB, 128, KB, _kb(0, 8, 16, 32, 64, 100, 132, 164))
#: Ada (RTX 40, L4, L40): 48 warps/SM, 24 blocks/SM, 100 KB smem/SM.
SM_89 = ArchSpec((8, 9), 1536, 24, 100 * KB, 99 * KB, 128, KB, _kb(0, 8, 16, 32, 64, 100))
#: Hopper (H100, H200): 64 warps/SM, 32 blocks/SM, 228 KB smem/SM, 227 KB/block opt-in.
SM_90 = ArchSpec(
    (9, 0), 2048, 32, 228 * KB, 227 * KB, 128, KB, _kb(0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
)

#: Every architecture whose constants are documented. 10.x/12.x are absent: their allocation units and carveout
#: sizes are not in cuda_occupancy.h (CUDA 12.6), so a number for them would be a guess.
ARCHS: dict[tuple[int, int], ArchSpec] = {a.cc: a for a in (SM_70, SM_75, SM_80, SM_86, SM_87, SM_89, SM_90)}


def parse_cc(cc: str | float | tuple[int, int]) -> tuple[int, int]:
    """``"9.0"``, ``"9"``, ``"sm_90"``, ``9.0`` or ``(9, 0)`` -> ``(9, 0)``."""
    if isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(x, int) for x in cc):
        return cc
    if isinstance(cc, (int, float)) and not isinstance(cc, bool):
        cc = str(cc)
    if isinstance(cc, str):
        s = cc.strip().lower()
        if s.startswith("sm_") and s[3:].isdigit() and len(s) >= 5:
            return int(s[3:-1]), int(s[-1])
        major, _, minor = s.partition(".")
        if major.isdigit() and (minor.isdigit() or minor == "") and len(minor) <= 1:
            return int(major), int(minor or 0)
    raise OccupancyInputError(f"compute capability {cc!r}: expected MAJOR.MINOR such as 9.0")


def arch_spec(cc: str | float | tuple[int, int]) -> ArchSpec:
    """The documented constants of compute capability ``cc``; ``OccupancyInputError`` when unknown."""
    key = parse_cc(cc)
    if key not in ARCHS:
        known = ", ".join(a.name for a in ARCHS.values())
        raise OccupancyInputError(
            f"compute capability {key[0]}.{key[1]}: constants not known (known: {known})"
        )
    return ARCHS[key]


def arch_for_device(device: DeviceInfo) -> ArchSpec:
    """Architecture constants with the device's own reported capacities (``cudaDeviceProp``) where present."""
    if device.compute_major < 0:
        raise OccupancyInputError(f"device {device.id}: compute capability unknown")
    spec = arch_spec((device.compute_major, device.compute_minor))
    over = {
        "max_threads_per_sm": device.max_threads_per_sm,
        "max_threads_per_block": device.max_threads_per_block,
        "regs_per_sm": device.regs_per_sm,
        "regs_per_block": device.regs_per_block,
        "warp_size": device.warp_size,
        "smem_per_sm_bytes": device.shared_memory_per_sm_bytes,
        "smem_per_block_bytes": device.shared_memory_per_block_bytes,
        "smem_per_block_optin_bytes": device.shared_memory_per_block_optin_bytes,
    }
    out = dataclasses.replace(spec, **{k: v for k, v in over.items() if v is not None and v > 0})
    if out.warp_size != 32 or out.max_warps_per_sm < 1:  # an NVIDIA SM schedules warps of 32, at least one
        raise OccupancyInputError(f"device {device.id}: reported warp size {out.warp_size} and "
                                  f"{out.max_threads_per_sm} threads per SM are no NVIDIA SM's")
    return out


@dataclass(frozen=True)
class OccupancyResult:
    """Blocks and warps one SM can hold for a launch, which resources limit it, and how they were allocated.

    ``limits`` maps each resource in ``RESOURCES`` to the blocks/SM it allows (``None`` = no limit: no registers,
    no shared memory, or no barrier limit before sm_90). ``reason`` explains a launch that cannot run (0 blocks).
    """

    cc: str
    block_size: int
    registers_per_thread: int
    static_smem: int
    dynamic_smem: int
    active_blocks_per_sm: int
    active_warps_per_sm: int
    max_warps_per_sm: int
    occupancy_pct: float
    limiters: list[str]
    limits: dict[str, int | None]
    warps_per_block: int
    registers_per_warp_allocated: int
    registers_per_block_allocated: int
    smem_per_block_allocated_bytes: int  # static + dynamic + reserved, rounded up to the allocation unit
    smem_reserved_per_block_bytes: int
    smem_per_block_limit_bytes: int  # the per-block limit the launch was checked against (incl. reserved)
    smem_config_bytes: int  # the SM's shared-memory capacity the shared-memory limit was computed against
    barriers_per_block: int
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (``limiters`` a list, ``limits`` per resource)."""
        return dataclasses.asdict(self)


def _as_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)):
        raise OccupancyInputError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise OccupancyInputError(f"{name}: expected an integer, got {value!r}")
    v = int(value)
    if v < minimum:
        raise OccupancyInputError(f"{name}: must be >= {minimum}, got {v}")
    return v


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def _align_carveout(size: int, spec: ArchSpec) -> int:
    """Round a shared-memory size up to the next capacity the SM supports (cudaOccAlignUpShmemSizeVoltaPlus)."""
    for c in spec.carveouts_bytes:
        if size <= c:
            return c
    return max(spec.smem_per_sm_bytes, size)  # only reachable with overridden device capacities


def compute_occupancy(
    cc: str | float | tuple[int, int] | ArchSpec,
    block_size: int,
    registers_per_thread: int,
    static_smem: int = 0,
    dynamic_smem: int = 0,
    *,
    max_dynamic_smem: int | None = None,
    carveout_pct: int | None = None,
    smem_config_bytes: int | None = None,
    barriers_per_block: int = 1,
) -> OccupancyResult:
    """Theoretical occupancy of one launch configuration on one SM.

    Args:
        cc: compute capability (``"9.0"``) or an ``ArchSpec`` (e.g. from ``arch_for_device``).
        block_size: threads per block (x*y*z).
        registers_per_thread: ``CU_FUNC_ATTRIBUTE_NUM_REGS`` / ncu ``launch__registers_per_thread``.
        static_smem: static shared memory per block, bytes (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``).
        dynamic_smem: dynamic shared memory per block passed at launch, bytes.
        max_dynamic_smem: the function's ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` attribute; ``None`` = unknown, treated as
            opted in to the device maximum (``sharedMemPerBlockOptin - static``), which gives the driver's answer for
            every launch that could run.
        carveout_pct: the function's preferred shared-memory carveout, 0..100; ``None`` or -1 = default.
        smem_config_bytes: the SM shared-memory configuration the driver chose (ncu
            ``launch__shared_mem_config_size``); when given, the shared-memory limit is computed against it as ncu
            does and ``carveout_pct`` is ignored.
        barriers_per_block: named barriers the kernel uses (``__syncthreads`` = 1; sm_90+ only).

    Returns:
        An ``OccupancyResult``. A launch that cannot run returns 0 blocks, the limiter(s) at 0 and a ``reason``.

    Raises:
        OccupancyInputError: malformed input (negative sizes, unknown compute capability, carveout out of range).
    """
    spec = cc if isinstance(cc, ArchSpec) else arch_spec(cc)
    b = _as_int("block_size", block_size, 1)
    r = _as_int("registers_per_thread", registers_per_thread)
    s_static = _as_int("static_smem", static_smem)
    s_dyn = _as_int("dynamic_smem", dynamic_smem)
    bars = _as_int("barriers_per_block", barriers_per_block)
    carve = -1 if carveout_pct is None else _as_int("carveout_pct", carveout_pct, -1)
    if carve > 100:
        raise OccupancyInputError(f"carveout_pct: must be -1 (default) or 0..100, got {carve}")
    config = None if smem_config_bytes is None else _as_int("smem_config_bytes", smem_config_bytes)
    max_dyn = (
        max(spec.smem_per_block_optin_bytes - s_static, 0)
        if max_dynamic_smem is None
        else _as_int("max_dynamic_smem", max_dynamic_smem)
    )
    reasons: list[str] = []

    # 1. Warp slots.
    warps = _ceil_div(b, spec.warp_size)
    if b > spec.max_threads_per_block:
        lim_warps = 0
        reasons.append(f"block size {b} exceeds the {spec.max_threads_per_block}-thread maximum per block")
    else:
        lim_warps = spec.max_warps_per_sm // warps

    # 2. Hardware block limit.
    lim_blocks = spec.max_blocks_per_sm

    # 3. Registers: allocated per warp, warps spread over the sub-partitions.
    regs_warp = _ceil_div(r * spec.warp_size, spec.reg_alloc_unit) * spec.reg_alloc_unit
    regs_block = regs_warp * warps
    regs_assumed = regs_warp * _ceil_div(warps, spec.sub_partitions) * spec.sub_partitions
    lim_regs: int | None
    if r > spec.max_regs_per_thread:
        lim_regs = 0
        reasons.append(f"{r} registers per thread exceeds the {spec.max_regs_per_thread}-register maximum")
    elif regs_assumed > spec.regs_per_block or regs_block > spec.regs_per_block:
        lim_regs = 0
        reasons.append(
            f"{regs_assumed} registers per block (allocated) exceed the {spec.regs_per_block}-register block limit"
        )
    elif regs_warp == 0:
        lim_regs = None
    else:
        warps_per_sub = (spec.regs_per_sm // spec.sub_partitions) // regs_warp
        lim_regs = warps_per_sub * spec.sub_partitions // warps

    # 4. Shared memory.
    reserved = spec.reserved_smem_per_block_bytes
    unit = spec.smem_alloc_unit_bytes
    alloc = _ceil_div(s_static + reserved + s_dyn, unit) * unit
    opted_in = s_static + reserved + max_dyn > spec.smem_per_block_bytes
    per_block_limit = (spec.smem_per_block_optin_bytes if opted_in else spec.smem_per_block_bytes) + (
        reserved if spec.cc[0] >= 8 else 0
    )
    if carve < 0:
        preference = spec.smem_per_sm_bytes
    else:
        preference = _align_carveout(carve * spec.smem_per_sm_bytes // 100, spec)
    capacity = preference if preference >= alloc else _align_carveout(alloc, spec)
    if config is not None:
        capacity = config
    lim_smem: int | None
    if s_static > spec.smem_per_block_bytes:  # ptxas refuses it; larger allocations must be dynamic
        lim_smem = 0
        reasons.append(
            f"static shared memory {s_static} B exceeds the {spec.smem_per_block_bytes} B static limit"
        )
    elif s_dyn > max_dyn:
        lim_smem = 0
        reasons.append(f"dynamic shared memory {s_dyn} B exceeds the function's maximum of {max_dyn} B")
    elif alloc > per_block_limit:
        lim_smem = 0
        reasons.append(
            f"{alloc} B of shared memory per block exceeds the per-block limit of {per_block_limit} B"
        )
    elif alloc == 0:
        lim_smem = None
    else:
        lim_smem = capacity // alloc
        if lim_smem == 0:
            reasons.append(
                f"shared-memory configuration of {capacity} B is smaller than one block's {alloc} B"
            )

    # 5. Named barriers (sm_90+): 2 x block limit per SM. ncu caps the reported limit at the block limit.
    lim_bars: int | None = None
    bars_binding = None
    if spec.has_barrier_limit:
        bars_binding = (2 * spec.max_blocks_per_sm) // bars if bars > 0 else None
        lim_bars = lim_blocks if bars_binding is None else min(lim_blocks, bars_binding)

    limits: dict[str, int | None] = {
        "warps": lim_warps,
        "registers": lim_regs,
        "shared_memory": lim_smem,
        "blocks": lim_blocks,
        "barriers": lim_bars,
    }
    binding = {k: v for k, v in limits.items() if k != "barriers" and v is not None}
    active = min(binding.values())
    if bars_binding is not None:
        active = min(active, bars_binding)
    limiters = [k for k, v in binding.items() if v == active]
    if bars_binding is not None and bars_binding == active:
        limiters.append("barriers")
    active_warps = active * warps
    return OccupancyResult(
        cc=spec.name,
        block_size=b,
        registers_per_thread=r,
        static_smem=s_static,
        dynamic_smem=s_dyn,
        active_blocks_per_sm=active,
        active_warps_per_sm=active_warps,
        max_warps_per_sm=spec.max_warps_per_sm,
        occupancy_pct=100.0 * active_warps / spec.max_warps_per_sm,
        limiters=limiters,
        limits=limits,
        warps_per_block=warps,
        registers_per_warp_allocated=regs_warp,
        registers_per_block_allocated=regs_block,
        smem_per_block_allocated_bytes=alloc,
        smem_reserved_per_block_bytes=reserved,
        smem_per_block_limit_bytes=per_block_limit,
        smem_config_bytes=capacity,
        barriers_per_block=bars,
        reason="; ".join(reasons),
    )


#: Rows evaluated together by :func:`kernel_occupancy`.
_CHUNK_ROWS = 1 << 20


def kernel_occupancy(kernels: dict[str, np.ndarray], device: DeviceInfo) -> dict[str, np.ndarray]:
    """Theoretical occupancy and limiter for every row of a profile's ``kernels`` table.

    Kineto (CUPTI) reports one ``shared_memory_bytes`` per launch, static + dynamic combined; it is treated as
    dynamic shared memory of a kernel opted in to the device maximum, which gives the driver's answer for every
    launch that actually ran (the split only matters for launches that could not run). The carveout is the
    default, because the trace does not record the function's preference. Rows are grouped by unique
    (threads per block, registers, shared memory), so 100k kernels cost a few hundred evaluations.

    Returns:
        ``theoretical_occupancy_pct`` (float32, NaN unknown), ``active_blocks_per_sm`` (int32, -1 unknown) and
        ``limiter`` (object array of str: '+'-joined limiters, '' unknown). Rows are unknown when registers,
        shared memory or block size are missing (-1) or the device's compute capability is not known.
    """
    n = len(kernels["block_x"])
    pct = np.full(n, np.nan, dtype=np.float32)
    blocks = np.full(n, -1, dtype=np.int32)
    limiter = np.full(n, "", dtype=object)
    out = {"theoretical_occupancy_pct": pct, "active_blocks_per_sm": blocks, "limiter": limiter}
    try:
        spec = arch_for_device(device)
    except OccupancyInputError:
        return out
    done: dict[tuple[int, int, int], tuple[float, int, str]] = {}  # each distinct launch shape evaluated once
    for a in range(0, n, _CHUNK_ROWS):  # a slice of rows at a time: a big trace's temporaries stay small
        rows = slice(a, min(a + _CHUNK_ROWS, n))
        dims = [np.asarray(kernels[f"block_{x}"][rows], dtype=np.int64) for x in "xyz"]
        regs = np.asarray(kernels["registers_per_thread"][rows], dtype=np.int64)
        smem = np.asarray(kernels["shared_memory_bytes"][rows], dtype=np.int64)
        release_pages_of(*(kernels[f"block_{x}"] for x in "xyz"), kernels["registers_per_thread"],
                         kernels["shared_memory_bytes"])  # a big trace's mapped columns: a slice's pages at a time
        known = (dims[0] > 0) & (dims[1] > 0) & (dims[2] > 0) & (regs >= 0) & (smem >= 0)
        idx = np.flatnonzero(known)
        if idx.size == 0:
            continue
        threads = (dims[0] * dims[1] * dims[2])[idx]
        regs, smem = regs[idx], smem[idx]
        # one key per distinct (threads, registers, shared memory): a sort of int64, not of 3-column records
        _, first, inverse = np.unique(row_keys([threads, regs, smem]), return_index=True, return_inverse=True)
        keys = np.stack([threads[first], regs[first], smem[first]], axis=1)
        u_pct = np.empty(len(keys), dtype=np.float32)
        u_blocks = np.empty(len(keys), dtype=np.int32)
        u_lim = np.empty(len(keys), dtype=object)
        for i, key in enumerate(keys.tolist()):
            if (t := tuple(key)) not in done:
                res = compute_occupancy(spec, t[0], t[1], 0, t[2])
                done[t] = (res.occupancy_pct, res.active_blocks_per_sm, "+".join(res.limiters))
            u_pct[i], u_blocks[i], u_lim[i] = done[t]
        inverse = inverse.reshape(-1)
        at = idx + a
        pct[at], blocks[at], limiter[at] = u_pct[inverse], u_blocks[inverse], u_lim[inverse]
    return out
