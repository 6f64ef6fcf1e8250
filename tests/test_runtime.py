"""ddpcli.runtime and the bundled example, checked by value.

The e2e tests read the regression sweep (tests/sweeps.py), launched once per session by `ddpcli launch` (real
torchrun jobs, gloo, CPU). The claim under test is the one the README makes: W processes x batch B end with the
same parameters as one process with batch W*B (float summation order aside), BatchNorm only with sync. Plain
`python -m` (the path without torchrun) and bare torchrun (no ddpcli launcher) each have a test of their own.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddpcli import runtime
from ddpcli.rundir.layout import METRICS_FILE, PARAMS_FILE
from ddpcli.worker.stream import _streams
from tests.conftest import max_abs_diff, merge_observations
from tests.helpers import read_runs
from tests.sweeps import REGRESSION_STEPS, regression_root

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
EQUAL = 1e-5  # float sums in another order: ~1e-7 expected


def _clean_env() -> dict[str, str]:
    """The test process's environment without anything that would make a child think it is a torchrun worker."""
    env = {key: value for key, value in os.environ.items() if key not in TORCHRUN_ENV}
    env.pop("DDPCLI_RUN", None)
    env.pop("DDPCLI_RUN_DIR", None)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@dataclass(frozen=True)
class Finished:
    plan: dict
    run_dir: Path
    rows: list[dict]
    params: dict[str, torch.Tensor]


class Runs:
    """The regression sweep's runs (tests/sweeps.py) as `ddpcli launch` recorded them, read once each."""

    def __init__(self, root: Path) -> None:
        self.recorded = read_runs(root)
        self.done: dict[str, Finished] = {}

    def get(self, name: str) -> Finished:
        if name not in self.done:
            run = self.recorded[name]
            assert run["record"]["status"] == "completed", run["record"]["failed_ranks"]
            assert run["metrics"].skipped == []
            params = torch.load(run["dir"] / PARAMS_FILE, weights_only=True)
            self.done[name] = Finished(run["record"]["plan"], run["dir"], run["metrics"].rows, params)
        return self.done[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(regression_root(tmp_path_factory))


# -- end to end ----------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_metrics_and_params_of_a_two_process_run(runs: Runs) -> None:
    finished = runs.get("2x16")
    rows, plan = finished.rows, finished.plan
    assert plan["world_size"] == 2 and plan["global_batch_size"] == 32 and plan["lr"] == pytest.approx(0.1)
    assert plan["warmup_steps"] == 8
    assert [row["step"] for row in rows] == list(range(1, REGRESSION_STEPS + 1))
    assert [row["samples"] for row in rows] == [32 * step for step in range(1, REGRESSION_STEPS + 1)]
    times = [row["time"] for row in rows]
    assert times == sorted(times) and times[0] > 0
    assert all(math.isfinite(row["loss"]) and row["loss"] > 0 for row in rows)
    assert [row["lr"] for row in rows[:8]] == pytest.approx([0.1 * step / 8 for step in range(1, 9)])
    assert rows[-1]["lr"] == pytest.approx(0.1)
    assert sum(row["loss"] for row in rows[-4:]) < 0.5 * sum(row["loss"] for row in rows[:4])  # it learns
    assert list(rows[0])[:5] == ["step", "samples", "time", "loss", "lr"]
    assert all(not key.startswith("module.") for key in finished.params)  # unwrapped from DDP
    assert all(tensor.device.type == "cpu" for tensor in finished.params.values())


@pytest.mark.e2e
@pytest.mark.parametrize(("ddp", "one_device"), [("2x16", "1x32"), ("2x8", "1x16"), ("2x4x2", "1x16")])
def test_data_parallel_ends_where_one_device_with_the_global_batch_ends(runs: Runs, ddp: str, one_device: str) -> None:
    left, right = runs.get(ddp), runs.get(one_device)
    assert left.plan["global_batch_size"] == right.plan["global_batch_size"]
    assert max_abs_diff(left.params, right.params) <= EQUAL
    assert [row["loss"] for row in left.rows] == pytest.approx([row["loss"] for row in right.rows], rel=1e-4)
    assert max_abs_diff(left.params, runs.get("2x16" if ddp != "2x16" else "2x8").params) > 1e-2  # not vacuous


@pytest.mark.e2e
def test_batchnorm_statistics_differ_per_process_unless_synchronised(runs: Runs) -> None:
    one_device = runs.get("1x32-bn")
    per_process = runs.get("2x16-bn")
    synchronised = runs.get("2x16-syncbn")
    assert "1.running_var" in one_device.params and "1.num_batches_tracked" in one_device.params
    assert max_abs_diff(per_process.params, one_device.params) > 1e-3
    assert max_abs_diff(synchronised.params, one_device.params) <= EQUAL


@pytest.mark.e2e
def test_a_failing_rank_leaves_its_traceback_in_error_json(tmp_path: Path) -> None:
    """runtime.main is torchrun's `record`: the failing rank's error.json holds the exception, no DDPCLI env."""
    logs = tmp_path / "logs"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--log-dir", str(logs), "--redirects", "3", str(SCRIPTS / "fail_on_last_rank.py")]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    # Rank 0 may write one too (its barrier fails when rank 1's connection closes); rank 1's holds the cause.
    error = json.loads(next(logs.rglob("attempt_0/1/error.json")).read_text())["message"]
    assert error["message"] == "RuntimeError: deliberate failure on rank 1"
    assert "fail_on_last_rank.py" in error["extraInfo"]["py_callstack"]
    # Without DDPCLI_RUN_DIR there is no metrics file: rank 0 printed the row, rank 1 did not.
    assert not list(tmp_path.rglob(METRICS_FILE))
    stdout_0 = next(logs.rglob("attempt_0/0/stdout.log")).read_text()
    stdout_1 = next(logs.rglob("attempt_0/1/stdout.log")).read_text()
    lines = stdout_0.splitlines()
    # Its own loss (0.0 on rank 0): ctx.log makes no collective, the mean over ranks is the launcher's merge.
    assert len(lines) == 1 and lines[0].startswith("step=1 time=") and lines[0].endswith(" loss=0"), stdout_0
    assert stdout_1 == ""


@pytest.mark.e2e
def test_example_runs_standalone_without_torchrun(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "ddpcli.examples.regression", "--steps", "5"]
    result = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [dict(field.split("=") for field in line.split()) for line in result.stdout.splitlines()]
    assert [int(row["step"]) for row in rows] == [1, 2, 3, 4, 5]
    assert [int(row["samples"]) for row in rows] == [16, 32, 48, 64, 80]
    assert all(math.isfinite(float(row["loss"])) for row in rows)
    assert list(tmp_path.iterdir()) == []  # no run directory: nothing written


# -- in process (world size 1) -------------------------------------------------------------------------------


@pytest.fixture
def local_ctx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[runtime.Context]:
    for key in (*TORCHRUN_ENV, "DDPCLI_RUN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DDPCLI_RUN_DIR", str(tmp_path))
    ctx = runtime.init(seed=3)
    yield ctx
    ctx.finish()


def test_init_without_torchrun_is_world_size_one_without_a_process_group(local_ctx: runtime.Context) -> None:
    assert (local_ctx.rank, local_ctx.world_size, local_ctx.local_rank, local_ctx.is_main) == (0, 1, 0, True)
    assert local_ctx.run is None and local_ctx.device == torch.device("cpu")
    assert not dist.is_initialized()
    model = local_ctx.wrap(nn.Linear(2, 1))
    assert isinstance(model, runtime.LocalModel) and isinstance(model.module, nn.Linear)
    with local_ctx.accumulate(model, 0, 2):
        model(torch.ones(1, 2)).sum().backward()
    assert local_ctx.sync_batchnorm(model) is model


def test_steps_group_micro_batches_within_epochs_and_reshuffle_each_epoch(local_ctx: runtime.Context) -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(10))
    loader = local_ctx.dataloader(dataset, batch_size=2)  # 5 micro-batches per epoch
    steps = list(loader.steps(7, accum_steps=2))
    assert [step for step, _ in steps] == list(range(1, 8))
    assert [len(micro) for _, micro in steps] == [2, 2, 1, 2, 2, 1, 2]  # plan: ceil(5 / 2) = 3 steps per epoch
    first_epoch = torch.cat([batch[0] for _, micro in steps[:3] for batch in micro])
    second_epoch = torch.cat([batch[0] for _, micro in steps[3:6] for batch in micro])
    assert sorted(first_epoch.tolist()) == sorted(second_epoch.tolist()) == list(range(10))
    assert first_epoch.tolist() != second_epoch.tolist()  # set_epoch was called
    assert loader.epoch == 3


def test_log_keeps_tensors_on_the_device_until_the_rows_are_flushed(
    local_ctx: runtime.Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ctx.log makes no collective and reads no tensor: rows wait in this rank's stream, merged after the run."""
    read = []
    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "tolist", lambda self: read.append(self) or [])
        patch.setattr(torch.Tensor, "item", lambda self: read.append(self) or 0.0)
        patch.setattr(dist, "all_reduce", lambda *args, **kwargs: read.append("all_reduce"))
        local_ctx.batch_size = 8
        first = local_ctx.log(1, loss=torch.tensor(0.5), lr=0.1, accuracy=torch.tensor(0.25))
        local_ctx.log(2, loss=torch.tensor(0.25), lr=0.1)
    assert read == [] and list(first) == ["step", "time", "samples", "loss", "lr", "accuracy"]
    local_ctx.finish()
    rows = merge_observations(tmp_path)
    steps = [(row["step"], row["samples"], row["loss"], row["lr"]) for row in rows]
    assert steps == [(1, 8, 0.5, 0.1), (2, 16, 0.25, 0.1)]
    assert rows[0]["accuracy"] == 0.25


def test_finish_without_an_observer_closes_the_observation_file(local_ctx: runtime.Context, tmp_path: Path) -> None:
    """No observer will write the end rows: finish closes the file it flushed (a script logging after finish
    opens it again), so nothing is left for the garbage collector to close with a ResourceWarning."""
    import gc
    import warnings

    local_ctx.batch_size = 4
    local_ctx.log(1, loss=torch.tensor(0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        local_ctx.finish()
        _streams.clear()  # the stream object goes away, as at interpreter exit
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    local_ctx.log(2, loss=torch.tensor(0.25))
    local_ctx.finish()
    assert [row["step"] for row in merge_observations(tmp_path)] == [1, 2]


def test_finish_saves_the_unwrapped_state_dict(local_ctx: runtime.Context, tmp_path: Path) -> None:
    model = local_ctx.wrap(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)))
    local_ctx.finish(model)
    saved = torch.load(tmp_path / PARAMS_FILE)
    assert list(saved) == list(model.module.state_dict())
    assert max_abs_diff(saved, model.module.state_dict()) == 0.0


@pytest.fixture
def one_process_group() -> Iterator[None]:
    """A real gloo group of one process, in this process: enough to run the cross-process BatchNorm."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("momentum", [0.1, None])
def test_cross_process_batchnorm_matches_batchnorm_in_one_process(one_process_group: None, momentum: float) -> None:
    torch.manual_seed(0)
    reference = nn.BatchNorm2d(3, momentum=momentum)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    converted = runtime.convert_batchnorm(nn.Sequential(_copy(reference)))[0]
    assert isinstance(converted, runtime.CrossProcessBatchNorm)
    for _ in range(3):
        x = torch.randn(5, 3, 4, 4) * 2 + 1
        x_ref, x_new = x.clone().requires_grad_(), x.clone().requires_grad_()
        (reference(x_ref) * x).sum().backward()
        (converted(x_new) * x).sum().backward()
        torch.testing.assert_close(x_new.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted.weight.grad, reference.weight.grad, atol=1e-5, rtol=1e-5)
    assert max_abs_diff(converted.state_dict(), reference.state_dict()) <= 1e-6
    converted.eval()
    reference.eval()
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(converted(x), reference(x))


def _copy(module: nn.Module) -> nn.Module:
    clone = type(module)(module.num_features, momentum=module.momentum)  # type: ignore[call-arg]
    clone.load_state_dict(module.state_dict())
    return clone


def test_runtime_imports_distributed_nn_functional_before_any_process_group(one_process_group: None) -> None:
    """Its functions default to `group=group.WORLD`, evaluated at import: imported after init (torch._dynamo does
    it), they would pin the default group so that destroy_process_group cannot free it (workers then aborted at
    exit, 1 run in 10). ddpcli.runtime imports it first, so the default stays None."""
    import torch.distributed.nn.functional as distributed_functional

    assert dist.is_initialized()
    assert distributed_functional.all_reduce.__defaults__[-1] is None  # type: ignore[index]
