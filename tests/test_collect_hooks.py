"""In-process pieces of the collector: step detection, module ranges, stack sampling, memory, run directories."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from dnnprof.collect.stacks import StackSampler
from dnnprof.runs.rundir import INCOMPLETE_FILE, RunDir, RunDirError, name_from_command, safe_name

torch = pytest.importorskip("torch")


def _opt(n: int = 1) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(n))], lr=0.1)


def test_optimizer_hook_finds_one_boundary_per_cycle() -> None:
    from dnnprof.collect.stepdetect import OptimizerSteps

    seen: list[str] = []
    det = OptimizerSteps(seen.append)
    det.install(torch)
    try:
        single = _opt()
        for _ in range(4):
            single.step()
    finally:
        det.remove()
    # The cycle is known at the second step; every step from there ends an iteration.
    assert seen == ["optimizer"] * 3
    single.step()
    assert len(seen) == 3  # removed


def test_gan_cycle_uses_the_optimizer_that_steps_last() -> None:
    from dnnprof.collect.stepdetect import OptimizerSteps

    seen: list[int] = []
    d, g = _opt(), _opt()
    det = OptimizerSteps(lambda src: seen.append(len(calls)))
    calls: list[str] = []
    det.install(torch)
    try:
        for _ in range(3):
            d.step()
            calls.append("d")
            g.step()
            calls.append("g")
    finally:
        det.remove()
    assert det.boundary_id == id(g)
    # Boundaries right after G's second and third steps (the first cycle is still being learnt).
    assert seen == [3, 5]
    assert {id(o) for o in det.live()} == {id(d), id(g)}


def test_marker_ranges_end_steps_for_record_function_and_nvtx_names() -> None:
    from dnnprof.collect.stepdetect import MarkerSteps

    seen: list[str] = []
    det = MarkerSteps("train_step", seen.append)
    det.install(torch)
    try:
        with torch.profiler.record_function("train_step"), torch.profiler.record_function("other"):
            pass
        with torch.autograd.profiler.record_function("not_it"):
            pass

        @torch.profiler.record_function("train_step")
        def decorated() -> None:
            pass

        decorated()
    finally:
        det.remove()
    assert seen == ["marker", "marker"]
    with torch.profiler.record_function("train_step"):
        pass
    assert len(seen) == 2  # restored


def test_dataloader_batches_give_items_per_step() -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from dnnprof.collect.stepdetect import DataLoaderItems, batch_items

    assert batch_items({"x": [torch.zeros(5, 2)], "y": 3}) == 5
    assert batch_items((torch.tensor(1.0), torch.zeros(7))) == 7
    assert batch_items(["text"]) is None
    counter = DataLoaderItems()
    counter.install(torch)
    try:
        loader = DataLoader(TensorDataset(torch.zeros(10, 3), torch.zeros(10)), batch_size=4)
        it = iter(loader)
        next(it)
        next(it)
        assert counter.take() == 8
        assert counter.take() is None
        next(it)
        assert counter.take() == 2
    finally:
        counter.remove()
    list(loader)
    assert counter.take() is None


def test_dataloader_batches_end_iterations_only_without_an_optimizer() -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from dnnprof.collect.stepdetect import DataLoaderItems, DataLoaderSteps

    seen: list[str] = []
    steps = DataLoaderSteps(seen.append)
    counter = DataLoaderItems(before=steps.before_batch)
    steps.install(torch)
    counter.install(torch)
    try:
        main = DataLoader(TensorDataset(torch.zeros(12, 3)), batch_size=4)
        other = DataLoader(TensorDataset(torch.zeros(4, 3)), batch_size=2)
        assert len(list(main)) == 3 and seen == ["dataloader"] * 2  # the first batch starts iteration 0
        list(other)  # another dataset's batches are not iterations
        list(main)  # a new epoch: its first batch ends the last iteration of the one before
        assert seen == ["dataloader"] * 5
        _opt()  # a script that builds an optimizer steps on optimizer steps, however many batches make one
        list(main)
        assert seen == ["dataloader"] * 5 and steps.optimizer_built
    finally:
        counter.remove()
        steps.remove()
    assert torch.optim.Optimizer.__init__ is not None and not steps._undo


def test_module_ranges_name_every_forward_by_fqn_and_class() -> None:
    from dnnprof.collect.modranges import ModuleRanges

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = torch.nn.Linear(4, 4)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mlp(self.attn(x))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.h = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.h:
                x = b(x)
            return x

    net = Net()
    opened: list[str] = []
    ranges = ModuleRanges(torch)

    class Spy:
        def __init__(self, name: str) -> None:
            opened.append(name)

        def __enter__(self) -> None:
            pass

        def __exit__(self, *exc: object) -> None:
            pass

    ranges._rf = Spy
    ranges.install()
    try:
        net(torch.zeros(2, 4))
    finally:
        ranges.remove()
    assert opened[:5] == ["dnnprof.module:Net|Net", "dnnprof.module:h.0|Block", "dnnprof.module:h.0.attn|Linear",
                          "dnnprof.module:h.0.mlp|Sequential", "dnnprof.module:h.0.mlp.0|Linear"]
    assert "dnnprof.module:h.1.mlp.1|ReLU" in opened
    assert ranges.live_roots() == [net]
    net(torch.zeros(2, 4))
    assert len(opened) == ranges.calls == 11  # hooks gone


def test_module_ranges_survive_a_forward_that_raises() -> None:
    from dnnprof.collect.modranges import ModuleRanges

    class Bad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    outer = torch.nn.Sequential(torch.nn.Identity(), Bad())
    ranges = ModuleRanges(torch)
    ranges.install()
    try:
        with pytest.raises(ValueError, match="boom"):
            outer(torch.zeros(1))
        assert ranges._stack() == []  # every range closed
    finally:
        ranges.remove()


def test_stack_sampler_counts_the_users_line() -> None:
    s = StackSampler(library_roots=[str(Path(torch.__file__).parent)])
    frame = sys._getframe()
    for _ in range(4):
        s.sample(frame)
    rep = s.report(top=3)
    assert rep["samples"] == 4
    top = rep["top_user_lines"][0]
    assert top["file"] == __file__ and top["function"] == "test_stack_sampler_counts_the_users_line"
    assert top["pct"] == 100.0


def test_stack_sampler_thread_sees_the_main_thread() -> None:
    s = StackSampler(thread_id=threading.main_thread().ident, period_s=0.001)
    s.start()
    import time

    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end and s.samples < 5:
        sum(range(1000))
    s.stop()
    assert s.samples >= 1
    assert s.report()["elapsed_s"] > 0


def test_static_memory_breakdown_counts_each_tensor_once() -> None:
    from dnnprof.analysis.run_metrics import summarize_memory
    from dnnprof.collect.memory import static_breakdown

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    out = static_breakdown(torch, [model, model], [opt])
    n_params = sum(p.numel() for p in model.parameters())
    n_buffers = sum(b.numel() for b in model.buffers() if b.numel())
    assert out["weights_bytes"] == 4 * n_params + sum(b.nbytes for b in model.buffers())
    assert out["gradients_bytes"] == 4 * n_params
    assert out["optimizer_state_bytes"] == 2 * 4 * n_params + sum(
        s["step"].nbytes for s in opt.state.values())
    assert n_buffers > 0
    mem = summarize_memory({"step": [3, 4], "peak_allocated_bytes": [1000, 9000], "peak_reserved_bytes": [1, 2]},
                           out, 10**6, range(4, 5))
    assert mem["peak_allocated_bytes"] == 9000
    assert mem["breakdown"]["activations_other_bytes"] == 9000 - sum(out.values())


def test_run_dir_is_renamed_complete_or_marked_incomplete(tmp_path: Path) -> None:
    rd = RunDir.create("train", root=tmp_path)
    assert rd.staging.name.startswith(".train-") and rd.staging.name.endswith(".partial")
    (rd.staging / "meta.json").write_text("{}")
    final = rd.finish(True)
    assert final == rd.final and (final / "meta.json").is_file() and not rd.staging.exists()
    rd2 = RunDir.create("train", root=tmp_path)
    assert rd2.final != rd.final  # same second: a suffix, never a clash
    bad = rd2.finish(False, "interrupted during the profiled window")
    assert bad.name.endswith(".incomplete")
    assert (bad / INCOMPLETE_FILE).read_text() == "interrupted during the profiled window\n"


def test_run_dir_out_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(RunDirError, match="already exists and is not an empty directory"):
        RunDir.create("x", out=tmp_path / "full")
    (tmp_path / "empty").mkdir()
    rd = RunDir.create("x", out=tmp_path / "empty")
    assert rd.finish(True) == (tmp_path / "empty").absolute()


@pytest.mark.parametrize("command, name", [
    (["python", "train.py", "--lr", "3"], "train"),
    (["python", "-u", "-m", "pkg.trainer", "x.py"], "trainer"),
    (["torchrun", "--nproc-per-node", "1", "a/b/fine tune.py"], "fine-tune"),
    (["./run.sh"], "run.sh"),
])
def test_run_names_from_commands(command: list[str], name: str) -> None:
    assert name_from_command(command) == name
    assert safe_name("a/b c:d") == "a-b-c-d"


def test_counters_pass_says_why_it_skips(tmp_path: Path) -> None:
    from dnnprof.collect.config import CollectorConfig
    from dnnprof.model.profile import Profile
    from dnnprof.runs.counters_pass import counters_pass

    cfg = CollectorConfig(counters=True)
    out = counters_pass(tmp_path, ["python", "x.py"], cfg, Profile(), [], lambda d: {}, None)
    assert out == {"status": "skipped", "message": "no timed steps to take counters for"}
    out = counters_pass(tmp_path, ["python", "x.py"], cfg, Profile(), [4, 5, 6], lambda d: {}, None)
    assert out["status"] == "skipped" and "step 5 launched no kernels" in out["message"]


def test_sigint_disposition_is_read_from_proc() -> None:
    import os
    import signal
    import subprocess

    from dnnprof.runs.session import ignores_sigint

    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc")
    code = "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(1, flush=True); time.sleep(30)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "1"
        assert ignores_sigint(p.pid)
        assert not ignores_sigint(os.getpid()) or signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        p.kill()
        p.wait()



def test_the_timing_windows_external_correlation_can_be_turned_off(tmp_path: Path, monkeypatch) -> None:
    from dnnprof.collect.windows import ENV_TIMING_EXTCORR, Window

    monkeypatch.setenv(ENV_TIMING_EXTCORR, "0")
    w = Window(torch, "timing", 0, cuda=False)
    w.start()
    w.open_step(0)
    torch.randn(8, 8).sum()
    w.close_step()
    assert w.export(tmp_path) == f"{tmp_path.name}/timing.json.gz" and (tmp_path / "timing.json.gz").is_file()
    assert w.record()["external_correlation"] is False  # PyTorch 2.x takes the option
    w = Window(torch, "attribution", 0, cuda=False)  # only the timing window has the switch
    w.start()
    w.export(tmp_path / "a")
    assert w.record()["external_correlation"] is True


def test_a_killed_runs_staging_folder_does_not_block_the_next_run(tmp_path: Path) -> None:
    """A run killed mid-way (SIGKILL, a lost machine) leaves its staging folder; the same --out must still work,
    and what the dead run left is neither reused nor removed. On an H100 this once failed with
    '/tmp: cannot create the run directory (File exists)'."""
    dead = RunDir.create("train", out=tmp_path / "run")
    (dead.staging / "collector.json").write_text("{}")
    rd = RunDir.create("train", out=tmp_path / "run")
    assert rd.staging != dead.staging and rd.staging.parent == tmp_path
    assert oct(rd.staging.stat().st_mode & 0o777) == oct(0o755)
    (rd.staging / "meta.json").write_text("{}")
    assert rd.finish(True) == (tmp_path / "run").absolute()
    assert (dead.staging / "collector.json").read_text() == "{}"
