"""The Nsight Compute driver's pure parts (selection, filters, command) and its error mapping with a fake ncu."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from dnnprof.analysis.counters_join import kernel_base_name, kernel_name_words
from dnnprof.collect import ncu as N
from dnnprof.ingest.ncu_csv import read_ncu_csv

DATA = Path(__file__).parent / "data" / "ncu_gpt2_h200"


def _step() -> N.LaunchSequence:
    """The launches of one real GPT-2 124M bf16 training step on an H200 (Kineto), in launch order."""
    doc = json.loads((DATA / "kineto_step4_kernels.json").read_text())
    rows = np.asarray(doc["rows"], dtype=np.int64)
    col = {c: j for j, c in enumerate(doc["columns"])}
    rows = rows[np.argsort(rows[:, col["correlation"]], kind="stable")]
    names = np.asarray(doc["names"], dtype=object)[rows[:, col["name"]]]
    return N.LaunchSequence(names, rows[:, [col["grid_x"], col["grid_y"], col["grid_z"]]],
                            rows[:, [col["block_x"], col["block_y"], col["block_z"]]],
                            rows[:, col["registers_per_thread"]], rows[:, col["shared_memory_bytes"]],
                            rows[:, col["dur_ns"]])


def _synthetic(spec: list[tuple[str, int, int]]) -> N.LaunchSequence:
    """Launches from (name, grid_x, dur_ns)."""
    n = len(spec)
    return N.LaunchSequence(np.asarray([s[0] for s in spec], dtype=object),
                            np.asarray([[s[1], 1, 1] for s in spec]), np.tile([128, 1, 1], (n, 1)),
                            np.full(n, 32), np.zeros(n, dtype=np.int64), np.asarray([s[2] for s in spec]))


# --- selection -------------------------------------------------------------------------------------------------
def test_selection_covers_95_percent_with_the_fewest_signatures() -> None:
    seq = _step()
    sel = N.select_signatures(seq, 0.95)
    assert sel.coverage >= 0.95 and sel.total_ns == int(seq.dur_ns.sum())
    assert sel.unique_signatures > len(sel.signatures) > 10
    totals = [s.total_ns for s in sel.signatures]
    assert totals == sorted(totals, reverse=True)
    assert (sel.covered_ns - totals[-1]) / sel.total_ns < 0.95  # one fewer would not do
    assert sum(s.launches for s in N.select_signatures(seq, 1.0).signatures) == len(seq)


def test_selection_edge_cases() -> None:
    seq = _synthetic([("a", 1, 90), ("b", 1, 5), ("c", 1, 5), ("a", 1, 90)])
    sel = N.select_signatures(seq, 0.9)
    assert [s.name for s in sel.signatures] == ["a"] and sel.coverage == pytest.approx(180 / 190)
    assert [s.name for s in N.select_signatures(seq, 0.96).signatures] == ["a", "b"]
    assert sel.signatures[0].launches == 2 and sel.signatures[0].total_ns == 180
    empty = N.select_signatures(_synthetic([]), 0.95)
    assert empty.signatures == [] and empty.coverage == 0.0
    with pytest.raises(ValueError, match="coverage"):
        N.select_signatures(seq, 0.0)


# --- kernel-name patterns --------------------------------------------------------------------------------------
def test_patterns_from_kineto_names_match_ncu_names() -> None:
    """For every kernel both tools saw, the pattern built from the Kineto name selects ncu's spelling."""
    kineto = sorted(set(json.loads((DATA / "kineto_step4_kernels.json").read_text())["names"]))
    ncu = sorted(set(read_ncu_csv(DATA / "ncu_raw.csv").kernel_name.tolist()))
    pairs = [(k, n) for n in ncu for k in kineto
             if kernel_base_name(k) == kernel_base_name(n) and kernel_name_words(k) == kernel_name_words(n)]
    assert len(pairs) >= 20
    for k, n in pairs:
        pat = N.kernel_name_pattern(k)
        assert ":" not in pat
        assert re.search(pat, k) and re.search(pat, n), (pat, n)
    tanh = next(k for k in kineto if "tanh_kernel_cuda" in k and "backward" not in k)
    tanh_bwd = next(k for k in kineto if "tanh_backward_kernel_cuda" in k)
    assert not re.search(N.kernel_name_pattern(tanh), tanh_bwd)  # a different functor of the same launcher


def test_pattern_boundaries_and_function_mode() -> None:
    pat = N.kernel_name_pattern("void at::native::elementwise_kernel<128, 2, at::native::Foo>(int)")
    assert re.search(pat, "void native::elementwise_kernel<128, 2, native::Foo>(int)")
    assert not re.search(pat, "void native::vectorized_elementwise_kernel<4, native::Foo>(int)")
    plain = N.kernel_name_pattern("nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNN")
    assert re.search(plain, "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNN")
    assert not re.search(plain, "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_bias_NNNX")
    fn = N.kernel_name_pattern("void at::native::reduce_kernel<128, 4>(int)", "function")
    assert re.search(fn, "reduce_kernel") and re.search(fn, "at::native::reduce_kernel")
    assert not re.search(fn, "my_reduce_kernel") and ":" not in fn


# --- filter plans ----------------------------------------------------------------------------------------------
def test_plans_on_a_real_step() -> None:
    seq = _step()
    sel = N.select_signatures(seq, 0.95)
    for mode in N.FILTER_MODES:
        name = N.plan_filters(seq, sel, "name", mode=mode, prune=False)
        assert name.missed_signatures == 0 and name.predicted_coverage >= sel.coverage
        assert all(re.search(name.kernel_regex, str(seq.names[i])) for i in name.profiled)
        first = N.plan_filters(seq, sel, "first-invocation", mode=mode)
        assert len({str(seq.names[i]) for i in first.profiled}) == len(first.profiled) < len(name.profiled)
        per_cfg = N.plan_filters(seq, sel, "first-per-config", mode=mode)
        assert per_cfg.missed_signatures == 0 and len(per_cfg.profiled) < len(name.profiled) / 5
        assert per_cfg.predicted_coverage >= sel.target
        auto = N.plan_filters(seq, sel, mode=mode)
        assert auto.strategy == "first-per-config" and auto.missed_signatures == 0
        assert len(auto.profiled) <= len(per_cfg.profiled) and auto.mode == mode


def test_exclude_filter_lets_every_wanted_kernel_through() -> None:
    """The default filter names the kernels *not* wanted; none of its patterns hits a wanted kernel."""
    seq = _step()
    sel = N.select_signatures(seq, 0.95)
    plan = N.plan_filters(seq, sel, prune=False)
    assert plan.mode == "exclude" and plan.kernel_regex.startswith("^(?!.*(") and ":" not in plan.kernel_regex
    rx = re.compile(plan.kernel_regex)
    assert all(rx.search(s.name) for s in sel.signatures)
    names = {str(n) for n in seq.names}
    wanted = {s.name for s in sel.signatures}
    assert plan.kernels == sum(1 for n in names if rx.search(n)) >= len(wanted)
    # unwanted kernels that differ from a wanted one only in plain types (float vs long) stay in
    assert sum(1 for n in names - wanted if rx.search(n)) <= 5
    opts = plan.options()
    assert opts[:3] == ["--kernel-name-base", "demangled", "--kernel-id"]
    assert opts[3] == f"::regex:{plan.kernel_regex}:1" and opts[4:] == ["--filter-mode", "per-launch-config"]


def test_pruning_drops_kernels_whose_coverage_other_launches_bring() -> None:
    seq = _step()
    sel = N.select_signatures(seq, 0.95)
    full = N.plan_filters(seq, sel, prune=False)
    pruned = N.plan_filters(seq, sel)
    assert len(pruned.profiled) < len(full.profiled) and pruned.kernels < full.kernels
    assert sel.target <= pruned.predicted_coverage <= full.predicted_coverage
    assert pruned.predicted_coverage >= sel.target + N.PRUNE_MARGIN
    # synthetic: k's second configuration rides along with its first; c and d are worth one launch each
    seq2 = _synthetic([("k<Alpha>(int)", 1, 60), ("k<Alpha>(int)", 2, 30), ("c<Charlie>(int)", 1, 6),
                       ("d<Delta>(int)", 1, 4)])
    sel2 = N.select_signatures(seq2, 0.95)
    assert len(sel2.signatures) == 3
    plan = N.plan_filters(seq2, sel2, "first-per-config", prune=False)
    assert plan.profiled.tolist() == [0, 1, 2] and plan.predicted_coverage == pytest.approx(0.96)
    assert N.plan_filters(seq2, sel2, "first-per-config").profiled.tolist() == [0, 1, 2]  # 0.90 < 0.95 + margin
    sel3 = N.select_signatures(seq2, 0.85)  # k alone: 90% ≥ 85% + margin, c is dropped
    assert len(sel3.signatures) == 2
    assert N.plan_filters(seq2, sel3, "first-per-config").profiled.tolist() == [0, 1]


def test_exclusion_never_hides_a_wanted_kernel() -> None:
    # the unwanted kernel's pattern would also match the wanted one: it stays in (one launch too many)
    seq = _synthetic([("void k<Foo, Barrier>(int)", 1, 90), ("void k<Foo>(int)", 1, 10)])
    sel = N.select_signatures(seq, 0.9)
    plan = N.plan_filters(seq, sel, "name", prune=False)
    assert plan.kernel_regex == "" and plan.profiled.tolist() == [0, 1] and plan.options() == []
    seq = _synthetic([("void k<Alpha>(int)", 1, 90), ("void k<Bravo>(int)", 1, 10)])
    plan = N.plan_filters(seq, N.select_signatures(seq, 0.9), "name", prune=False)
    assert plan.profiled.tolist() == [0] and re.search(plan.kernel_regex, "void native::k<Alpha>(T1)")
    assert not re.search(plan.kernel_regex, "void native::k<Bravo>(T1)")
    with pytest.raises(ValueError, match="filter mode"):
        N.plan_filters(seq, N.select_signatures(seq, 0.9), mode="both")


def test_template_words_skip_namespaces_and_enum_casts() -> None:
    """Kineto and ncu spell cub's kernels differently (ncu drops namespaces and prints enum values bare)."""
    kineto = ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::"
              "detail::radix::policy_hub<long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long>::Policy1000, "
              "(at_cuda_detail::cub::SortOrder)0, long, at::cuda::cub::detail::OpaqueType<8>, int, int, "
              "at_cuda_detail::cub::detail::identity_decomposer_t>(int*, int*, long*, long const*, long*, "
              "at::cuda::cub::detail::OpaqueType<8> const*, at::cuda::cub::detail::OpaqueType<8>*, long, int, int, "
              "at_cuda_detail::cub::detail::identity_decomposer_t)")
    ncu = ("void radix_sort::DeviceRadixSortOnesweepKernel<radix::policy_hub<long, cub::OpaqueType<8>, unsigned long "
           "long>::Policy1000, 0, long, cub::OpaqueType<8>, int, int, identity_decomposer_t>(T4 *, T4 *, T3 *, "
           "const T3 *, T3 *, const T5 *, T5 *, T3, int, int, T8)")
    for words in (N.MAX_PATTERN_WORDS, N.EXCLUDE_PATTERN_WORDS):
        pat = N.kernel_name_pattern(kineto, max_words=words)
        assert re.search(pat, kineto) and re.search(pat, ncu), pat
        assert "at_cuda_detail" not in pat and "SortOrder" not in pat


def test_per_launch_config_takes_the_smallest_k() -> None:
    # a, b share launch config 64; c has its own. Reaching b needs the first 3 launches of config 64.
    seq = _synthetic([("a<X>(int)", 64, 50), ("a<X>(int)", 64, 50), ("b<Y>(int)", 64, 50), ("c<Z>(int)", 8, 50)])
    sel = N.select_signatures(seq, 1.0)
    plan = N.plan_filters(seq, sel, "per-launch-config", mode="include")
    assert plan.launch_count == 3 and plan.profiled.tolist() == [0, 1, 2, 3] and plan.missed_signatures == 0
    assert plan.options()[-4:] == ["--filter-mode", "per-launch-config", "--launch-count", "3"]
    first = N.plan_filters(seq, sel, "first-invocation", mode="include")
    assert first.profiled.tolist() == [0, 2, 3]
    opts = first.options()
    assert opts[:2] == ["--kernel-name-base", "demangled"] and opts[2] == "--kernel-id"
    assert opts[3].startswith("::regex:") and opts[3].endswith(":1") and "--filter-mode" not in opts
    assert "--filter-mode" in N.plan_filters(seq, sel, "first-per-config").options()
    name = N.plan_filters(seq, sel, "name", mode="include")
    assert name.options()[2:4] == ["--kernel-name", f"regex:{name.kernel_regex}"] and len(name.options()) == 4
    everything = N.plan_filters(seq, sel, "first-per-config")  # exclude mode, nothing to exclude
    assert everything.kernel_regex == "" and everything.options()[3] == "::regex:.*:1"
    with pytest.raises(ValueError, match="unknown strategy"):
        N.plan_filters(seq, sel, "everything")


# --- the command -----------------------------------------------------------------------------------------------
def test_command_for_hopper_with_a_plan(tmp_path: Path) -> None:
    seq = _step()
    plan = N.plan_filters(seq, N.select_signatures(seq))
    log = tmp_path / "ncu.csv"
    cmd = N.build_ncu_command("/opt/ncu", ["python", "train.py", "--steps", "4"], log, plan=plan)
    s = " ".join(cmd)
    assert cmd[0] == "/opt/ncu" and cmd[-4:] == ["python", "train.py", "--steps", "4"]
    assert "--clock-control none" in s and "--nvtx --nvtx-include step3/ --nvtx-push-pop-scope process" in s
    assert f"--csv --page raw --print-units base --log-file {log}" in s
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    # the parts of the speed-of-light throughputs, not the two top-level metrics (4 replay passes instead of 10)
    assert "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed" in metrics and "dram__bytes.sum" in metrics
    assert "dram__cycles_active.avg.pct_of_peak_sustained_elapsed" in metrics
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" not in metrics
    assert "sm__ops_path_tensor_src_bf16_dst_fp32.sum" in metrics and "--section" not in cmd
    assert all(o in cmd for o in plan.options())


def test_command_for_other_gpus_and_options(tmp_path: Path) -> None:
    cmd = N.build_ncu_command("ncu", ["./app"], tmp_path / "l.csv", nvtx_range="train_step", plan=None,
                              compute_capability="8.0", process_scope=False, clock_control="base")
    assert cmd[cmd.index("--section") + 1] == N.NCU_TENSOR_SECTION
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert not any("ops_path_tensor" in m for m in metrics)
    # names verified only on sm_90 stay off other architectures (an unknown metric fails the whole ncu pass)
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in metrics
    assert not any("fmaheavy" in m for m in metrics)
    assert "--nvtx-push-pop-scope" not in cmd and cmd[cmd.index("--nvtx-include") + 1] == "train_step/"
    assert cmd[cmd.index("--clock-control") + 1] == "base" and "--kernel-name" not in cmd
    no_range = N.build_ncu_command("ncu", ["./app"], tmp_path / "l.csv", nvtx_range=None)
    assert "--nvtx" not in no_range


@pytest.mark.parametrize(("text", "rc", "status"), [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters", 1,
     "permission"),
    ("==ERROR== Profiling is not supported on device 0. To find out supported GPUs refer --list-chips option.\n"
     "==WARNING== No kernels were profiled.", 0, "unsupported-gpu"),
    ("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\nAvailable Kernels:\n1. k", 0,
     "no-kernels"),
    ("==ERROR== Failed to find metric sm__bogus.sum", 1, "failed"),
    ("Traceback (most recent call last):\nRuntimeError: boom", 1, "failed"),
    ('"ID","Kernel Name"\n', 0, "ok"),
])
def test_classify_ncu_output(text: str, rc: int, status: str) -> None:
    got, message = N.classify_ncu_output(text, rc)
    assert got == status
    if status == "permission":
        assert "NVreg_RestrictProfilingToAdminUsers=0" in message and "CAP_PERFMON" in message
    if status == "failed":
        assert str(rc) in message


# --- a fake ncu on PATH ----------------------------------------------------------------------------------------
FAKE_NCU = r"""#!/bin/bash
if [ "$1" = "--help" ]; then echo "  --nvtx-push-pop-scope arg (=thread)"; exit 0; fi
log=""; prev=""
for a in "$@"; do if [ "$prev" = "--log-file" ]; then log="$a"; fi; prev="$a"; done
echo "$@" > "$FAKE_NCU_ARGS"
case "$FAKE_NCU_MODE" in
  perm) printf '==PROF== Connected to process 42\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n' > "$log"; echo "step done"; exit 1;;
  unsupported) printf '==ERROR== Profiling is not supported on device 0. To find out supported GPUs refer --list-chips option.\n==WARNING== No kernels were profiled.\n' > "$log"; exit 0;;
  nokernels) printf '==WARNING== No kernels were profiled.\n' > "$log"; exit 0;;
  failed) printf '==ERROR== Failed to find metric sm__bogus.sum\n' > "$log"; exit 1;;
  apperror) cp "$FAKE_NCU_CSV" "$log"; printf '==ERROR== The application returned an error code (1).\n' >> "$log"; exit 1;;
  garbage) echo "hello" > "$log"; exit 0;;
  hang) sleep 30;;
  *) cp "$FAKE_NCU_CSV" "$log"; exit 0;;
esac
"""


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "ncu"
    exe.write_text(FAKE_NCU)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NCU_CSV", str(DATA / "ncu_raw.csv"))
    monkeypatch.setenv("FAKE_NCU_ARGS", str(tmp_path / "args.txt"))
    monkeypatch.delenv("DNNPROF_NCU", raising=False)
    return exe


@pytest.mark.parametrize(("mode", "status", "needle"), [
    ("perm", "permission", "NVreg_RestrictProfilingToAdminUsers=0"),
    ("unsupported", "unsupported-gpu", "cannot profile the GPU"),
    ("nokernels", "no-kernels", "NVTX range"),
    ("failed", "failed", "sm__bogus.sum"),
    ("garbage", "failed", "CSV could not be read"),
    ("ok", "ok", "profiled 41 kernel launches"),
    ("apperror", "ok", "application returned an error"),
])
def test_run_ncu_maps_outcomes(fake_ncu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
                               status: str, needle: str) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    log = tmp_path / "out" / "ncu.csv"
    cmd = N.build_ncu_command(str(fake_ncu), ["python", "-c", "pass"], log)
    res = N.run_ncu(cmd, log, timeout_s=30)
    assert res.status == status and needle in res.message, res.message
    assert res.ok == (status == "ok") and (res.table is not None) == (status == "ok")
    if res.ok:
        assert len(res.table) == 41 and res.wall_s > 0  # type: ignore[arg-type]


def test_run_ncu_timeout_and_missing_binary(fake_ncu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    log = tmp_path / "ncu.csv"
    res = N.run_ncu([str(fake_ncu), "--log-file", str(log), "app"], log, timeout_s=1)
    assert res.status == "timeout" and "1 s" in res.message and res.wall_s < 10
    gone = N.run_ncu([str(tmp_path / "no-such-ncu"), "app"], log)
    assert gone.status == "ncu-not-found" and "not found" in gone.message


def test_find_ncu(fake_ncu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert N.find_ncu() == str(fake_ncu)
    monkeypatch.setenv("DNNPROF_NCU", str(fake_ncu))
    assert N.find_ncu(path=str(tmp_path / "empty")) == str(fake_ncu)
    monkeypatch.delenv("DNNPROF_NCU")
    monkeypatch.setattr(N, "ncu_install_dirs", lambda: [])
    assert N.find_ncu(path=str(tmp_path / "empty"), globs=()) is None


def test_collect_counters_end_to_end(fake_ncu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    res, plan = N.collect_counters(["python", "train.py"], _step(), tmp_path / "c.csv", nvtx_range="step3")
    assert res.ok and plan is not None and len(res.table) == 41  # type: ignore[arg-type]
    args = (tmp_path / "args.txt").read_text()
    assert "--nvtx-push-pop-scope process" in args and "--kernel-name-base demangled" in args
    assert args.rstrip().endswith("python train.py")
    monkeypatch.setattr(N, "find_ncu", lambda: None)
    res, plan = N.collect_counters(["python", "train.py"], _step(), tmp_path / "c.csv")
    assert res.status == "ncu-not-found" and plan is None and "DNNPROF_NCU" in res.message
