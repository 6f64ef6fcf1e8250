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
