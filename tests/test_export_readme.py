"""The README's export section as a newcomer runs it: each command of its fenced blocks works with what the `pip
install` line before it installs (the extras as pyproject.toml has them, and the packages the line names)."""

from __future__ import annotations

import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ddpcli.export.targets import LIBRARIES
from tests.conftest import REPO

# A viewer's own command in the section -> the distribution that has it.
VIEWER_COMMANDS = (
    ("mlflow ui", "mlflow"),  # MLflow's server needs flask: the full mlflow, which mlflow-skinny is not
    ("tensorboard ", "tensorboard"),  # TensorBoard itself: tensorboardX writes event files and has no command
    ("wandb sync", "wandb"),
)


def distribution(requirement: str) -> str:
    """`tensorboardX>=2.6` -> `tensorboardx` (names compared as pip does, case-insensitively)."""
    return re.split(r"[<>=!~\[;\s]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def extras() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {name: {distribution(each) for each in needs} for name, needs in project["optional-dependencies"].items()}


def export_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("### `ddpcli export")
    return text[start : text.index("\n### ", start + 1)]


def commands(section: str) -> list[str]:
    """The shell commands of the section's bash blocks, `a && b` as two, comments left out."""
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    lines = [line.split(" #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [part.strip() for line in lines if line for part in line.split("&&")]


def installs(command: str, known: dict[str, set[str]]) -> set[str]:
    """What `pip install [-e] ".[a,b]" pkg ...` installs: each extra's distributions and each package named."""
    got: set[str] = set()
    for word in command.split()[2:]:
        word = word.strip("\"'")
        if word.startswith("-"):
            continue
        if word.startswith(".["):
            for extra in word[2:].rstrip("]").split(","):
                assert extra in known, f"{command}: pyproject.toml has no extra {extra!r}"
                got |= known[extra]
        elif word != ".":
            got.add(distribution(word))
    return got


def test_each_export_command_works_with_what_the_pip_line_before_it_installs() -> None:
    known, installed, checked = extras(), None, []
    for command in commands(export_section()):
        if command.startswith("pip install"):
            installed = installs(command, known)
            continue
        assert installed is not None, f"{command}: no pip line before it says what it needs"
        if command.startswith("ddpcli export "):
            viewer = command.split()[2]
            needs = known[LIBRARIES[viewer].extra]
        else:
            found = [dist for prefix, dist in VIEWER_COMMANDS if command.startswith(prefix)]
            assert found, f"{command}: not a command this test knows the needs of (add it to VIEWER_COMMANDS)"
            needs = {found[0]}
        assert needs <= installed, f"{command}: needs {sorted(needs - installed)}, not installed by the line before"
        checked.append(command.split()[0])
    assert set(checked) >= {"ddpcli", "tensorboard", "mlflow", "wandb"}  # every viewer's command was read


def test_the_export_extra_is_the_three_viewers_extras() -> None:
    known = extras()
    assert known["export"] == set().union(*(known[viewer.extra] for viewer in LIBRARIES.values()))
