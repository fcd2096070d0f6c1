"""Collectives matched across ranks: torch.distributed's description of each collective kept at ingest (the
``collectives`` table), each instance's arrivals and waits from every rank, serially and over worker processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dnnprof.ingest.kineto import read_kineto

DATA = Path(__file__).parent / "data"
RUNS = DATA / "ddp_runs_h100"
FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign"


def _foreign(name: str) -> Path:
    path = FOREIGN / name
    if not path.exists():
        pytest.skip(f"{path}: the shared folder of foreign traces is not here")
    return path


def _rows(path: Path) -> list[dict[str, object]]:
    p = read_kineto(path)
    c = p.tables["collectives"]
    out = []
    for i in range(c["rank"].size):
        row = {k: (p.name(int(v[i])) if k.endswith("_id") and v[i] >= 0 else v[i].item()) for k, v in c.items()}
        row["kernel"] = p.name(int(p.tables["kernels"]["name_id"][c["kernel_row"][i]])) if c["kernel_row"][i] >= 0 \
            else None
        out.append(row)
    return out


def test_nccl_kernels_keep_group_size_and_bytes() -> None:
    trace = next((RUNS / "forward" / "rank1" / "trace").glob("attribution*.json.gz"))
    rows = _rows(trace)
    assert {r["name_id"] for r in rows} == {"allreduce"}
    kernels = [r for r in rows if r["kernel_row"] >= 0]
    ops = [r for r in rows if r["op_row"] >= 0]  # record_param_comms, where the host enqueued each
    assert len(kernels) == len(ops) == 28 and len(rows) == 56
    assert all(str(r["kernel"]).startswith("ncclDevKernel_AllReduce") and r["op_row"] == -1 for r in kernels)
    assert {(r["pg_name_id"], r["pg_desc_id"], r["pg_ranks_id"], r["group_size"]) for r in rows} == {
        ("0", "default_pg", "[0, 1]", 2)}
    first = rows[0]
    assert (first["dtype_id"], first["in_nelems"], first["in_bytes"]) == ("Float", 38_597_376, 4 * 38_597_376)
    assert all(r["seq"] == -1 for r in rows)  # torch 2.11 records no sequence number
    assert kernels == sorted(kernels, key=lambda r: r["kernel_row"]) and ops == sorted(ops, key=lambda r: r["op_row"])


def test_an_older_torch_trace_keeps_broadcasts_and_all_reduces() -> None:
    rows = _rows(_foreign("hta__nccl_data.json.gz"))
    kernels = [r["name_id"] for r in rows if r["kernel_row"] >= 0]
    assert (kernels.count("broadcast"), kernels.count("allreduce"), len(rows)) == (6, 15, 48)
    b = next(r for r in rows if r["name_id"] == "broadcast" and r["kernel_row"] >= 0)
    assert str(b["kernel"]).startswith("ncclKernel_Broadcast") and b["in_bytes"] == 4 * b["in_nelems"]


def test_traces_without_collective_args_have_no_rows() -> None:
    assert _rows(_foreign("hta__trace_filter_2ranks") / "sampled_rank-0.json.gz") == []
    assert _rows(_foreign("hta__cpu_only_rank34.json.gz")) == []


def test_rows_do_not_depend_on_how_the_trace_was_chunked() -> None:
    from dnnprof.ingest.kineto import _read_profile

    trace = next((RUNS / "forward" / "rank1" / "trace").glob("attribution*.json.gz"))
    whole = read_kineto(trace).tables["collectives"]
    small = _read_profile(trace, None, chunk_bytes=1 << 16).tables["collectives"]
    for k in whole:
        assert np.array_equal(whole[k], small[k]), k


def _summary(folder: Path, rank: int = 0) -> dict[str, object]:
    from dnnprof.runs.report import report_path

    return report_path(folder, rank)[1]


@pytest.mark.parametrize("planted", ["forward", "data"])
def test_the_slowed_rank_arrives_last_at_every_all_reduce(planted: str) -> None:
    c = _summary(RUNS / planted)["collectives"]
    assert (c["matched_by"], c["instances"], c["unmatched"]) == ("group_name_and_order", 56, 0)
    top = c["top_by_wait"][0]
    assert (top["name"], top["pg_name"], top["last_rank"]) == ("allreduce", "0", 1)
    # the buckets' sizes from the attribution window's args: 25 MiB buckets (fp32 grads) and the 147 MiB embedding's
    assert top["size_bytes"] in (28_351_488, 28_537_156, 154_404_864, 154_389_504)
    assert 25_000 < top["wait_us"] < 50_000 and top["wait_us_by_rank"] == {"0": top["wait_us"], "1": 0.0}
    assert top["arrival_offset_us"]["1"] == top["wait_us"]
    # once both ranks are there, a 27 MiB all-reduce over NVLink takes ~0.13 ms, the 147 MiB one ~0.6 ms
    assert all(0 < x["transfer_us"] < 1_000 for x in c["top_by_wait"])
    # measured from when the last rank was ready, not from kernel starts queued behind the first bucket (~650 µs)
    assert all(x["transfer_us"] < 300 for x in c["top_by_wait"] if x["size_bytes"] < 30_000_000)
    kinds = c["by_collective"]
    assert all(k["last_rank_counts"] == {"1": k["count"]} for k in kinds)
    assert sum(k["count"] for k in kinds) == 56


def test_older_traces_without_args_match_by_kernel_name() -> None:
    c = _summary(_foreign("hta__trace_filter_2ranks"))["collectives"]
    assert c["instances"] == 10 and c["unmatched"] == 0
    assert {k["name"] for k in c["by_collective"]} == {"sendrecv"} and c["top_by_wait"][0]["size_bytes"] == -1


def test_gloo_spans_are_named_from_their_host_span() -> None:
    from dnnprof.analysis.collectives import name_of_span

    assert name_of_span("gloo:all_reduce") == "allreduce" == name_of_span(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert name_of_span("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)") == "broadcast"


def test_one_rank_has_no_collectives_key() -> None:
    assert "collectives" not in _summary(DATA / "ddp_h100" / "straggler" / "rank0.json.gz")


def test_the_table_and_the_critical_path_take_the_same_arrivals() -> None:
    from dnnprof.analysis.collectives import rank_collectives
    from dnnprof.analysis.critical_path import rank_part
    from dnnprof.ingest.detect import open_profile

    p = open_profile(RUNS / "forward")
    for rank in (0, 1):
        table, part = rank_collectives(p, rank), rank_part(p, rank)
        assert table["arrival_ns"] == part["collectives"]["arrival_ns"]
        assert table["step"] == part["collectives"]["step"]
