"""Record the CUDA driver's occupancy answer for thousands of launch configurations (run on a GPU machine).

Compiles kernels with NVRTC (``cuda.bindings``) at many register counts (``-maxrregcount`` on a register-hungry
body), with static shared memory and named-barrier variants; then, for each kernel, each max-dynamic-smem opt-in
state, each carveout preference (-1, 0, 10, 25, 50, 75, 100) and each block size (1..1025, odd ones included)
and dynamic shared memory size (0 .. the maximum and just past it), asks ``cuOccupancyMaxActiveBlocksPerMultiprocessor``.
Every answer is compared with ``dnnprof.analysis.occupancy`` when dnnprof is importable (the repository's ``src``
is put on the path); a stratified sample plus every mismatch is written, gzip-compressed, to
``$OUT/occupancy_driver_<gpu>.jsonl.gz``: line 1 is the device record, then one launch per line.

Run: ``OUT=out python benchmarks/gpu/record_occupancy_table.py`` (about a minute on an H100). Needs
``cuda-bindings`` (``cuda.bindings.driver``/``nvrtc``) and numpy.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import random
import re
import struct
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

try:
    from cuda.bindings import driver as cu
    from cuda.bindings import nvrtc
except ImportError:  # cuda-python < 12.6 layout
    from cuda import cuda as cu  # type: ignore[no-redef]
    from cuda import nvrtc  # type: ignore[no-redef]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

BLOCK_SIZES = [1, 32, 33, 64, 96, 100, 128, 160, 192, 256, 288, 384, 512, 640, 768, 1000, 1024, 1025]
CARVEOUTS = [-1, 0, 10, 25, 50, 75, 100]
# Register caps: the hungry body reaches the cap up to ~128 with 96 live values, up to 255 with 256.
REG_CAPS_SMALL = [24, 32, 33, 37, 40, 45, 48, 56, 64, 65, 72, 77, 80, 88, 96, 101, 104, 112, 117, 120, 128]
REG_CAPS_LARGE = [136, 152, 161, 168, 184, 199, 200, 216, 232, 248, 255]
STATIC_SMEM_CAPS = (32, 64, 128, 168, 255)  # caps that also get static-shared-memory variants
STATIC_SMEM_SIZES = (1000, 12000, 33000, 49152)
NAMED_BARRIER_IDS = (1, 3, 7, 15)  # bar.sync <id> -> the kernel needs id+1 barriers
BASE_DYN = [0, 1, 127, 128, 1000, 3000, 8192, 12345, 16384, 24576, 32768, 40000, 45000]
OPTIN_DYN = [
    50000,
    65536,
    70000,
    81920,
    100000,
    102400,
    116736,
    131072,
    150000,
    167936,
    180000,
    200000,
    215000,
]
SAMPLE_PER_GROUP = 10  # saved rows per (kernel, opt-in state, carveout)
EIATTR_NUM_BARRIERS = 0x4C


def _ok(ret):
    """Unpack a cuda-bindings return tuple, raising on a non-zero status."""
    ret = ret if isinstance(ret, tuple) else (ret,)
    err, rest = ret[0], ret[1:]
    if int(getattr(err, "value", err)) != 0:
        raise RuntimeError(f"{getattr(err, 'name', err)}")
    return rest[0] if len(rest) == 1 else rest


def kernel_source(name: str, live: int, static_smem: int = 0, barrier_id: int | None = None) -> str:
    """A kernel with ``live`` values kept in registers, optional static smem and an optional named barrier."""
    if barrier_id is not None:
        return (
            f'extern "C" __global__ void {name}(float* out) {{\n'
            f"  out[threadIdx.x] = 1.f;\n"
            f'  asm volatile("bar.sync {barrier_id}, 32;");\n'
            f"  out[threadIdx.x + 1] = 2.f;\n}}\n"
        )
    smem_decl = f"  __shared__ unsigned char sbuf[{static_smem}];\n" if static_smem else ""
    smem_use = (
        f"  sbuf[threadIdx.x % {static_smem}] = (unsigned char)a[1];\n  __syncthreads();\n"
        f"  s += (float)sbuf[(threadIdx.x * 7 + 3) % {static_smem}];\n"
        if static_smem
        else ""
    )
    return (
        f'extern "C" __global__ void {name}(float* __restrict__ out, const float* __restrict__ in, int n) {{\n'
        f"{smem_decl}  float a[{live}];\n"
        f"  #pragma unroll\n  for (int i = 0; i < {live}; ++i) a[i] = in[threadIdx.x + i * n];\n"
        f"  #pragma unroll\n  for (int r = 0; r < 4; ++r) {{\n"
        f"    #pragma unroll\n    for (int i = 0; i < {live}; ++i)"
        f" a[i] = fmaf(a[i], a[(i * 7 + r) % {live}], a[(i + 13) % {live}]);\n  }}\n"
        f"  float s = 0.f;\n"
        f"  #pragma unroll\n  for (int i = 0; i < {live}; ++i) s += a[i] * (float)(i + 1);\n"
        f"{smem_use}  out[blockIdx.x * blockDim.x + threadIdx.x] = s;\n}}\n"
    )


def module_plan() -> list[tuple[str, list[bytes], list[str]]]:
    """(source, NVRTC options without arch, kernel names) per module; one kernel per module, slowest first."""
    plan = []
    for cap in REG_CAPS_LARGE[::-1] + REG_CAPS_SMALL[::-1]:
        live = 96 if cap <= 128 else 256
        opts = [f"-maxrregcount={cap}".encode()]
        plan.append((kernel_source(f"r{cap}", live), opts, [f"r{cap}"]))
        if cap in STATIC_SMEM_CAPS:
            for s in STATIC_SMEM_SIZES:
                plan.append((kernel_source(f"r{cap}_s{s}", live, static_smem=s), opts, [f"r{cap}_s{s}"]))
    src = 'extern "C" __global__ void tiny(float* out) { out[threadIdx.x] = 1.f; }\n'
    names = ["tiny"]
    for bid in NAMED_BARRIER_IDS:
        names.append(f"bar{bid}")
        src += kernel_source(names[-1], 0, barrier_id=bid)
    plan.append((src, [], names))
    return plan


def compile_cubin(job: tuple[str, list[bytes], str]) -> bytes:
    """NVRTC-compile ``source`` to a cubin for ``arch`` (``sm_90``)."""
    source, opts, arch = job
    prog = _ok(nvrtc.nvrtcCreateProgram(source.encode(), b"occ.cu", 0, [], []))
    opts = [f"--gpu-architecture={arch}".encode(), *opts]
    ret = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(getattr(ret[0], "value", ret[0])) != 0:
        size = _ok(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed: {log.decode(errors='replace')}")
    size = _ok(nvrtc.nvrtcGetCUBINSize(prog))
    cubin = b" " * size
    _ok(nvrtc.nvrtcGetCUBIN(prog, cubin))
    return cubin


def cubin_barriers(cubin: bytes) -> dict[str, int]:
    """Named barriers per kernel from the cubin: EIATTR_NUM_BARRIERS in ``.nv.info.<kernel>`` (absent = 0)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    out: dict[str, int] = {}
    for name_off, _t, _f, _a, off, size, *_ in secs:
        name = cubin[strtab + name_off : cubin.index(b"\0", strtab + name_off)].decode()
        if not name.startswith(".nv.info."):
            continue
        kernel, data, p, count = name[len(".nv.info.") :], cubin[off : off + size], 0, 0
        while p + 4 <= len(data):
            fmt, attr = data[p], data[p + 1]
            if fmt == 0x04:  # EIFMT_SVAL: u16 size, then the value
                sval_size = struct.unpack_from("<H", data, p + 2)[0]
                if attr == EIATTR_NUM_BARRIERS:
                    count = int.from_bytes(data[p + 4 : p + 4 + min(sval_size, 4)], "little")
                p += 4 + sval_size
            else:  # EIFMT_NVAL/BVAL/HVAL: value in the next 2 bytes
                if attr == EIATTR_NUM_BARRIERS:
                    count = data[p + 2] if fmt == 0x02 else struct.unpack_from("<H", data, p + 2)[0]
                p += 4
        out[kernel] = count
    return out


def device_record(dev) -> dict:
    A = cu.CUdevice_attribute
    attrs = {
        "compute_major": A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        "compute_minor": A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        "sm_count": A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        "max_threads_per_sm": A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        "max_threads_per_block": A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "max_blocks_per_sm": A.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
        "regs_per_sm": A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
        "regs_per_block": A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
        "warp_size": A.CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        "shared_memory_per_sm_bytes": A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        "shared_memory_per_block_bytes": A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        "shared_memory_per_block_optin_bytes": A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        "reserved_shared_memory_per_block_bytes": A.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
    }
    rec = {k: int(_ok(cu.cuDeviceGetAttribute(a, dev))) for k, a in attrs.items()}
    rec["name"] = bytes(_ok(cu.cuDeviceGetName(256, dev))).split(b"\0")[0].decode()
    rec["driver_version"] = int(_ok(cu.cuDriverGetVersion()))
    rec["nvrtc_version"] = ".".join(str(int(v)) for v in _ok(nvrtc.nvrtcVersion()))
    return rec


def dyn_sizes(max_dyn: int, optin: bool, optin_limit: int) -> list[int]:
    sizes = set(BASE_DYN) | {max_dyn - 1024, max_dyn - 129, max_dyn - 1, max_dyn, max_dyn + 1}
    if optin:
        sizes |= set(OPTIN_DYN) | {optin_limit}
    return sorted(s for s in sizes if s >= 0)


def gpu_tag(name: str) -> str:
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "gpu").lower()


def calculator():
    """``(spec, compute_occupancy)`` from dnnprof, or None when it cannot be imported."""
    try:
        from dnnprof.analysis.occupancy import compute_occupancy
    except ImportError as e:
        print(f"dnnprof not importable ({e}); recording without comparing")
        return None
    return compute_occupancy


def main() -> int:
    t0 = time.perf_counter()
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    _ok(cu.cuInit(0))
    dev = _ok(cu.cuDeviceGet(0))
    dev_rec = device_record(dev)
    arch = f"sm_{dev_rec['compute_major']}{dev_rec['compute_minor']}"
    plan = module_plan()
    # spawn, not fork: the parent has initialised the CUDA driver; the workers only need NVRTC.
    workers = min(len(plan), os.cpu_count() or 4)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        cubins = list(pool.map(compile_cubin, [(src, opts, arch) for src, opts, _ in plan]))
    t_compile = time.perf_counter() - t0
    ctx = _ok(cu.cuDevicePrimaryCtxRetain(dev))
    _ok(cu.cuCtxSetCurrent(ctx))

    F = cu.CUfunction_attribute
    occ = calculator()
    spec = None
    if occ is not None:
        from dnnprof.analysis.occupancy import arch_for_device
        from dnnprof.model.device import DeviceInfo

        fields = DeviceInfo.__dataclass_fields__
        spec = arch_for_device(DeviceInfo(id=0, **{k: v for k, v in dev_rec.items() if k in fields}))
    optin_limit = dev_rec["shared_memory_per_block_optin_bytes"]
    rng = random.Random(0)
    saved: list[dict] = []
    stats: Counter = Counter()
    mismatches: list[dict] = []
    n_rows = 0
    for (_src, _opts, names), cubin in zip(plan, cubins, strict=True):
        barriers = cubin_barriers(cubin)
        module = _ok(cu.cuModuleLoadData(cubin))
        for kname in names:
            func = _ok(cu.cuModuleGetFunction(module, kname.encode()))
            regs = int(_ok(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_NUM_REGS, func)))
            static = int(_ok(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func)))
            fmax = int(_ok(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func)))
            default_dyn = int(
                _ok(cu.cuFuncGetAttribute(F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, func))
            )
            group = (
                "barrier" if kname.startswith("bar") else ("static_smem" if "_s" in kname else "registers")
            )
            states = [default_dyn] + [
                v for v in (min(100000, optin_limit) - static, optin_limit - static) if v > default_dyn
            ]
            for max_dyn in sorted(set(states)):
                _ok(cu.cuFuncSetAttribute(func, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_dyn))
                dyns = dyn_sizes(max_dyn, max_dyn > default_dyn, optin_limit)
                for carve in CARVEOUTS:
                    ret = cu.cuFuncSetAttribute(
                        func, F.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carve
                    )
                    if int(getattr(ret[0], "value", ret[0])) != 0:
                        stats[(group, "carveout_refused")] += 1
                        print(f"{kname}: carveout {carve} refused: {getattr(ret[0], 'name', ret[0])}")
                        continue
                    rows = []
                    for b in BLOCK_SIZES:
                        for d in dyns:
                            ret = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, b, d)
                            err = int(getattr(ret[0], "value", ret[0]))
                            row = {
                                "kernel": kname, "registers_per_thread": regs, "static_smem": static,
                                "max_dynamic_smem": max_dyn, "carveout_pct": carve, "block_size": b,
                                "dynamic_smem": d, "barriers": barriers.get(kname),
                                "func_max_threads_per_block": fmax,
                                "driver_blocks": int(ret[1]) if err == 0 else None,
                            }  # fmt: skip
                            if err:
                                row["driver_error"] = getattr(ret[0], "name", str(err))
                            rows.append(row)
                    n_rows += len(rows)
                    for row in rows:
                        stats[(group, "rows")] += 1
                        if row["driver_blocks"] is None:
                            stats[(group, "driver_errors")] += 1
                        if occ is None:
                            continue
                        res = occ(
                            spec, row["block_size"], regs, static, row["dynamic_smem"], max_dynamic_smem=max_dyn,
                            carveout_pct=None if carve < 0 else carve,
                            barriers_per_block=1 if row["barriers"] is None else row["barriers"],
                        )  # fmt: skip
                        want = 0 if row["driver_blocks"] is None else row["driver_blocks"]
                        if res.active_blocks_per_sm == want:
                            stats[(group, "matched")] += 1
                        else:
                            row["calculator_blocks"] = res.active_blocks_per_sm
                            mismatches.append(row)
                    saved.extend(rng.sample(rows, min(SAMPLE_PER_GROUP, len(rows))))
        _ok(cu.cuModuleUnload(module))
    kept = {id(r) for r in saved}
    saved.extend(r for r in mismatches[:5000] if id(r) not in kept)
    dev_rec.update(rows_queried=n_rows, rows_saved=len(saved), mismatches=len(mismatches))
    path = out_dir / f"occupancy_driver_{gpu_tag(dev_rec['name'])}.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"device": dev_rec}) + "\n")
        for row in saved:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    elapsed = time.perf_counter() - t0
    print(
        f"device: {dev_rec['name']} ({arch}), driver {dev_rec['driver_version']}, NVRTC {dev_rec['nvrtc_version']}"
    )
    print(f"kernels: {sum(len(n) for _, _, n in plan)} in {len(plan)} modules, compiled in {t_compile:.1f} s")
    for m in mismatches[:20]:
        print("MISMATCH", json.dumps(m))
    print(f"wrote {len(saved)} rows to {path} in {elapsed:.1f} s")
    print(f"{'group':<12} {'rows':>8} {'driver_err':>10} {'matched':>8}")
    for g in ("registers", "static_smem", "barrier"):
        matched = stats[(g, "matched")] if occ is not None else "n/a"
        print(f"{g:<12} {stats[(g, 'rows')]:>8} {stats[(g, 'driver_errors')]:>10} {matched:>8}")
    total_matched = sum(v for (g, k), v in stats.items() if k == "matched")
    print(f"rows: {n_rows}; match the calculator: {total_matched if occ is not None else 'n/a'}")
    return 0 if occ is None or not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
