"""Whether a 2-process run really was data-parallel, judged from the ranks' parameters (issue 15, item 1).

tests/observe_scripts/parallel_modes.py trains one small model four ways: wrapped in DDP, averaging its gradients by
hand, with a process group but no wrapper, and without any process group. Only the first two averaged gradients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import codes, compare_json, launch

pytestmark = pytest.mark.e2e

MODES = ("ddp", "allreduce", "unwrapped", "no-group")
EXPERIMENTS = f"""
[defaults]
script = "{SCRIPTS / "parallel_modes.py"}"
per_device_batch_size = 8
lr = 0.1
max_steps = 4
scaling = "none"
nproc_per_node = 2
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "ddp"
args = ["--mode", "ddp", "--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}"]
""" + "".join(
    f"""
[[experiments]]
name = "{mode}"
args = ["--mode", "{mode}", "--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}"]
"""
    for mode in MODES[1:]
)


@pytest.fixture(scope="module")
def modes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, EXPERIMENTS).runs()


@pytest.mark.parametrize("mode", ["ddp", "allreduce"])
def test_averaging_gradients_is_data_parallel_whatever_does_it(modes: dict[str, dict[str, Any]], mode: str) -> None:
    record = modes[mode]["record"]
    assert record["status"] == "completed"
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"], observed["global_batch_size"]) == (2, 2, 16)
    assert observed["samples_seen"] == 4 * 16
    assert [row["samples"] for row in modes[mode]["metrics"].rows] == [16, 32, 48, 64]
    assert observed["ddp"] is (mode == "ddp")
    # Nothing about parallelism; how fast a tiny model runs on a shared CPU is another matter (why-slow codes).
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == []


def test_ranks_that_never_averaged_gradients_are_separate_trainings(modes: dict[str, dict[str, Any]]) -> None:
    record = modes["unwrapped"]["record"]
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"], observed["global_batch_size"]) == (2, 1, 8)
    assert observed["samples_seen"] == 4 * 8  # rank 0's model saw rank 0's samples
    assert [row["samples"] for row in modes["unwrapped"]["metrics"].rows] == [8, 16, 24, 32]  # and so do its metrics
    finding = next(f for f in record["findings"] if f["code"] == "ranks_not_synchronized")
    assert finding["severity"] == "error"
    assert "never averaged gradients" in finding["message"] and "2 separate trainings" in finding["message"]
    assert "no DDP wrapper" in finding["message"] and "not 16" in finding["message"]
    assert "largest difference" in finding["message"]
    assert "no_process_group" not in codes(record)


def test_processes_without_a_process_group_get_no_process_group(modes: dict[str, dict[str, Any]]) -> None:
    record = modes["no-group"]["record"]
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"], observed["global_batch_size"]) == (1, 1, 8)
    assert observed["samples_seen"] == 4 * 8
    assert "no_process_group" in codes(record) and "ranks_not_synchronized" not in codes(record)
    finding = next(f for f in record["findings"] if f["code"] == "no_process_group")
    assert finding["severity"] == "error" and "2 separate trainings" in finding["message"]


def test_compare_never_shows_separate_trainings_with_a_joint_global_batch(modes: dict[str, dict[str, Any]]) -> None:
    root = Path(modes["ddp"]["dir"]).parent.parent
    rows = {row["name"]: row for row in compare_json(root)}
    assert rows["ddp"]["global_batch_size"] == rows["allreduce"]["global_batch_size"] == 16
    assert rows["unwrapped"]["global_batch_size"] == rows["no-group"]["global_batch_size"] == 8


SHARDED = f"""
[defaults]
script = "{SCRIPTS / "fsdp_train.py"}"
per_device_batch_size = 8
lr = 0.1
max_steps = 3
scaling = "none"
nproc_per_node = 2
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "fsdp1"
args = ["--api", "fsdp1", "--steps", "{{total_steps}}"]

[[experiments]]
name = "fsdp2"
args = ["--api", "fsdp2", "--steps", "{{total_steps}}"]
"""


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, SHARDED).runs()


@pytest.mark.parametrize(("name", "what"), [("fsdp1", "FullyShardedDataParallel"), ("fsdp2", "FSDPModule")])
def test_sharded_parameters_are_said_to_be_unchecked(sharded: dict[str, dict[str, Any]], name: str, what: str) -> None:
    record = sharded[name]["record"]
    assert record["status"] == "completed"
    assert (record["observed"]["data_parallel_size"], record["observed"]["global_batch_size"]) == (2, 16)
    [finding] = [found for found in record["findings"] if found["code"] not in SLOWNESS_CODES]
    assert (finding["code"], finding["severity"]) == ("data_parallel_unchecked", "info")
    assert f"({what})" in finding["message"] and "does not apply" in finding["message"]
