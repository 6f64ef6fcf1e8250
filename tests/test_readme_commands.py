"""Every command the README gives runs as written (issue 39, the newcomer's path): each `ddpcli` command of its
fenced `bash` blocks and of its `$ ` lines names a command that exists and options that command has, and each `pip
install -e ".[extra]"` names an extra of pyproject.toml. The export section's viewers are checked against what its
pip lines install in tests/test_export_readme.py; the README's port diff and output in tests/test_port_cli.py."""

from __future__ import annotations

import re
import shlex
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ddpcli.cli.reference import commands as click_commands
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def shell_lines() -> list[str]:
    """The lines a reader types: whole `bash` blocks, and `$ ` lines of any block (a transcript's prompts)."""
    lines = []
    for language, body in re.findall(r"```(\w*)\n(.*?)```", README, re.S):
        for line in body.splitlines():
            if line.startswith("$ "):
                lines.append(line[2:])
            elif language == "bash" and line.strip():
                lines.append(line)
    return lines


def commands(starting: str) -> list[list[str]]:
    """Each `&&`-joined command of the shell lines that starts with `starting`, split as the shell splits it, with
    `[optional]` parts of a synopsis dropped."""
    found = []
    for line in shell_lines():
        for part in line.split("&&"):
            words = shlex.split(re.sub(r"(?<=\s)\[[^\]]*\]", "", part), comments=True)
            if words[: len(starting.split())] == starting.split():
                found.append(words)
    return found


COMMANDS = click_commands()  # the click command objects that parse each command's arguments


def options_of(command: str) -> set[str]:
    params = COMMANDS[command].params + COMMANDS["ddpcli"].params
    return {
        name for param in params if param.param_type_name == "option" for name in [*param.opts, *param.secondary_opts]
    }


DDPCLI = commands("ddpcli")


def test_the_readme_gives_the_commands_a_newcomer_runs() -> None:
    assert {words[1] for words in DDPCLI} >= {"init", "port", "plan", "launch", "compare", "export", "slurm"}
    assert ["pip", "install", "torch==2.13.0", "-e", ".[dev]"] in commands("pip install")


@pytest.mark.parametrize("words", DDPCLI, ids=[" ".join(words) for words in DDPCLI])
def test_each_ddpcli_command_and_option_exists(words: list[str]) -> None:
    assert words[1] in COMMANDS, f"ddpcli has no command {words[1]!r}"
    options = {word.split("=")[0] for word in words[2:] if word.startswith("-") and word != "--"}
    assert options <= options_of(words[1]), f"{' '.join(words)}: no such option {options - options_of(words[1])}"


def test_each_pip_install_names_an_extra_pyproject_has() -> None:
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    )
    named = {
        extra.strip()
        for words in commands("pip install")
        for word in words
        for brackets in re.findall(r"\.\[([^\]]+)\]", word)
        for extra in brackets.split(",")
    }
    assert named and named <= extras, named - extras


def test_the_files_the_first_commands_read_are_in_a_checkout() -> None:
    assert (REPO / "experiments.toml").is_file()  # `ddpcli launch experiments.toml`, the main job
    assert (REPO / "ddpcli/examples/single_device.py").is_file()  # what "From one GPU to DDP" copies first
    assert "cp ddpcli/examples/single_device.py ." in README
