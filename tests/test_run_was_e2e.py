"""What a run was, said once and consistently (issue 26): copies of one training, processes that never formed a
group, a diverged DDP run, gradients all-reduced by hand, and a script that pickles its whole model.

tests/observe_scripts/run_was.py reproduces each published pattern in a few lines (its docstring names them); one
launch of every run, read back by several tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import codes, compare_json, compare_text, launch

pytestmark = pytest.mark.e2e

ARGS = '"--steps", "{total_steps}", "--batch-size", "{per_device_batch_size}", "--lr", "{lr}"'
RUNS = (  # name, mode, processes, extra
    ("hand", "hand", 2, ""),
    ("copies", "copies", 2, ""),
    ("no-group-2", "no-group", 2, ""),
    ("no-group-4", "no-group", 4, ""),
    ("diverged", "ddp", 2, "lr = 1e30"),
    ("save-1", "save", 1, ""),
    ("save-2", "save", 2, ""),
    ("save-2-bare", "save", 2, "observe = false"),
)
EXPERIMENTS = (
    f"""
[defaults]
script = "{SCRIPTS / "run_was.py"}"
per_device_batch_size = 8
lr = 0.05
max_steps = 6
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}
"""
    + "".join(
        f"""
[[experiments]]
name = "{name}"
nproc_per_node = {processes}
args = ["--mode", "{mode}", {ARGS}, "--save", "{{run_dir}}/model.pt"]
{extra}
"""
        for name, mode, processes, extra in RUNS
    ).replace("[[experiments]]", "[baseline]", 1)
    + f"""
[[experiments]]
name = "trainer-no-use-cpu"
script = "{SCRIPTS / "hf_train.py"}"
nproc_per_node = 2
args = ["--no-use-cpu", "--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}", "--lr", "{{lr}}"]
env = {{ OMP_NUM_THREADS = "1", TOKENIZERS_PARALLELISM = "false", HF_HUB_OFFLINE = "1" }}
"""
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, EXPERIMENTS).runs()


def _finding(record: dict[str, Any], code: str) -> dict[str, Any]:
    return next(found for found in record["findings"] if found["code"] == code)


def _messages(record: dict[str, Any]) -> str:
    return " | ".join(found["message"] for found in record["findings"])


# -- 1: equal parameters are not averaging ----------------------------------------------------------------------


def test_equal_ranks_with_nothing_averaging_them_are_copies_of_one_training(runs: dict[str, dict[str, Any]]) -> None:
    record = runs["copies"]["record"]
    observed = record["observed"]
    assert (observed["processes"], observed["data_parallel_size"], observed["global_batch_size"]) == (2, 1, 8)
    assert observed["samples_seen"] == 6 * 8  # one model's samples, not 12 x 8
    assert [row["samples"] for row in runs["copies"]["metrics"].rows] == [8, 16, 24, 32, 40, 48]
    finding = _finding(record, "copies_of_one_training")
    assert finding["severity"] == "error"
    assert "2 copies of one training" in finding["message"] and "same seed" in finding["message"]
    assert "same batches" in finding["message"] and "ddpcli port" in finding["message"]
    assert "same_samples_across_ranks" not in codes(record)  # no global batch of 2 copies: no global batch at all
    assert f"ddpcli port {SCRIPTS / 'run_was.py'}" in finding["message"]
    assert "global batch 16" not in _messages(record) and "global batch of 16" not in _messages(record)


def test_the_trainer_without_use_cpu_is_copies_and_is_told_the_switch(runs: dict[str, dict[str, Any]]) -> None:
    """transformers' Trainer on CPU without --use_cpu never wraps the model (the published run_clm.py pattern)."""
    record = runs["trainer-no-use-cpu"]["record"]
    observed = record["observed"]
    assert (observed["processes"], observed["data_parallel_size"], observed["global_batch_size"]) == (2, 1, 8)
    assert observed["samples_seen"] == 6 * 8
    finding = _finding(record, "copies_of_one_training")
    assert "--use_cpu" in finding["message"] and "GPT2LMHeadModel trained unwrapped" in finding["message"]


def test_gradients_all_reduced_by_hand_are_data_parallel(runs: dict[str, dict[str, Any]]) -> None:
    record = runs["hand"]["record"]
    observed = record["observed"]
    assert record["status"] == "completed"
    assert (observed["processes"], observed["data_parallel_size"], observed["global_batch_size"]) == (2, 2, 16)
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == []


# -- 2: one account of the processes -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "processes"), [("no-group-2", 2), ("no-group-4", 4)])
def test_processes_without_a_group_are_counted_as_launched(
    runs: dict[str, dict[str, Any]], name: str, processes: int
) -> None:
    record = runs[name]["record"]
    observed = record["observed"]
    assert (observed["processes"], observed["data_parallel_size"], observed["global_batch_size"]) == (processes, 1, 8)
    # It ran the processes the plan said; the global batch it did not (the plan's, said as the plan's).
    assert [found["field"] for found in record["findings"] if found["code"] == "plan_mismatch"] == ["global_batch_size"]
    # Separate trainings have no global batch to copy; that nothing split the data is said as such (issue 34).
    same = _finding(record, "same_samples_across_ranks")["message"]
    assert f"{processes} trainings over the same samples, not {processes} shares of the data" in same
    assert "global batch" not in same
    finding = _finding(record, "no_process_group")
    assert f"{processes} separate trainings" in finding["message"] and "ddpcli port" in finding["message"]
    text = _messages(record)
    assert "1 ranks" not in text and "1 copies" not in text and "processes 1" not in text
    assert f"global batch {processes * 8}" not in text and f"global batch of {processes * 8}" not in text


def test_compare_shows_processes_as_launched_and_no_speedup_for_separate_trainings(
    runs: dict[str, dict[str, Any]],
) -> None:
    rows = {row["name"]: row for row in compare_json(Path(runs["hand"]["dir"]).parent.parent)}
    assert [rows[name]["world_size"] for name in ("hand", "copies", "no-group-2", "no-group-4")] == [2, 2, 2, 4]
    for name in ("copies", "no-group-2", "no-group-4"):
        assert rows[name]["speedup"] is None and rows[name]["scaling_efficiency"] is None, name
        assert rows[name]["global_batch_size"] == 8


# -- 3: a diverged run keeps everything --------------------------------------------------------------------------


def test_a_diverged_ddp_run_keeps_its_steps_and_says_where_the_loss_stopped_being_finite(
    runs: dict[str, dict[str, Any]],
) -> None:
    record = runs["diverged"]["record"]
    observed = record["observed"]
    assert (observed["data_parallel_size"], observed["global_batch_size"], observed["samples_seen"]) == (2, 16, 96)
    assert "ranks_not_synchronized" not in codes(record)  # both ranks hold the same NaNs: they averaged
    rows = runs["diverged"]["metrics"].rows
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert [row["samples"] for row in rows] == [16, 32, 48, 64, 80, 96]
    losses = [row["loss"] for row in rows]
    assert isinstance(losses[0], float) and "nan" in losses
    first = next(index for index, loss in enumerate(losses, start=1) if not isinstance(loss, float))
    finding = _finding(record, "loss_not_finite")
    assert finding["severity"] == "error"
    assert f"at optimizer step {first}," in finding["message"] and "diverged" in finding["message"]


# -- 5: measured or null ------------------------------------------------------------------------------------------


def test_collectives_the_script_calls_are_timed_as_communication(runs: dict[str, dict[str, Any]]) -> None:
    breakdown = runs["hand"]["record"]["observed"]["time_breakdown"]
    assert breakdown["comm_from"] == "script_collectives"
    assert all(rank["comm_s"] > 0 for rank in breakdown["ranks"])
    separate = runs["no-group-2"]["record"]["observed"]["time_breakdown"]
    assert separate["comm_from"] == "no_collectives" and separate["median"]["comm_s"] == 0.0


# -- 6: the observer leaves the user's objects as they were -------------------------------------------------------


@pytest.mark.parametrize("name", ["save-1", "save-2"])
def test_a_whole_model_pickles_under_observation_as_it_does_bare(runs: dict[str, dict[str, Any]], name: str) -> None:
    import torch

    run, bare = runs[name], runs["save-2-bare"]
    assert run["record"]["status"] == "completed", run["record"]["failed_ranks"]
    mine = torch.load(run["dir"] / "model.pt", weights_only=False)
    theirs = torch.load(bare["dir"] / "model.pt", weights_only=False)
    assert type(mine) is type(theirs)
    for module in mine.modules():  # nothing of the observer travelled with it
        assert not module._forward_hooks and not module._forward_pre_hooks
        assert type(module._forward_hooks) is type(theirs._forward_hooks)
    assert mine.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values(), strict=True))
    copied = torch.load(run["dir"] / "model.pt.state", weights_only=True)
    assert all(torch.equal(copied[key], value) for key, value in mine.state_dict().items())


# -- 4: sharded runs measured as sharded --------------------------------------------------------------------------

SHARDED = f"""
[defaults]
script = "{SCRIPTS / "fsdp_train.py"}"
lr = 0.1
max_steps = 4
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "fsdp2-1x16"
per_device_batch_size = 16
args = ["--api", "fsdp2", "--global-data", "--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}"]

[[experiments]]
name = "fsdp2-2x8"
nproc_per_node = 2
per_device_batch_size = 8
args = ["--api", "fsdp2", "--global-data", "--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}"]
"""
FULL_BYTES = (4 * 16 + 16 + 16 * 1 + 1) * 4  # nn.Linear(4, 16), nn.Linear(16, 1) in float32


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, SHARDED).runs()


def test_a_sharded_run_records_its_shard_beside_the_full_size(sharded: dict[str, dict[str, Any]]) -> None:
    observed = sharded["fsdp2-2x8"]["record"]["observed"]
    state = observed["model_state"]
    assert state["full_param_bytes"] == FULL_BYTES
    assert 0 < state["param_bytes"] < FULL_BYTES and state["grad_bytes"] == state["param_bytes"]
    breakdown = observed["time_breakdown"]
    assert breakdown["median"]["comm_s"] is None and breakdown["comm_from"].startswith("not_measured: the sharding")


def test_a_sharded_runs_parameters_load_and_compare_as_shards(sharded: dict[str, dict[str, Any]]) -> None:
    import json

    import torch

    run_dir = sharded["fsdp2-2x8"]["dir"]
    saved = torch.load(run_dir / "final_params.pt", weights_only=True)  # plain tensors, not DTensors
    shards = json.loads((run_dir / "final_params.shards.json").read_text())["shards"]
    assert {key: list(value.shape) for key, value in saved.items()} == {
        key: shard["local_shape"] for key, shard in shards.items()
    }
    rows = {row["name"]: row for row in compare_json(run_dir.parent.parent)}
    row = rows["fsdp2-2x8"]
    assert row["equivalent_to"] == "fsdp2-1x16" and row["verdict"] == "equivalent", row
    assert 0 <= row["max_param_diff"] < 1e-6
    assert (run_dir / "final_params.rank-1.pt").is_file()  # rank 1's shard, for compare to gather the full tensors
    gathered = "equivalent against fsdp2-1x16 over every parameter, gathered from the 2 ranks' shards"
    assert gathered in compare_text(run_dir)
