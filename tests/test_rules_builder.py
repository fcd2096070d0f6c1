"""Builder of small SYNTHETIC profiles for the expert-system tests (made through the model API, not recorded).

Times are given in µs and stored in ns. Every kernel gets a ``cudaLaunchKernel`` runtime row (5 µs before it by
default) and, optionally, a launching op; rows are sorted and cross-links remapped at ``build()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnprof.model.device import DeviceInfo
from dnnprof.model.profile import Profile
from dnnprof.model.schema import API_KINDS, MEMCPY_KINDS, MEMORY_KINDS, OP_CATEGORIES, empty_table
from dnnprof.model.steps import assign_steps

H100 = DeviceInfo(id=0, name="NVIDIA H100 80GB HBM3", compute_major=9, compute_minor=0, sm_count=132,
                  memory_bytes=80 * 2**30, max_threads_per_block=1024, max_threads_per_sm=2048,
                  regs_per_block=65536, regs_per_sm=65536, shared_memory_per_block_bytes=49152,
                  shared_memory_per_block_optin_bytes=232448, shared_memory_per_sm_bytes=233472)


def _api_kind(name: str) -> int:
    if "LaunchKernel" in name:
        return API_KINDS.index("launch")
    if "Memcpy" in name:
        return API_KINDS.index("memcpy")
    if "Synchronize" in name:
        return API_KINDS.index("sync")
    return API_KINDS.index("other")


def _ns(us: float) -> int:
    return round(us * 1000)


@dataclass
class Synth:
    """Accumulates rows, then builds a consistent :class:`Profile`."""

    device: DeviceInfo | None = H100
    ops: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    copies: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def op(self, name: str, t: float, dur: float, parent: int = -1, category: str = "cpu_op") -> int:
        self.ops.append({"name": name, "start": _ns(t), "dur": _ns(dur), "parent": parent,
                         "category": OP_CATEGORIES.index(category)})
        return len(self.ops) - 1

    def call(self, name: str, t: float, dur: float, op: int = -1) -> int:
        self.calls.append({"name": name, "start": _ns(t), "dur": _ns(dur), "op": op})
        return len(self.calls) - 1

    def kernel(self, name: str, t: float, dur: float, launch: float | None = None, op: int = -1,
               grid: tuple[int, int, int] = (264, 1, 1), block: tuple[int, int, int] = (256, 1, 1),
               regs: int = 32, smem: int = 0, graph: int = -1) -> int:
        c = self.call("cudaLaunchKernel", t - 5 if launch is None else launch, 3, op)
        self.kernels.append({"name": name, "start": _ns(t), "dur": _ns(dur), "call": c, "grid": grid,
                             "block": block, "regs": regs, "smem": smem, "graph": graph})
        return len(self.kernels) - 1

    def copy(self, kind: str, host_mem: str, nbytes: int, t: float, dur: float, call_t: float, call_dur: float,
             op: int = -1, api: str = "cudaMemcpyAsync") -> int:
        c = self.call(api, call_t, call_dur, op)
        host = MEMORY_KINDS.index(host_mem)
        dev = MEMORY_KINDS.index("device")
        src, dst = (host, dev) if kind == "HtoD" else (dev, host)
        self.copies.append({"kind": MEMCPY_KINDS.index(kind), "src": src, "dst": dst, "bytes": nbytes,
                            "start": _ns(t), "dur": _ns(dur), "call": c})
        return len(self.copies) - 1

    # --------------------------------------------------------------------------------------------------------
    def build(self, steps: list[tuple[float, float]] | None = None, source_path: str = "synthetic.json") -> Profile:
        p = Profile(devices=[self.device] if self.device else [])
        p.meta.update({"source": {"path": source_path, "format": "kineto"}, **self.meta})
        op_order = sorted(range(len(self.ops)), key=lambda i: (self.ops[i]["start"], -self.ops[i]["dur"]))
        op_map = {old: new for new, old in enumerate(op_order)}
        op_map[-1] = -1
        ops = empty_table("ops", len(self.ops))
        for new, old in enumerate(op_order):
            o = self.ops[old]
            ops["rank"][new], ops["tid"][new] = 0, 1
            ops["start_ns"][new], ops["dur_ns"][new] = o["start"], o["dur"]
            ops["name_id"][new] = p.intern(o["name"])
            ops["category"][new] = o["category"]
            ops["parent_row"][new] = op_map[o["parent"]]
        for i in range(len(self.ops)):  # depth from parents
            d, r = 0, int(ops["parent_row"][i])
            while r >= 0:
                d, r = d + 1, int(ops["parent_row"][r])
            ops["depth"][i] = d
        call_order = sorted(range(len(self.calls)), key=lambda i: self.calls[i]["start"])
        call_map = {old: new for new, old in enumerate(call_order)}
        rt = empty_table("runtime", len(self.calls))
        for new, old in enumerate(call_order):
            c = self.calls[old]
            rt["rank"][new], rt["tid"][new] = 0, 1
            rt["start_ns"][new], rt["dur_ns"][new] = c["start"], c["dur"]
            rt["name_id"][new] = p.intern(c["name"])
            rt["correlation"][new] = old + 1
            rt["api_kind"][new] = _api_kind(c["name"])
            rt["op_row"][new] = op_map[c["op"]]
        p.tables["ops"], p.tables["runtime"] = ops, rt
        p.tables["kernels"] = self._gpu("kernels", p, self.kernels, call_map)
        p.tables["memcpy"] = self._gpu("memcpy", p, self.copies, call_map)
        if steps:
            assign_steps(p, np.array([_ns(a) for a, _ in steps]), np.array([_ns(b) for _, b in steps]),
                         "profiler_step")
        problems = p.self_check()
        assert not problems, problems
        return p

    def _gpu(self, table: str, p: Profile, rows: list[dict[str, Any]], call_map: dict[int, int]) -> dict:
        order = sorted(range(len(rows)), key=lambda i: rows[i]["start"])
        t = empty_table(table, len(rows))
        rt = p.tables["runtime"]
        for new, old in enumerate(order):
            r = rows[old]
            lr = call_map[r["call"]]
            t["rank"][new], t["device"][new], t["stream"][new] = 0, 0, 7
            t["start_ns"][new], t["dur_ns"][new] = r["start"], r["dur"]
            t["correlation"][new] = rt["correlation"][lr]
            t["launch_row"][new] = lr
            t["op_row"][new] = rt["op_row"][lr]
            if table == "kernels":
                t["name_id"][new] = p.intern(r["name"])
                t["grid_x"][new], t["grid_y"][new], t["grid_z"][new] = r["grid"]
                t["block_x"][new], t["block_y"][new], t["block_z"][new] = r["block"]
                t["registers_per_thread"][new] = r["regs"]
                t["shared_memory_bytes"][new] = r["smem"]
                t["graph_id"][new] = r["graph"]
            else:
                t["name_id"][new] = p.intern(f"Memcpy {MEMCPY_KINDS[r['kind']]}")
                t["kind"][new], t["src_mem"][new], t["dst_mem"][new] = r["kind"], r["src"], r["dst"]
                t["bytes"][new] = r["bytes"]
        return t


# --- ready-made scenes ---------------------------------------------------------------------------------------------
BF16_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_64x3_tn_align8>(Params)"
BF16_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)"
FUSED_ADAMW = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>(int)"
FP32_SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)"
FP64_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<double>, double>(int)"
FP64_GEMM = "void gemm_kernel<double, 64, 64>(dgemm_params)"
TRITON = "triton_poi_fused_add_gelu_0"
CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwc_tilesize128x128x64_cudnn"


def transformer_steps(n_steps: int = 4, step_us: float = 10_000.0, gemm: str = BF16_GEMM,
                      elementwise: str = BF16_ADD, optimizer: str = FUSED_ADAMW, layers: int = 8,
                      s: Synth | None = None) -> Synth:
    """A GPU-bound training loop: the host launches far ahead; each step is GEMMs, a few adds and one fused
    optimizer kernel, back to back on the GPU (busy ~98%)."""
    s = s or Synth()
    for i in range(n_steps):
        t0 = i * step_us
        host = t0 - 8_000  # the host runs ~8 ms ahead of the GPU
        g = t0 + 20
        step_op = s.op(f"ProfilerStep#{i}", host, step_us, category="user_annotation")
        for j in range(layers):
            lin = s.op("aten::linear", host + j * 50 + 1, 20, parent=step_op)
            s.kernel(gemm, g, 900, launch=host + j * 50 + 5, op=lin, grid=(1056, 1, 1), regs=232, smem=99_000)
            g += 905
            add = s.op("aten::add", host + j * 50 + 30, 10, parent=step_op)
            s.kernel(elementwise, g, 200, launch=host + j * 50 + 32, op=add, grid=(4096, 1, 1))
            g += 205
        opt = s.op("Optimizer.step#AdamW.step", host + 600, 50, parent=step_op, category="user_annotation")
        s.kernel(optimizer, g, 600, launch=host + 610, op=opt, grid=(600, 1, 1), regs=64)
    return s


def steps_of(n_steps: int, step_us: float = 10_000.0) -> list[tuple[float, float]]:
    """Host-side step windows matching :func:`transformer_steps`."""
    return [(i * step_us - 8_000, (i + 1) * step_us - 8_000) for i in range(n_steps)]


def test_builder_makes_a_consistent_gpu_bound_profile() -> None:
    from dnnprof.analysis.summary import summarize

    p = transformer_steps().build(steps_of(4))
    assert p.self_check() == []
    doc = summarize(p)
    assert doc["steps"]["count"] == 4
    assert doc["gpu"]["busy_pct"] > 90
    assert doc["phases"]["optimizer_us"] == 4 * 600
