"""What a correct ``dnnprof run`` profile of each user script in ``tests/data/scripts`` must show, and the check.

One table of cases (script, arguments, what the script really does) and one function, :func:`violations`, that
reads a run directory and lists every way the profile contradicts the script: steps (count, source, one
optimizer step each, micro-batches per step), phases per step (forward, backward and optimizer all present in a
training step, the optimizer a small share, no GEMM/conv/attention/norm/loss work labelled ``optimizer``; no
backward or optimizer in inference), findings the script's own code rules out (``fused=True`` and
``optimizer-not-fused``, autocast and ``amp-not-used``, ``torch.compile`` or CUDA graphs and ``compile-not-used``),
the offenders an optimizer finding names, GPU busy % against NVML's sampled utilisation, and the profile's own
self-checks when it has them. Used by ``test_user_scripts.py`` (CPU), ``test_user_scripts_gpu.py`` and
``benchmarks/gpu/user_scripts_table.py``.

On the CPU a profile has no kernels, so ``summary.json``'s phases are all zero; the CPU checks put the host's leaf
ops (the ops that do the work) through the same attribution the kernels go through
(``dnnprof.analysis.attribution.attribute``), which is where the phase of a kernel comes from on a GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"

#: Kernel families no optimizer of these scripts runs (Adam, AdamW, SGD): finding one in ``optimizer`` means the
#: forward or backward pass was labelled optimizer.
MODEL_FAMILIES = frozenset({"gemm", "conv", "attention", "norm", "softmax", "loss", "embedding"})
#: The same on the CPU, by leaf op name: these ops, and any op whose name holds one of the words.
MODEL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"})
MODEL_OP_WORDS = ("backward", "conv", "softmax", "layer_norm", "batch_norm", "nll_loss", "embedding", "gelu", "relu",
                  "leaky_relu", "threshold")
#: Largest share of a training step the optimizer may take in these scripts: of its kernel time on a GPU (a
#: per-parameter AdamW stays well below half), of its leaf host ops on the CPU (by count: 41 % for the CPU's
#: per-parameter AdamW on the small transformer, 36 % for the GAN, 25 % with 4 micro-batches). CPU op times are
#: no measure of it: on a shared 2-core host Adam's ``aten::sqrt`` alone took 14-94 ms of a 100-150 ms step.
MAX_OPTIMIZER_SHARE = 0.5


@dataclass(frozen=True)
class Case:
    """One user script as run, and what its code says the profile must show."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    length_flag: str = "--steps"  # the script's own option for how many iterations to run
    kind: str = "train"  # "train", "infer" or "decode" (CUDA graph replays, no boundaries of its own)
    cpu: bool = False  # part of the CPU tests
    device_flag: bool = True  # the script takes --device
    needs: str = ""  # module the script imports beyond torch ("transformers"; "a|b": either will do)
    step_source: str = "optimizer"
    optimizer_steps_per_step: int = 1
    forwards_per_step: tuple[str, int] | None = None  # (root module class, forward calls per step)
    forbidden: frozenset[str] = frozenset()  # finding ids that contradict the script
    required_on_gpu: frozenset[str] = frozenset()  # finding ids a GPU profile must have
    not_fused_mode: str = ""  # when optimizer-not-fused fires, the mode it must name
    extra_warmup: int = 0  # iterations the script needs before it is steady (torch.compile)

    def missing(self) -> str:
        """Why the script cannot run here ("" when it can): the module it needs is not installed."""
        import importlib.util

        alternatives = [m for m in self.needs.split("|") if m]
        if alternatives and not any(importlib.util.find_spec(m) for m in alternatives):
            return f"{self.script} imports {' or '.join(alternatives)}, not installed"
        return ""

    def command(self, device: str, iterations: int) -> list[str]:
        dev = ["--device", device] if self.device_flag else []
        return [sys.executable, str(SCRIPTS / self.script), *self.args, self.length_flag, str(iterations), *dev]


_NO_OPT = frozenset({"optimizer-not-fused"})
CASES: tuple[Case, ...] = (
    Case("hf-gpt2", "train_hf_gpt2.py", cpu=True, needs="transformers", not_fused_mode="foreach"),
    Case("hf-gpt2-fused", "train_hf_gpt2.py", ("--fused",), needs="transformers", forbidden=_NO_OPT),
    Case("lightning", "train_lightning_trainer.py", device_flag=False, needs="lightning|pytorch_lightning", not_fused_mode="foreach"),
    Case("adamw-fused", "train_optimizers.py", ("--optimizer", "adamw-fused"), forbidden=_NO_OPT),
    Case("adamw-foreach", "train_optimizers.py", ("--optimizer", "adamw-foreach"), cpu=True,
         not_fused_mode="foreach"),
    Case("adamw-closure", "train_optimizers.py", ("--optimizer", "adamw-foreach", "--closure"), cpu=True,
         not_fused_mode="foreach"),
    Case("sgd-momentum", "train_optimizers.py", ("--optimizer", "sgd-momentum"), not_fused_mode="foreach"),
    Case("adamw-for-loop", "train_optimizers.py", ("--optimizer", "adamw-for-loop"),
         not_fused_mode="per_parameter"),
    Case("amp-gradscaler", "train_amp_scaler.py", forbidden=frozenset({"amp-not-used"}), not_fused_mode="foreach"),
    Case("grad-accum-4", "train_grad_accum.py", cpu=True, forwards_per_step=("Classifier", 4),
         not_fused_mode="foreach"),
    Case("gan", "train_gan.py", cpu=True, optimizer_steps_per_step=2, not_fused_mode="foreach"),
    Case("dataloader-bound", "train_dataloader_bound.py", required_on_gpu=frozenset({"dataloader-bound"}),
         not_fused_mode="foreach"),
    Case("inference", "infer_loop.py", length_flag="--batches", kind="infer", cpu=True, step_source="dataloader",
         optimizer_steps_per_step=0, forbidden=_NO_OPT),
    Case("compile-default", "train_compiled.py", ("--mode", "default"),
         forbidden=frozenset({"compile-not-used", "optimizer-not-fused"}), extra_warmup=3),
    Case("compile-reduce-overhead", "train_compiled.py", ("--mode", "reduce-overhead"),
         forbidden=frozenset({"compile-not-used", "optimizer-not-fused"}), extra_warmup=3),
    Case("decode-cuda-graph", "decode_cuda_graph.py", length_flag="--tokens", kind="decode", device_flag=False,
         step_source="", optimizer_steps_per_step=0, forbidden=frozenset({"compile-not-used", "optimizer-not-fused"})),
)
BY_NAME = {c.name: c for c in CASES}


def dnnprof_run(case: Case, out: Path, *, device: str, warmup: int, steps: int, timeout_s: float,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``dnnprof run --warmup-steps W --steps S --out OUT -- python SCRIPT ...`` with enough iterations for the
    whole plan (warm-up, timed steps, attribution and baseline steps after them)."""
    out = out.resolve()
    iterations = warmup + case.extra_warmup + steps + 12
    if case.kind == "decode":
        iterations = 400
    cmd = [sys.executable, "-m", "dnnprof", "run", "--warmup-steps", str(warmup + case.extra_warmup), "--steps",
           str(steps), "--out", str(out), "--", *case.command(device, iterations)]
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    # Its own session, so a timeout ends the script too (a grandchild that would go on holding the GPU).
    proc = subprocess.Popen(cmd, cwd=cwd or out.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def load_json(run: Path, name: str) -> dict[str, Any]:
    return json.loads((run / name).read_text())


def step_phases(run: Path, count: bool = False) -> tuple[dict[int, dict[str, int]], dict[str, int], str]:
    """Per step, the ns of work in each phase (with ``count``: how many kernels or leaf ops); the ns of work that
    is not an optimizer's (kernels by family, leaf ops by name) labelled optimizer, by name; and ``"gpu"``
    (kernels) or ``"cpu"`` (leaf host ops, when the profile has no kernels)."""
    from dnnprof.analysis.attribution import PHASES, attribute
    from dnnprof.analysis.kernel_names import family
    from dnnprof.model.profile import Profile
    from dnnprof.model.schema import OP_CATEGORIES

    p = Profile.load(run / "profile")
    k = p.tables["kernels"]
    if k["start_ns"].size:
        table, where = "kernels", "gpu"
        sel = np.flatnonzero((k["rank"] == 0) & (k["step"] >= 0))
        names = p.names(k["name_id"][sel]).astype(str)
        heavy = np.array([family(n) in MODEL_FAMILIES for n in names], dtype=bool)
    else:
        where = "cpu"
        ops = p.tables["ops"]
        n = ops["start_ns"].size
        has_child = np.zeros(n, dtype=bool)
        par = ops["parent_row"]
        has_child[par[par >= 0]] = True
        sel = np.flatnonzero((ops["category"] == OP_CATEGORIES.index("cpu_op")) & ~has_child & (ops["step"] >= 0)
                             & (ops["rank"] == 0))
        table = "leaf_cpu_ops"
        p.tables[table] = {"start_ns": ops["start_ns"][sel], "dur_ns": ops["dur_ns"][sel],
                           "op_row": sel.astype(np.int64), "step": ops["step"][sel]}
        names = p.names(ops["name_id"][sel]).astype(str)
        heavy = np.array([n in MODEL_OPS or any(w in n.lower() for w in MODEL_OP_WORDS) for n in names], dtype=bool)
    a = attribute(p, table)
    t = p.tables[table]
    phase = a.phase[sel] if table == "kernels" else a.phase
    step = t["step"][sel] if table == "kernels" else t["step"]
    dur = t["dur_ns"][sel] if table == "kernels" else t["dur_ns"]
    per_step: dict[int, dict[str, int]] = {}
    for s in np.unique(step).tolist():
        m = step == s
        per_step[int(s)] = {ph: int((m & (phase == i)).sum()) if count else int(dur[m & (phase == i)].sum())
                            for i, ph in enumerate(PHASES)}
    opt = phase == PHASES.index("optimizer")
    mislabelled: dict[str, int] = {}
    for i in np.flatnonzero(opt & heavy).tolist():
        mislabelled[names[i]] = mislabelled.get(names[i], 0) + int(dur[i])
    return per_step, mislabelled, where


def ranges_per_step(run: Path, prefix: str, exact: str = "") -> list[int] | None:
    """How many ``user_annotation`` ranges named ``prefix…`` (or exactly ``exact``) start in each step's host
    window; None when the profile has none at all in its steps (e.g. module ranges outside the timing window)."""
    from dnnprof.model.profile import Profile
    from dnnprof.model.schema import OP_CATEGORIES

    p = Profile.load(run / "profile")
    ops, steps = p.tables["ops"], p.tables["steps"]
    ann = np.flatnonzero((ops["category"] == OP_CATEGORIES.index("user_annotation")) & (ops["rank"] == 0))
    names = p.names(ops["name_id"][ann]).astype(str)
    hit = ann[(names == exact) if exact else np.char.startswith(names, prefix)]
    starts = ops["start_ns"][hit]
    s0, sd = steps["start_ns"][steps["rank"] == 0], steps["dur_ns"][steps["rank"] == 0]
    counts = [int(((starts >= a) & (starts < a + d)).sum()) for a, d in zip(s0.tolist(), sd.tolist(), strict=True)]
    return counts if sum(counts) else None


def graph_launches(run: Path) -> int:
    from dnnprof.model.profile import Profile

    p = Profile.load(run / "profile")
    rt = p.tables["runtime"]
    names = p.names(rt["name_id"][rt["rank"] == 0]).astype(str)
    return int((np.char.startswith(names, "cudaGraphLaunch") | np.char.startswith(names, "cuGraphLaunch")).sum())


def violations(case: Case, run: Path, *, steps: int, gpu: bool) -> list[str]:
    """Every way the run's profile contradicts what ``case``'s script does (empty: the profile tells the truth)."""
    out: list[str] = []
    meta, summary = load_json(run, "meta.json"), load_json(run, "summary.json")
    if not meta.get("complete"):
        out.append(f"run not complete: status {meta.get('status')!r}")
    st = summary["steps"]
    # Steps: how many, from where, all positive.
    if case.kind == "decode":
        launches = graph_launches(run)
        if launches == 0:
            out.append("no CUDA graph launches in the profile")
        elif st["count"] != launches:
            out.append(f"steps: {st['count']} (source {st['source']!r}) for {launches} graph replays in the window")
    else:
        # A timed step at the edge of the capture that the capture only partly covers is dropped, and said so.
        dropped = len((meta.get("capture") or {}).get("edge_steps_dropped") or [])
        if st["count"] != steps - dropped:
            out.append(f"steps: {st['count']}, the run asked for {steps}"
                       + (f" and dropped {dropped} at the capture's edges" if dropped else ""))
        if st["source"] != case.step_source:
            out.append(f"step source {st['source']!r}, expected {case.step_source!r}")
    for key in ("durations_us", "gpu_durations_us"):
        bad = [d for d in st.get(key) or [] if not d > 0]
        if bad:
            out.append(f"steps.{key}: {len(bad)} not positive ({bad[:3]})")
    # One optimizer step per step (two for the GAN), several forward passes per step for gradient accumulation.
    if case.kind == "train":
        counts = ranges_per_step(run, "Optimizer.step#") or []
        if counts and set(counts) != {case.optimizer_steps_per_step}:
            out.append(f"optimizer steps per step {counts}, expected {case.optimizer_steps_per_step} each")
        if not counts:
            out.append("no Optimizer.step# range in any step")
    if case.forwards_per_step and not gpu:
        cls, n = case.forwards_per_step
        counts = ranges_per_step(run, "", exact=f"dnnprof.module:{cls}|{cls}")
        if counts is None or set(counts) != {n}:
            out.append(f"{cls} forward calls per step {counts}, expected {n} each")
    # Phases, per step.
    per_step, mislabelled, where = step_phases(run)
    share_of = per_step if where == "gpu" else step_phases(run, count=True)[0]
    if not per_step:
        out.append(f"no {where} work in any step")
    for s, ph in per_step.items():
        if case.kind == "train":
            missing = [k for k in ("forward", "backward", "optimizer") if ph[k] <= 0]
            sh = share_of[s]
            share = sh["optimizer"] / (sum(sh.values()) or 1)
            if missing:
                out.append(f"step {s}: no {'/'.join(missing)} ({where} ns by phase {ph})")
            elif share > MAX_OPTIMIZER_SHARE:
                what = "kernel time" if where == "gpu" else "leaf host ops"
                out.append(f"step {s}: optimizer {100 * share:.0f}% of {what} ({sh})")
        elif ph["backward"] or ph["optimizer"] or (case.kind == "infer" and ph["forward"] <= 0):
            out.append(f"step {s}: inference with {where} ns by phase {ph}")
    if mislabelled:
        top = sorted(mislabelled.items(), key=lambda kv: -kv[1])[:3]
        out.append(f"model work labelled optimizer ({where}): {len(mislabelled)} names, e.g. "
                   + "; ".join(f"{n[:60]} {v / 1e3:.0f} us" for n, v in top))
    # Findings the script's code rules out, and what an optimizer finding names.
    findings = {f["id"]: f for f in summary.get("findings", [])}
    for fid in sorted(case.forbidden & set(findings)):
        out.append(f"finding {fid!r} contradicts the script ({findings[fid]['title']})")
    if gpu:
        for fid in sorted(case.required_on_gpu - set(findings)):
            out.append(f"finding {fid!r} missing")
    nf = findings.get("optimizer-not-fused")
    if nf:
        from dnnprof.analysis.kernel_names import family

        mode = (nf.get("evidence") or {}).get("mode")
        if case.not_fused_mode and mode != case.not_fused_mode:
            out.append(f"optimizer-not-fused names mode {mode!r}, the script's optimizer is {case.not_fused_mode!r}")
        for row in nf.get("top") or []:
            if row.get("phase") != "optimizer" or family(str(row.get("kernel"))) in MODEL_FAMILIES:
                out.append(f"optimizer-not-fused offender is not optimizer work: {row.get('kernel')} "
                           f"({row.get('phase')}, {row.get('layer')}, {row.get('op')})")
    # Busy % against NVML/GPM is the profile's own busy-vs-nvml check, which reports, not contradicts: on the H100,
    # GPM's graphics-engine activity reads 13-19 points below the kernel records' busy time over the same 110 ms on
    # the gradient-accumulation loop's short kernels, with every kernel accounted for. The table shows both.
    # The profile's own invariants, when it states them.
    for c in summary.get("checks") or []:
        if not c.get("ok", True) and c.get("id") != "busy-vs-nvml":
            out.append(f"self-check {c.get('id')} failed: {c.get('detail')}")
    return out
