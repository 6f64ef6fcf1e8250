"""init's own file, launched as written, on fixtures with the published scripts' patterns: the Trainer gets
`--use_cpu` and a gloo backend, Fabric its LT_* settings, and each trains as one DDP model over 2 processes
(data_parallel_size 2); build-nanogpt's token budget, the DDP tutorial's `bsz = 128 // size` and the quickstart
tutorial's module-level batch run with the batch and accumulation init planned (no plan_mismatch)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan
from ddpcli.jsonvalues import read_json
from tests.conftest import REPO

pytestmark = pytest.mark.e2e
runner = CliRunner()
SCRIPTS = REPO / "tests" / "init_scripts"
TRAINER_ARGS = ("--", "--max_steps", "2", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "True")


def init_and_launch(tmp_path: Path, name: str, run: str, *init_args: str) -> tuple[dict, dict]:
    """init SCRIPT at 2 processes, then `ddpcli launch --only RUN`: the planned run and its run.json."""
    shutil.copy(SCRIPTS / name, tmp_path / name)
    output = tmp_path / "experiments.toml"
    result = runner.invoke(app, ["init", str(tmp_path / name), "-o", str(output), "--nproc-per-node", "2", *init_args])
    assert result.exit_code == 0, result.stderr
    planned = {each.name: each.plan for each in load_plan(output).runs}
    command = [sys.executable, "-m", "ddpcli", "launch", "--only", run]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs" / run).iterdir()
    record = read_json(run_dir / "run.json")
    assert record["status"] == "completed"
    return planned[run].__dict__, record


NOT_DATA_PARALLEL = ("plan_mismatch", "no_process_group", "same_samples_across_ranks", "ranks_not_synchronized")


def mismatches(record: dict) -> list[str]:
    """Findings that say the run was not the data-parallel run planned (without --use_cpu the Trainer's ranks
    trained on the same samples; without LT_* Fabric ran 2 separate trainings: both seen before the fix)."""
    return [finding["message"] for finding in record["findings"] if finding["code"] in NOT_DATA_PARALLEL]


@pytest.mark.parametrize(
    ("name", "run", "init_args"),
    [("hf_trainer_clm.py", "2x4", TRAINER_ARGS), ("fabric_classifier.py", "2x32", ())],
)
def test_frameworks_train_one_ddp_model_over_the_processes_init_planned(
    tmp_path: Path, name: str, run: str, init_args: tuple[str, ...]
) -> None:
    plan, record = init_and_launch(tmp_path, name, run, *init_args)
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"]) == (2, 2)
    assert observed["per_device_batch_size"] == plan["per_device_batch_size"]
    assert mismatches(record) == []


@pytest.mark.parametrize(
    ("name", "run", "batch", "accum", "global_batch"),
    [
        ("gpt_tokens.py", "2x4-acc8", 4, 8, 64),  # 2048 tokens = 64 sequences of 32
        ("dist_tuto.py", "2x64", 64, 1, 128),
        ("quickstart_ddp.py", "2x64", 64, 1, 128),
    ],
)
def test_scripts_that_hard_code_or_derive_their_batch_run_as_planned(
    tmp_path: Path, name: str, run: str, batch: int, accum: int, global_batch: int
) -> None:
    plan, record = init_and_launch(tmp_path, name, run)
    assert (plan["per_device_batch_size"], plan["grad_accum_steps"], plan["global_batch_size"]) == (
        batch, accum, global_batch
    )  # fmt: skip
    observed = record["observed"]
    assert (observed["per_device_batch_size"], observed["grad_accum_steps"], observed["global_batch_size"]) == (
        batch, accum, global_batch
    )  # fmt: skip
    assert mismatches(record) == []
