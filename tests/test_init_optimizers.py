"""`ddpcli init` recognises every torch.optim optimizer class (and common third-party ones) by name, and says the
lr rule ddpcli applies to it, or that none is known (the lr is then kept) and which rule to name instead."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch.optim
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan

runner = CliRunner()
TORCH_OPTIMIZERS = sorted(
    name
    for name, value in vars(torch.optim).items()
    if inspect.isclass(value) and issubclass(value, torch.optim.Optimizer) and value is not torch.optim.Optimizer
)


def init_with(tmp_path: Path, construct: str) -> tuple[str, str, str]:
    """init on a script that imports torch after it parses its arguments (so that `--help`, which init runs, does
    not import it: 3 s a test); the optimizer is read from the syntax tree, wherever the imports stand."""
    script = (
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--batch-size', type=int, default=64)\nparser.add_argument('--lr', type=float, "
        "default=1.0)\nargs = parser.parse_args()\nimport torch\nimport torch.optim as optim\n"
        f"def build(model):\n    return {construct}\n"
    )
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    output = tmp_path / "experiments.toml"
    result = runner.invoke(app, ["init", str(tmp_path / "train.py"), "-o", str(output), "--nproc-per-node", "2"])
    assert result.exit_code == 0, result.stderr
    return load_plan(output).baseline.plan.optimizer, output.read_text(encoding="utf-8"), result.stderr


@pytest.mark.parametrize("name", TORCH_OPTIMIZERS)
def test_every_torch_optim_class_is_recognised_by_name(tmp_path: Path, name: str) -> None:
    _, text, err = init_with(tmp_path, f"torch.optim.{name}(model.parameters(), lr=args.lr)")
    assert "no optimizer flag or class found" not in text + err
    optimizer_line = next(line for line in text.splitlines() if line.startswith("optimizer = "))
    assert f"{name}(...)" in optimizer_line


def test_adadelta_as_mnist_and_fabric_build_it_keeps_the_lr_and_says_no_rule_is_known(tmp_path: Path) -> None:
    optimizer, text, _ = init_with(tmp_path, "optim.Adadelta(model.parameters(), lr=args.lr)")
    assert optimizer == "other"
    line = next(line for line in text.splitlines() if line.startswith("optimizer = "))
    assert "Adadelta(...) at line 9" in line and "none known: lr kept, say which rule you want" in line


@pytest.mark.parametrize(
    ("construct", "kind", "rule"),
    [
        ("torch.optim.NAdam(model.parameters())", "adam", "square root"),
        ("torch.optim.ASGD(model.parameters())", "sgd", "linear"),
        ("bnb.optim.AdamW8bit(model.parameters())", "adamw", "square root"),
        ("FusedLAMB(model.parameters())", "other", "none known"),
    ],
)
def test_the_rule_applied_is_named_beside_the_class(tmp_path: Path, construct: str, kind: str, rule: str) -> None:
    optimizer, text, _ = init_with(tmp_path, construct)
    line = next(line for line in text.splitlines() if line.startswith("optimizer = "))
    assert optimizer == kind and rule in line
