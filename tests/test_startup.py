"""`ddpcli plan` must stay instant: it never imports torch, and loads only its own command module.

The root group loads a command's module only when the command runs (ddpcli/cli/app.py), so `ddpcli plan` imports
planning and the plan renderer but nothing of the host modules (supervisor, sweep, parameter files, script help)
and no other command.
"""

from __future__ import annotations

import inspect
import json

import pytest

from ddpcli.cli.app import COMMANDS
from tests.conftest import REPO, loads_torch, probe_cli
from tests.helpers import HOST_MODULES

OTHER_COMMANDS = [f"ddpcli.cli.commands.{name}" for name in COMMANDS if name != "plan"]


def test_plan_never_imports_torch_host_or_another_command() -> None:
    code, modules = probe_cli("plan", REPO / "experiments.toml")
    assert code == 0
    assert "ddpcli.cli.commands.plan" in modules  # the probe sees what was loaded
    assert [name for name in modules if name.startswith(("torch", *HOST_MODULES, *OTHER_COMMANDS))] == []


def test_plan_json_from_the_default_file_loads_no_torch() -> None:
    code, modules = probe_cli("plan", "--json")  # ./experiments.toml of the repository
    assert code == 0 and not loads_torch(modules)


def test_root_help_lists_every_command_without_loading_any() -> None:
    code, modules = probe_cli("--help")
    assert code == 0
    assert [name for name in modules if name.startswith(("torch", *HOST_MODULES, "ddpcli.cli.commands."))] == []


def test_a_command_help_loads_only_that_command() -> None:
    code, modules = probe_cli("slurm", "--help")
    assert code == 0
    assert [name for name in modules if name.startswith("ddpcli.cli.commands.")] == ["ddpcli.cli.commands.slurm"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_registry_help_is_the_first_paragraph_of_the_command_docstring(name: str) -> None:
    """`ddpcli --help` shows the registry's line without importing the command: it must not drift from it."""
    lazy = COMMANDS[name]
    command = lazy.load(name)
    assert command.name == name
    assert lazy.short_help == inspect.cleandoc(command.help or "").split("\n\n")[0]


def test_plan_json_through_the_lazy_group_is_the_plan() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "ddpcli", "plan", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [run["name"] for run in [plan["baseline"], *plan["experiments"]]] == ["1x16", "4x16", "1x64", "4x4"]
