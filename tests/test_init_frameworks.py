"""The switch that makes each framework data-parallel here, from script/frameworks.py's tables: the Trainer's
`--use_cpu True` and `--ddp_backend gloo` on a machine without CUDA; Lightning Fabric's LT_* settings (as
`fabric run` sets them), per run for LT_DEVICES, with LT_CLI_USED only where Fabric accepts it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.resolved import Plan
from tests.conftest import REPO

runner = CliRunner()
SCRIPTS = REPO / "tests" / "init_scripts"
FABRIC = (SCRIPTS / "fabric_classifier.py").read_text(encoding="utf-8")


def init(tmp_path: Path, name: str, text: str | None = None, *args: str) -> tuple[Plan, str]:
    if text is None:
        shutil.copy(SCRIPTS / name, tmp_path / name)
    else:
        (tmp_path / name).write_text(text, encoding="utf-8")
    output = tmp_path / "experiments.toml"
    result = runner.invoke(app, ["init", str(tmp_path / name), "-o", str(output), "--nproc-per-node", "2,4", *args])
    assert result.exit_code == 0, result.stderr
    return load_plan(output), output.read_text(encoding="utf-8")


def test_the_trainer_gets_use_cpu_and_a_gloo_backend_on_a_machine_without_cuda(tmp_path: Path) -> None:
    plan, text = init(tmp_path, "hf_trainer_clm.py")
    args = plan.baseline.launch.args
    assert args[args.index("--use_cpu") + 1] == "True" and args[args.index("--ddp_backend") + 1] == "gloo"
    assert "--use_cpu True set: no GPU on this machine: the Trainer's CPU switch" in text
    assert "--ddp_backend gloo set:" in text


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, str]:
    """init of the Fabric script as it is, once for the tests that read it (its --help imports lightning)."""
    return init(tmp_path_factory.mktemp("fabric"), "fabric_classifier.py")


def test_fabric_gets_the_settings_fabric_run_would_set_with_each_runs_device_count(fabric: tuple[Plan, str]) -> None:
    plan, text = fabric
    envs = {run.name: run.launch.env for run in plan.runs}
    common = {"LT_ACCELERATOR": "cpu", "LT_STRATEGY": "ddp", "LT_NUM_NODES": "1", "LT_CLI_USED": "1"}
    assert envs["1x64"] == {**common, "LT_DEVICES": "1"}
    assert envs["2x64"] == envs["2x32"] == {**common, "LT_DEVICES": "2"}
    assert envs["4x64"] == {**common, "LT_DEVICES": "4"} and "LT_CLI_USED=1 in env" in text


def test_fabric_that_sets_devices_itself_or_launches_gets_no_lt_cli_used(tmp_path: Path) -> None:
    for change in ("fabric = Fabric(accelerator='cpu', devices=1)", "fabric = Fabric()\n    fabric.launch()"):
        plan, text = init(tmp_path, "fabric_classifier.py", FABRIC.replace("fabric = Fabric()", change), "--force")
        env = plan.baseline.launch.env
        assert "LT_CLI_USED" not in env and env["LT_DEVICES"] == "1" and "LT_CLI_USED is not set" in text


def test_adadelta_keeps_its_lr_in_the_runs_comments(fabric: tuple[Plan, str]) -> None:
    _, text = fabric
    assert "global 128, same lr (the script's own)" in text and "lr scaled" not in text


SEEDED_BY_A_FRAMEWORK = """\
import argparse
import torch
{imports}

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
{seed}
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    ("imports", "seed", "driver", "framework"),
    [
        (
            "from accelerate.utils import set_seed",
            "set_seed(0)",
            "accelerator = accelerate.Accelerator()",
            "accelerate",
        ),
        ("import pytorch_lightning as pl", "pl.seed_everything(0)", "trainer = pl.Trainer()", "lightning"),
    ],
)
def test_a_framework_imported_only_for_its_seed_does_not_drive_the_training(
    tmp_path: Path, imports: str, seed: str, driver: str, framework: str
) -> None:
    """Issue 49.17: a plain loop whose only tie to accelerate (or Lightning) is its seed helper was refused by port
    as "written for accelerate", and init gave its runs ACCELERATE_USE_CPU=1; the framework's object driving the
    training decides (an Accelerator, a Trainer, a LightningModule), not the import."""
    from ddpcli.init.script_kind import script_facts
    from tests.helpers import port_command

    script = tmp_path / "train.py"
    script.write_text(SEEDED_BY_A_FRAMEWORK.format(imports=imports, seed=seed), encoding="utf-8")
    assert script_facts(script, {}).frameworks == set()
    ported = port_command(script)
    assert ported.returncode == 0, ported.stderr
    plan, text = init(tmp_path, "train.py", script.read_text(encoding="utf-8"))
    assert all(not run.launch.env for run in plan.experiments) and "ACCELERATE_USE_CPU" not in text
    driven = tmp_path / "driven.py"
    driven.write_text(SEEDED_BY_A_FRAMEWORK.format(imports=f"import accelerate\n{imports}", seed=f"{seed}\n{driver}"),
                      encoding="utf-8")  # fmt: skip
    assert script_facts(driven, {}).frameworks == {framework}


@pytest.mark.parametrize(
    ("io", "workdir"),
    [
        ('x, y = torch.load("data.pt")', "launch"),  # issue 49.21: data it only reads: the shared folder
        ('x, y = torch.load("data.pt")\ntorch.save(model.state_dict(), "model.pt")', "run"),
        ('PATH = "last.pth"\ndef keep(state, filename):\n    torch.save(state, filename)\nkeep({}, PATH)', "run"),
        ('with open("weights.pt", "wb") as f:\n    torch.save(model.state_dict(), f)', "run"),
    ],
)
def test_a_file_the_script_only_reads_keeps_the_shared_working_directory(tmp_path: Path, io: str, workdir: str) -> None:
    """Issue 49.21: `x, y = torch.load("data.pt")` got `workdir = "run"` (any `*.pt` string was taken for a checkpoint
    the script writes) and every launched run failed with FileNotFoundError. A run directory of its own is for a
    file the script writes, as the reader follows the paths of its saves (through names and its functions)."""
    script = SEEDED_BY_A_FRAMEWORK.format(imports="", seed="") + io + "\n"  # after the parser: --help ends first
    plan, _ = init(tmp_path, "train.py", script)
    assert {run.launch.workdir for run in plan.runs} == {workdir}


MATCHED = """\
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
data = torch.utils.data.TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
eval_loader = torch.utils.data.DataLoader(data, batch_size=128)
train_loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for batch in train_loader:
    match batch:
        case [xb, yb]:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
"""


def test_a_batch_unpacked_by_a_case_pattern_comes_from_the_loader_it_matches(tmp_path: Path) -> None:
    """Issue 49.20: `for batch in train_loader: match batch: case [xb, yb]:` with an evaluation loader of 128 above
    made init take 128 for the per-device batch: names a `case` pattern binds were not followed (libcst's scopes
    record no binding for them)."""
    plan, _ = init(tmp_path, "train.py", MATCHED)
    assert plan.baseline.plan.per_device_batch_size == 8
