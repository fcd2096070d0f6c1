"""The occupancy calculator against the reference's worked examples, real ncu numbers and the recorded driver table."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import typer

from dnnprof.analysis.occupancy import (
    ARCHS,
    SM_90,
    OccupancyInputError,
    arch_for_device,
    compute_occupancy,
    kernel_occupancy,
    parse_cc,
)
from dnnprof.cli import occupancy as occupancy_cli
from dnnprof.cli.errors import UserError
from dnnprof.model.device import DeviceInfo
from dnnprof.model.schema import empty_table

DATA = Path(__file__).parent / "data" / "occupancy"
NCU_CSV = DATA / "ncu_gpt2_4layer_h200_occupancy.csv"
H200 = DeviceInfo(
    id=0, name="NVIDIA H200", compute_major=9, compute_minor=0, sm_count=132, max_threads_per_block=1024,
    max_threads_per_sm=2048, regs_per_block=65536, regs_per_sm=65536, shared_memory_per_block_bytes=49152,
    shared_memory_per_block_optin_bytes=232448, shared_memory_per_sm_bytes=233472,
)  # fmt: skip


# Worked examples (reference §1.3, sm_90) -------------------------------------------------------------------------


def test_worked_example_full_occupancy():
    r = compute_occupancy("9.0", 256, 32)
    assert r.registers_per_warp_allocated == 1024
    assert r.limits["registers"] == 8 and r.limits["warps"] == 8
    assert r.smem_per_block_allocated_bytes == 1024  # the driver's reserved 1 KB only
    assert (r.active_blocks_per_sm, r.active_warps_per_sm, r.occupancy_pct) == (8, 64, 100.0)
    assert r.limiters == ["warps", "registers"]


def test_worked_example_register_bound():
    r = compute_occupancy("9.0", 256, 128)
    assert r.registers_per_warp_allocated == 4096
    assert (r.active_blocks_per_sm, r.occupancy_pct, r.limiters) == (2, 25.0, ["registers"])


def test_worked_example_shared_memory_bound():
    r = compute_occupancy("9.0", 128, 0, 0, 48 * 1024)
    assert r.smem_per_block_allocated_bytes == 50176
    assert r.limits["registers"] is None  # no registers: no register limit
    assert (r.active_blocks_per_sm, r.active_warps_per_sm, r.occupancy_pct) == (4, 16, 25.0)
    assert r.limiters == ["shared_memory"]


# Per-architecture constants (reference §1.4) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "block", "blocks", "pct"),
    [
        ("7.0", 1024, 2, 100.0),  # 64 warps/SM
        ("7.5", 1024, 1, 100.0),  # 32 warps/SM
        ("8.0", 1024, 2, 100.0),
        ("8.6", 1024, 1, 200 / 3),  # 48 warps/SM: a 32-warp block leaves 16 idle
        ("8.7", 1024, 1, 200 / 3),
        ("8.9", 32, 24, 50.0),  # 24 blocks/SM
        ("8.6", 32, 16, 100 / 3),  # 16 blocks/SM
        ("9.0", 32, 32, 50.0),  # 32 blocks/SM
    ],
)
def test_warp_and_block_limits_per_architecture(cc, block, blocks, pct):
    r = compute_occupancy(cc, block, 16)
    assert r.active_blocks_per_sm == blocks
    assert r.occupancy_pct == pytest.approx(pct)


@pytest.mark.parametrize(
    ("cc", "static", "alloc", "sm_bytes"),
    [
        ("7.0", 1000, 1024, 96 * 1024),  # 256 B unit, nothing reserved
        ("7.5", 1000, 1024, 64 * 1024),
        ("8.0", 1000, 2048, 164 * 1024),  # 1000 + 1 KB reserved -> 128 B unit
        ("8.7", 49152, 50176, 164 * 1024),
        ("8.9", 49152, 50176, 100 * 1024),
    ],
)
def test_shared_memory_allocation_per_architecture(cc, static, alloc, sm_bytes):
    r = compute_occupancy(cc, 32, 16, static)
    assert r.smem_per_block_allocated_bytes == alloc
    assert r.smem_config_bytes == sm_bytes
    assert r.limits["shared_memory"] == sm_bytes // alloc


def test_turing_has_no_zero_carveout():
    assert compute_occupancy("7.5", 32, 16, carveout_pct=0).smem_config_bytes == 32 * 1024
    assert compute_occupancy("7.0", 32, 16, 1000, carveout_pct=0).smem_config_bytes == 8 * 1024


# Carveout, driver-chosen configuration, opt-in, barriers ------------------------------------------------------------


@pytest.mark.parametrize(("carveout", "blocks", "config"), [(None, 4, 233472), (-1, 4, 233472), (100, 4, 233472),
                                                            (50, 2, 135168), (25, 1, 65536), (0, 1, 65536)])  # fmt: skip
def test_carveout_preference_rounds_up_to_a_supported_size(carveout, blocks, config):
    # 50 % of 228 KB = 114 KB -> 132 KB; 25 % = 57 KB -> 64 KB; 0 % -> smallest size that fits one 49 KB block.
    r = compute_occupancy("9.0", 128, 0, 0, 48 * 1024, carveout_pct=carveout)
    assert (r.active_blocks_per_sm, r.smem_config_bytes) == (blocks, config)


def test_driver_chosen_configuration_gives_ncu_per_limiter_numbers():
    r = compute_occupancy("9.0", 1, 18, smem_config_bytes=32768, barriers_per_block=0)
    assert r.limits == {"warps": 64, "registers": 84, "shared_memory": 32, "blocks": 32, "barriers": 32}
    assert (r.active_blocks_per_sm, r.occupancy_pct, r.limiters) == (32, 50.0, ["shared_memory", "blocks"])
    small = compute_occupancy("9.0", 128, 32, 0, 16384, smem_config_bytes=16384)
    assert small.active_blocks_per_sm == 0 and small.limiters == ["shared_memory"]
    assert "smaller than one block" in small.reason


def test_max_dynamic_smem():
    # Not opted in (attribute = 48 KB): 48 KB dynamic is allowed (1 KB reserved on top), 48 KB + 1 is not.
    assert compute_occupancy("9.0", 128, 32, 0, 49152, max_dynamic_smem=49152).active_blocks_per_sm == 4
    r = compute_occupancy("9.0", 128, 32, 0, 49153, max_dynamic_smem=49152)
    assert (r.active_blocks_per_sm, r.limiters) == (
        0,
        ["shared_memory"],
    ) and "exceeds the function's" in r.reason
    # Unknown attribute: opted in to the maximum, 227 KB - static.
    assert compute_occupancy("9.0", 128, 32, 0, 232448).active_blocks_per_sm == 1
    assert compute_occupancy("9.0", 128, 32, 1, 232448).active_blocks_per_sm == 0


def test_barrier_limit_on_hopper():
    r = compute_occupancy("9.0", 32, 16, barriers_per_block=3)
    assert (r.active_blocks_per_sm, r.limits["barriers"], r.limiters) == (21, 21, ["barriers"])
    two = compute_occupancy("9.0", 32, 16, barriers_per_block=2)
    assert (two.active_blocks_per_sm, two.limiters) == (32, ["blocks", "barriers"])
    none = compute_occupancy("9.0", 32, 16, barriers_per_block=0)
    assert none.limits["barriers"] == 32 and none.limiters == [
        "blocks"
    ]  # ncu caps the number at the block limit
    assert compute_occupancy("8.0", 32, 16, barriers_per_block=16).limits["barriers"] is None


# Invalid launches: 0 blocks with a limiter and a reason ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "limiter", "words"),
    [
        (("9.0", 1025, 32), {}, "warps", "1024-thread maximum"),
        (("9.0", 128, 256), {}, "registers", "255-register maximum"),
        (("9.0", 1024, 255), {}, "registers", "block limit"),  # 8192 regs/warp x 32 warps > 64 K
        (("9.0", 385, 168), {}, "registers", "block limit"),  # 13 warps round up to 16 for the hardware check
        (("9.0", 128, 32, 49153), {}, "shared_memory", "49152 B static limit"),
        (("9.0", 128, 32, 0, 40000), {"max_dynamic_smem": 30000}, "shared_memory", "exceeds the function's"),
        (("8.6", 128, 32, 0, 101377), {}, "shared_memory", "exceeds"),
        (("7.5", 128, 32, 0, 65537), {}, "shared_memory", "exceeds"),
    ],
)
def test_invalid_launch_is_zero_blocks_not_an_exception(args, kwargs, limiter, words):
    r = compute_occupancy(*args, **kwargs)
    assert r.active_blocks_per_sm == 0 and r.occupancy_pct == 0.0
    assert limiter in r.limiters and r.limits[limiter] == 0
    assert words in r.reason


def test_hopper_384_threads_168_registers_is_the_largest_block():
    assert compute_occupancy("9.0", 384, 168).active_blocks_per_sm == 1


# Malformed input: a ValueError subclass with a clear message -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("10.0", 128, 32), {}, "compute capability 10.0: constants not known"),
        (("12.0", 128, 32), {}, "compute capability 12.0: constants not known"),
        (("6.1", 128, 32), {}, "compute capability 6.1: constants not known"),
        (("nine", 128, 32), {}, "compute capability 'nine'"),
        (("9.0", 0, 32), {}, "block_size: must be >= 1"),
        (("9.0", -5, 32), {}, "block_size: must be >= 1"),
        (("9.0", 128, -1), {}, "registers_per_thread: must be >= 0"),
        (("9.0", 128, 32, -1), {}, "static_smem: must be >= 0"),
        (("9.0", 128, 32, 0, -1), {}, "dynamic_smem: must be >= 0"),
        (("9.0", 128, 32), {"carveout_pct": 101}, "carveout_pct: must be -1 (default) or 0..100"),
        (("9.0", 128, 32), {"carveout_pct": -2}, "carveout_pct: must be >= -1"),
        (("9.0", 128, 32), {"smem_config_bytes": -1}, "smem_config_bytes: must be >= 0"),
        (("9.0", 128, 32), {"max_dynamic_smem": -1}, "max_dynamic_smem: must be >= 0"),
        (("9.0", 128, 32), {"barriers_per_block": -1}, "barriers_per_block: must be >= 0"),
        (("9.0", 128.5, 32), {}, "block_size: expected an integer"),
        (("9.0", True, 32), {}, "block_size: expected an integer"),
        (("9.0", "128", 32), {}, "block_size: expected an integer"),
    ],
)
def test_malformed_input_raises_a_clear_value_error(args, kwargs, message):
    with pytest.raises(OccupancyInputError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        compute_occupancy(*args, **kwargs)
    assert isinstance(e.value, ValueError)


def test_parse_cc_forms():
    assert (
        parse_cc("9.0") == parse_cc("9") == parse_cc("sm_90") == parse_cc(9.0) == parse_cc((9, 0)) == (9, 0)
    )
    assert parse_cc(8.7) == (8, 7) and parse_cc("sm_120") == (12, 0)
    assert set(ARCHS) == {(7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0)}


# Nsight Compute's own numbers (real H200 ncu CSV) ------------------------------------------------------------------


def _ncu_rows() -> list[dict[str, str]]:
    with NCU_CSV.open(newline="") as f:
        return list(csv.DictReader(f))


def test_ncu_device_attributes_equal_the_sm90_constants():
    row = _ncu_rows()[0]
    assert int(row["device__attribute_max_blocks_per_multiprocessor"]) == SM_90.max_blocks_per_sm
    assert (
        int(row["device__attribute_reserved_shared_memory_per_block"]) == SM_90.reserved_smem_per_block_bytes
    )
    assert int(row["device__attribute_max_shared_memory_per_multiprocessor"]) == SM_90.smem_per_sm_bytes
    assert int(row["device__attribute_max_shared_memory_per_block_optin"]) == SM_90.smem_per_block_optin_bytes
    assert int(row["device__attribute_max_threads_per_multiprocessor"]) == SM_90.max_threads_per_sm


def test_calculator_equals_ncu_theoretical_occupancy_and_every_block_limit():
    rows = _ncu_rows()
    assert len(rows) == 185
    ncu_limit = {"warps": "warps", "registers": "registers", "shared_memory": "shared_mem", "blocks": "blocks",
                 "barriers": "barriers"}  # fmt: skip
    for row in rows:
        v = {k: float(x) for k, x in row.items() if k not in ("ID", "Kernel Name")}
        args = ("9.0", int(v["launch__block_size"]), int(v["launch__registers_per_thread"]),
                int(v["launch__shared_mem_per_block_static"]), int(v["launch__shared_mem_per_block_dynamic"]))  # fmt: skip
        bars = int(v["launch__barrier_count"])
        r = compute_occupancy(
            *args, smem_config_bytes=int(v["launch__shared_mem_config_size"]), barriers_per_block=bars
        )
        where = f"ncu ID {row['ID']}"
        assert r.limits == {k: int(v[f"launch__occupancy_limit_{n}"]) for k, n in ncu_limit.items()}, where
        assert r.occupancy_pct == pytest.approx(v["sm__maximum_warps_per_active_cycle_pct"], abs=1e-9), where
        assert r.active_warps_per_sm == v["sm__maximum_warps_avg_per_active_cycle"], where
        assert r.smem_per_block_allocated_bytes == v["launch__shared_mem_per_block_allocated"], where
        assert r.smem_reserved_per_block_bytes == v["launch__shared_mem_per_block_driver"], where
        # ncu's "registers per thread allocated" is the block's register allocation spread over its threads.
        assert (
            r.registers_per_block_allocated / r.block_size == v["launch__registers_per_thread_allocated"]
        ), where
        # Without the driver-chosen configuration (default carveout) the occupancy is the same.
        assert (
            compute_occupancy(*args, barriers_per_block=bars).active_blocks_per_sm == r.active_blocks_per_sm
        )


# The CUDA driver's answers, recorded on a GPU ---------------------------------------------------------------------


def _driver_tables() -> list[Path]:
    return sorted(DATA.glob("occupancy_driver_*.jsonl*"))


@pytest.mark.parametrize("path", _driver_tables() or [None], ids=lambda p: p.name if p else "none")
def test_calculator_equals_the_recorded_driver_table(path):
    if path is None:
        pytest.skip(
            "no recorded driver table in tests/data/occupancy (run benchmarks/gpu/record_occupancy_table.py)"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        head, *rows = [json.loads(line) for line in f if line.strip()]
    dev = head["device"]
    spec = arch_for_device(
        DeviceInfo(id=0, **{k: v for k, v in dev.items() if k in DeviceInfo.__dataclass_fields__})
    )
    assert dev["reserved_shared_memory_per_block_bytes"] == spec.reserved_smem_per_block_bytes
    assert dev["max_blocks_per_sm"] == spec.max_blocks_per_sm
    assert len(rows) >= 1000
    wrong = []
    for row in rows:
        r = compute_occupancy(
            spec, row["block_size"], row["registers_per_thread"], row["static_smem"], row["dynamic_smem"],
            max_dynamic_smem=row["max_dynamic_smem"],
            carveout_pct=None if row["carveout_pct"] < 0 else row["carveout_pct"],
            barriers_per_block=1 if row["barriers"] is None else row["barriers"],
        )  # fmt: skip
        driver = 0 if row["driver_blocks"] is None else row["driver_blocks"]  # a refused query cannot launch
        if r.active_blocks_per_sm != driver:
            wrong.append((row, r.active_blocks_per_sm))
    assert not wrong, f"{len(wrong)}/{len(rows)} rows differ, e.g. {wrong[:3]}"


# The kernels table ------------------------------------------------------------------------------------------------


def _kernels_from_ncu() -> dict[str, np.ndarray]:
    rows = _ncu_rows()
    k = empty_table("kernels", len(rows) + 3)
    for i, row in enumerate(rows):
        k["block_x"][i], k["block_y"][i], k["block_z"][i] = int(row["launch__block_size"]), 1, 1
        k["registers_per_thread"][i] = int(row["launch__registers_per_thread"])
        # Kineto's "shared memory" is static + dynamic together.
        k["shared_memory_bytes"][i] = int(row["launch__shared_mem_per_block_static"]) + int(
            row["launch__shared_mem_per_block_dynamic"]
        )
    n = len(rows)
    k["block_x"][n : n + 3], k["block_y"][n : n + 3], k["block_z"][n : n + 3] = [32, 32, -1], 4, 1
    k["registers_per_thread"][n : n + 3] = [-1, 40, 40]  # unknown registers, then unknown block size
    k["shared_memory_bytes"][n : n + 3] = [0, -1, 0]
    return k


def test_kernel_occupancy_equals_the_scalar_calculator_and_ncu():
    k = _kernels_from_ncu()
    out = kernel_occupancy(k, H200)
    assert (
        out["theoretical_occupancy_pct"].dtype == np.float32 and out["active_blocks_per_sm"].dtype == np.int32
    )
    rows = _ncu_rows()
    for i, row in enumerate(rows):
        threads = int(k["block_x"][i]) * int(k["block_y"][i]) * int(k["block_z"][i])
        r = compute_occupancy(
            "9.0", threads, int(k["registers_per_thread"][i]), 0, int(k["shared_memory_bytes"][i])
        )
        assert out["active_blocks_per_sm"][i] == r.active_blocks_per_sm
        assert out["limiter"][i] == "+".join(r.limiters)
        assert out["theoretical_occupancy_pct"][i] == pytest.approx(
            float(row["sm__maximum_warps_per_active_cycle_pct"])
        )
    n = len(rows)
    assert np.isnan(out["theoretical_occupancy_pct"][n : n + 3]).all()
    assert list(out["active_blocks_per_sm"][n : n + 3]) == [-1, -1, -1]
    assert list(out["limiter"][n : n + 3]) == ["", "", ""]
    assert out["limiter"][0] == "warps+registers"  # 192 threads, 32 registers: 10 blocks either way


def test_kernel_occupancy_uses_the_device_properties():
    k = _kernels_from_ncu()
    half = DeviceInfo(id=0, compute_major=9, compute_minor=0, max_threads_per_sm=1024)
    full, halved = kernel_occupancy(k, H200), kernel_occupancy(k, half)
    i = 0  # 192 threads: 10 blocks of 6 warps on 64 warp slots, 5 on 32
    assert (full["active_blocks_per_sm"][i], halved["active_blocks_per_sm"][i]) == (10, 5)
    assert halved["theoretical_occupancy_pct"][i] == pytest.approx(93.75)


@pytest.mark.parametrize("device", [DeviceInfo(id=0), DeviceInfo(id=0, compute_major=10, compute_minor=0)])
def test_kernel_occupancy_unknown_device_is_all_unknown(device):
    out = kernel_occupancy(_kernels_from_ncu(), device)
    assert np.isnan(out["theoretical_occupancy_pct"]).all() and set(out["limiter"]) == {""}


def test_kernel_occupancy_of_100k_kernels_evaluates_each_launch_shape_once(monkeypatch):
    """100k kernels cost one evaluation per distinct (threads, registers, shared memory), not one per row (the
    time it takes is a benchmark's business, not a test's)."""
    import dnnprof.analysis.occupancy as occ

    rng = np.random.default_rng(0)
    n = 100_000
    k = empty_table("kernels", n)
    k["block_x"][:] = rng.choice([64, 128, 256, 384, 512, 1024], n)
    k["block_y"][:], k["block_z"][:] = 1, 1
    k["registers_per_thread"][:] = rng.choice([16, 32, 40, 56, 96, 128, 168, 255], n)
    k["shared_memory_bytes"][:] = rng.choice([0, 16, 2048, 8448, 49152, 221420], n)
    calls = []
    monkeypatch.setattr(occ, "compute_occupancy", lambda *a: calls.append(a[1:]) or compute_occupancy(*a))
    out = kernel_occupancy(k, H200)
    shapes = {(int(b), int(r), int(s)) for b, r, s in zip(k["block_x"], k["registers_per_thread"],
                                                           k["shared_memory_bytes"], strict=True)}
    assert len(calls) == len(set(calls)) == len(shapes) == 6 * 8 * 6
    assert not np.isnan(out["theoretical_occupancy_pct"]).any()


def test_kernel_occupancy_is_the_same_evaluated_in_slices_of_rows(monkeypatch):
    """A big trace's kernels are evaluated a slice of rows at a time: the answer is every row's own, whatever the
    slices, and each distinct launch shape is evaluated once."""
    import dnnprof.analysis.occupancy as occ

    rng = np.random.default_rng(1)
    n = 1_000
    k = empty_table("kernels", n)
    k["block_x"][:] = rng.choice([-1, 0, 64, 192, 1024, 2048], n)
    k["block_y"][:], k["block_z"][:] = rng.choice([1, 2], n), 1
    k["registers_per_thread"][:] = rng.choice([-1, 16, 32, 255], n)
    k["shared_memory_bytes"][:] = rng.choice([-1, 0, 49152, 300000], n)
    whole = kernel_occupancy(k, H200)
    calls = []
    monkeypatch.setattr(occ, "compute_occupancy", lambda *a: calls.append(a[1:]) or compute_occupancy(*a))
    monkeypatch.setattr(occ, "_CHUNK_ROWS", 7)
    sliced = kernel_occupancy(k, H200)
    for name, col in whole.items():
        np.testing.assert_array_equal(sliced[name], col, err_msg=name)
    assert len(calls) == len(set(calls)) > 10
    assert np.isnan(whole["theoretical_occupancy_pct"]).any() and not np.isnan(whole["theoretical_occupancy_pct"]).all()


# CLI ------------------------------------------------------------------------------------------------------------------


def _cli(args: list[str]) -> None:
    app = typer.Typer()
    occupancy_cli.register(app)
    app.callback()(lambda: None)
    app(args=["occupancy", *args], standalone_mode=False)


def test_cli_json(capsys):
    _cli(["--cc", "9.0", "--block-size", "256", "--registers", "64", "--dynamic-smem", "40000", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert (d["active_blocks_per_sm"], d["occupancy_pct"], d["limiters"]) == (4, 50.0, ["registers"])
    assert d["limits"] == {"warps": 8, "registers": 4, "shared_memory": 5, "blocks": 32, "barriers": 32}


def test_cli_table(capsys):
    _cli(["--cc", "8.6", "--block-size", "1025", "--registers", "32"])
    out = capsys.readouterr().out
    assert "Theoretical occupancy" in out and "0.00 %" in out and "Cannot launch" in out


def test_cli_batch(tmp_path, capsys):
    f = tmp_path / "cfg.jsonl"
    f.write_text(
        '{"cc": "9.0", "block_size": 128, "registers_per_thread": 0, "static_smem": 0, "dynamic_smem": 49152}\n\n'
        '{"cc": 9.0, "block_size": 1, "registers_per_thread": 18, "static_smem": 0, "dynamic_smem": 0,'
        ' "smem_config_bytes": 32768, "carveout_pct": null, "max_dynamic_smem": null}\n'
    )
    _cli(["--batch", str(f)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(x) for x in lines)
    assert (first["active_blocks_per_sm"], first["occupancy_pct"], first["limiters"]) == (
        4,
        25.0,
        ["shared_memory"],
    )
    assert second["limits"]["shared_memory"] == 32 and second["occupancy_pct"] == 50.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"cc": "9.0", "block_size": 128, "registers_per_thread": 32}\n{"cc": "9.0", "block_size"\n',
            ":2: not valid JSON",
        ),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"cc": "9.0", "block_size": 128}\n', ":1: missing key(s) registers_per_thread"),
        (
            '{"cc": "9.0", "block_size": 128, "registers_per_thread": 32, "regs": 1}\n',
            ":1: unknown key(s) regs",
        ),
        ('{}\n{"cc": "10.0", "block_size": 128, "registers_per_thread": 32}\n', ":1: missing key(s) cc"),
        (
            '{"cc": "10.0", "block_size": 128, "registers_per_thread": 32}\n',
            ":1: compute capability 10.0: constants",
        ),
        ('{"cc": "9.0", "block_size": -1, "registers_per_thread": 32}\n', ":1: block_size: must be >= 1"),
    ],
)
def test_cli_batch_bad_line_names_the_line(tmp_path, capsys, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(UserError) as e:
        _cli(["--batch", str(f)])
    assert str(e.value).startswith(str(f)) and message in str(e.value)
    assert capsys.readouterr().out == ""  # nothing printed before the error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cc", "9.0", "--block-size", "128"], "missing --registers"),
        ([], "missing --cc, --block-size, --registers"),
        (
            ["--cc", "7.2", "--block-size", "128", "--registers", "8"],
            "compute capability 7.2: constants not known",
        ),
        (["--cc", "9.0", "--block-size", "128", "--registers", "8", "--carveout", "150"], "carveout_pct"),
        (["--batch", "does/not/exist.jsonl"], "does/not/exist.jsonl: cannot read"),
    ],
)
def test_cli_errors(args, message):
    with pytest.raises(UserError, match=message):
        _cli(args)


@pytest.mark.parametrize("change", [{"warp_size": 2**31}, {"warp_size": 16}, {"max_threads_per_sm": 8}])
def test_device_capacities_no_nvidia_sm_has_give_no_occupancy(change: dict[str, int]) -> None:
    """A trace's deviceProperties are the trace writer's word: a warp of 2**31 threads, or fewer threads per SM than
    one warp, is no SM the calculator knows, so it gives no number (before: a division by zero)."""
    import dataclasses

    dev = dataclasses.replace(H200, **change)
    with pytest.raises(OccupancyInputError, match="no NVIDIA SM"):
        arch_for_device(dev)
    k = empty_table("kernels", 1)
    for a in "xyz":
        k[f"block_{a}"][:] = 128 if a == "x" else 1
    k["registers_per_thread"][:] = 32
    out = kernel_occupancy(k, dev)
    assert np.isnan(out["theoretical_occupancy_pct"]).all() and (out["active_blocks_per_sm"] == -1).all()
