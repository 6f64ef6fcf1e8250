"""The cost model of `ddpcli plan --predict-from` (ddpcli.prediction.predict) on hand-made baselines, and the
command on a run directory written here (--link-gbps: no probe)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.prediction.predict import (
    ddp_bucket_sizes,
    expected_max,
    predict,
    ring_allreduce_s,
    static_bytes,
)
from ddpcli.rundir.record import RunRecord
from tests.builders import PARAMS, baseline, target, write_baseline
from tests.conftest import write_toml


def test_the_baseline_predicts_itself() -> None:
    found = predict(baseline(), target(world=1, threads=None), 0.0, "none")
    assert found.step_time_s == pytest.approx(0.05)
    assert found.samples_per_s == pytest.approx(64 / 0.05)
    assert found.speedup == pytest.approx(1.0) and found.scaling_efficiency == pytest.approx(1.0)


def test_static_memory_is_the_exact_byte_count_and_buckets_copy_the_gradients() -> None:
    one = predict(baseline(), target(world=1, threads=None), 0.0, "none")
    two = predict(baseline(), target(world=2, batch=32), 0.001, "test")
    assert static_bytes(one.memory) == static_bytes(two.memory) == 3 * PARAMS
    assert one.memory["ddp_buckets"] == 0 and two.memory["ddp_buckets"] == PARAMS
    assert one.memory["activations"] == 64 * 2**20 and two.memory["activations"] == 32 * 2**20  # scaled by batch
    assert one.memory["runtime"] == 300 * 2**20 - PARAMS
    assert one.memory_bytes == sum(one.memory.values())


def test_terms_scale_with_the_per_device_samples_and_the_all_reduce_is_added() -> None:
    found = predict(baseline(), target(world=2, batch=32, accumulation=2), 0.010, "test")
    assert found.terms["compute_s"] == pytest.approx(0.04)  # 64 samples a step per device, as the baseline
    assert found.terms["comm_s"] == pytest.approx(0.010)  # one all-reduce (no_sync assumed: no DDP baseline)
    assert found.samples_per_s == pytest.approx(128 / 0.06)
    assert found.speedup == pytest.approx((128 / 0.06) / (64 / 0.05))
    assert found.scaling_efficiency == pytest.approx(found.speedup / 2)


def test_a_baseline_that_synced_every_micro_batch_predicts_an_all_reduce_per_micro_batch() -> None:
    synced = replace(baseline(), all_reduces_per_micro_batch=1.0)
    assert predict(synced, target(world=2, accumulation=4), 0.01, "t").all_reduces_per_step == 4
    with_no_sync = replace(baseline(), all_reduces_per_micro_batch=0.5)  # 2 micro-batches, 1 all-reduce
    assert predict(with_no_sync, target(world=2, accumulation=4), 0.01, "t").all_reduces_per_step == 2


def test_cpu_contention() -> None:
    """4 one-thread processes on 2 cores each get half a core: host work takes twice as long. A baseline that got
    less than its threads could use shared the cores with other work, which the planned processes share too."""
    alone = replace(baseline(), cpu_share=1.0)
    assert predict(alone, target(world=4), 0.0, "t").terms["compute_s"] == pytest.approx(0.08)
    assert predict(alone, target(world=2), 0.0, "t").terms["compute_s"] == pytest.approx(0.04)
    assert any("oversubscribed" in text for text in predict(alone, target(world=4), 0.0, "t").assumptions)
    shared = replace(baseline(), cpu_share=0.5)  # 1 thread got half a core of 2: 3 other runnable threads
    assert predict(shared, target(world=1, threads=None), 0.0, "t").terms["compute_s"] == pytest.approx(0.04)
    assert predict(shared, target(world=2), 0.0, "t").terms["compute_s"] == pytest.approx(0.04 * 0.5 / 0.4)
    two_threads = replace(baseline(), cpu_share=2.0, threads=2)  # 2 threads, both busy: alone on the 2 cores
    assert predict(two_threads, target(world=2), 0.0, "t").terms["compute_s"] == pytest.approx(0.08)
    # measured now: 1 core of other work. One process still has a core to itself, two share with it: 2/3 each
    full = replace(baseline(), cpu_share=1.0)
    assert predict(full, target(world=1, threads=None), 0.0, "t", busy=1.0).speedup == pytest.approx(1.0)
    assert predict(full, target(world=2), 0.0, "t", busy=1.0).terms["compute_s"] == pytest.approx(0.04 * 1.5)
    gpu = replace(baseline(), device="cuda", cpu_share=0.1)
    assert predict(gpu, target(world=8), 0.0, "t").terms["compute_s"] == pytest.approx(0.04)


@given(st.integers(1, 10**10), st.integers(2, 1024), st.floats(0.1, 1000))
def test_ring_allreduce_and_buckets(size: int, world: int, gbps: float) -> None:
    seconds = ring_allreduce_s(size, world, gbps)
    assert seconds == pytest.approx(2 * (world - 1) / world * size * 8 / (gbps * 1e9))
    assert ring_allreduce_s(size, 1, gbps) == 0
    buckets = ddp_bucket_sizes(size)
    assert sum(buckets) == size and buckets[0] <= 2**20 and max(buckets) <= 25 * 2**20


def test_plan_predict_from_with_a_link_bandwidth(tmp_path: Path) -> None:
    write_baseline(tmp_path / "runs" / "base" / "r1")
    (tmp_path / "train.py").write_text("", encoding="utf-8")  # plan refuses a script that is not there
    path = write_toml(tmp_path, """
[defaults]
script = "train.py"
per_device_batch_size = 64
lr = 0.1
env = { OMP_NUM_THREADS = "1" }
[baseline]
name = "base"
[[experiments]]
name = "2x64"
nproc_per_node = 2
""")  # fmt: skip
    result = CliRunner().invoke(
        app, ["plan", str(path), "--json", "--predict-from", str(tmp_path / "runs" / "base" / "r1"), "--link-gbps", "8"]
    )
    assert result.exit_code == 0, result.output
    two = json.loads(result.stdout)["experiments"][0]
    comm = ring_allreduce_s(PARAMS, 2, 8)  # 1.19 ms
    assert two["predicted_step_time_s"] == pytest.approx(0.05 + comm)
    assert two["prediction"]["step_terms_s"]["comm_s"] == pytest.approx(comm)
    assert static_bytes(two["prediction"]["memory_terms_bytes"]) == 3 * PARAMS
    assert any(note.startswith("Predicted: ") for note in two["notes"])
    table = CliRunner().invoke(app, ["plan", str(path), "--predict-from", str(tmp_path / "runs" / "base" / "r1"),
                                     "--link-gbps", "8"])  # fmt: skip
    assert table.exit_code == 0 and "Predicted: " in table.stdout and "ring formula at 8 Gb/s" in table.stdout


def test_plan_predict_from_a_run_that_cannot_be_a_baseline_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    RunRecord(run_id="r", name="base", status="completed").write(run_dir / "run.json")
    result = CliRunner().invoke(app, ["plan", "--per-device-batch-size", "8", "--lr", "0.1", "--nproc-per-node", "2",
                                      "--predict-from", str(run_dir)])  # fmt: skip
    assert result.exit_code == 2
    assert "cannot predict from this run" in result.stderr and "Traceback" not in result.output


def test_ranks_wait_for_the_slowest_compute() -> None:
    """With per-step compute varying by 30%, 2 ranks wait 0.5642 x 30% of a step's compute on average, 4 ranks
    1.0294 x 30%; a baseline whose steps did not vary predicts no wait."""
    varying = replace(baseline(), compute_cv=0.3)
    two = predict(varying, target(world=2), 0.001, "t")
    assert two.terms["comm_s"] == pytest.approx(0.001 + 0.5642 * 0.3 * 0.04)
    four = predict(replace(varying, cpu_share=None), target(world=4, batch=32), 0.001, "t")
    assert four.terms["comm_s"] == pytest.approx(0.001 + 1.0294 * 0.3 * four.terms["compute_s"])
    assert predict(replace(baseline(), compute_cv=0.0), target(world=2), 0.001, "t").terms["comm_s"] == 0.001
    assert expected_max(1) == 0 and expected_max(64) == pytest.approx(2.3338, rel=0.01)  # tables: 2.3338


def test_a_sharded_run_is_no_baseline_for_a_ddp_prediction() -> None:
    """FSDP's ranks hold shards (model_state.full_param_bytes beside the shard's): the cost model's one all-reduce
    of the full gradients and full parameters per device would print DDP numbers for it."""
    from ddpcli.prediction.baseline import NoBaseline

    with pytest.raises(NoBaseline, match=r"sharded run .* predictions model DDP"):
        baseline(full_param_bytes=2 * PARAMS)
