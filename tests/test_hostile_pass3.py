"""Hostile pass 3 (issue 29): placeholders that format into what no argv can hold, scripts that do not exist, and
`extra_args` mistakes named as the user wrote them. Each refused by `plan` and `launch` alike: exit 2, one line
naming the file and the field, nothing started and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from tests.conftest import write_toml
from tests.test_hostile_input import assert_one_line_error

runner = CliRunner()

FILE = """\
[defaults]
module = "ddpcli.examples.regression"
max_steps = 4
args = ["--steps", "{total_steps}"]
extra_args = ["--seed={seed}"]

[baseline]
name = "a"
per_device_batch_size = 4
lr = 0.1
extra_args = ["--tag=a"]

[[experiments]]
name = "b"
nproc_per_node = 2
extra_args = ["--x", "EXTRA"]
"""

COMMANDS = (["plan", "FILE", "--json"], ["plan", "FILE"], ["launch", "FILE", "--dry-run"], ["launch", "FILE"])


def refused_everywhere(tmp_path: Path, text: str) -> list[str]:
    """Each command's one error line, after checking that nothing was created next to the file."""
    path = write_toml(tmp_path, text)
    lines = []
    for command in COMMANDS:
        result = runner.invoke(app, [str(path) if word == "FILE" else word for word in command])
        assert_one_line_error(result, path)
        lines.append(result.stderr.strip())
    assert sorted(tmp_path.iterdir()) == [path]  # no runs directory, no run started
    return lines


@pytest.mark.parametrize(
    ("placeholder", "message"),
    [
        ("{seed:c}", "NUL byte"),  # seed 0 as a character: a NUL byte no argv can hold
        ("{total_steps * 300000:c}", "{total_steps * 300000:c}"),  # beyond any character: OverflowError
        ("{total_steps * 14000:c}", "cannot be a command-line argument"),  # 56000: a lone surrogate
    ],
)
def test_a_placeholder_no_argv_can_hold_is_one_line(tmp_path: Path, placeholder: str, message: str) -> None:
    for line in refused_everywhere(tmp_path, FILE.replace('"EXTRA"', f'"{placeholder}"')):
        assert ": experiments[0].extra_args[1]: " in line and message in line, line


@pytest.mark.parametrize(
    ("where", "text", "field"),
    [
        ("experiment", FILE.replace('"EXTRA"', '"{nope}"'), "experiments[0].extra_args[1]"),
        ("baseline", FILE.replace('"--tag=a"', '"--tag={nope}"'), "baseline.extra_args[0]"),
        ("defaults", FILE.replace('"--seed={seed}"', '"--seed={nope}"'), "baseline.extra_args[0]"),
        ("defaults args", FILE.replace('"{total_steps}"', '"{nope}"'), "baseline.args[1]"),
        ("own args", FILE.replace('nproc_per_node = 2\n', 'nproc_per_node = 2\nargs = ["{nope}"]\n'),
         "experiments[0].args[0]"),
    ],
)  # fmt: skip
def test_a_bad_placeholder_is_named_by_the_field_the_user_wrote(
    tmp_path: Path, where: str, text: str, field: str
) -> None:
    """The file's own fields: `extra_args[1]` of the entry, never the position in the merged `args` (which the
    file does not have). The first run that fails is reported: the baseline for what [defaults] holds."""
    expected = field.replace("baseline.extra_args[0]", "defaults.extra_args[0]") if where == "defaults" else field
    expected = expected.replace("baseline.args[1]", "defaults.args[1]") if where == "defaults args" else expected
    for line in refused_everywhere(tmp_path, text):
        assert f": {expected}: unknown placeholder {{nope}}" in line, line


def test_a_script_that_does_not_exist_starts_nothing(tmp_path: Path) -> None:
    text = FILE.replace('module = "ddpcli.examples.regression"', 'script = "missing/train.py"')
    for line in refused_everywhere(tmp_path, text):
        assert ": defaults.script: " in line and "no such file" in line and "missing/train.py" in line, line
    (tmp_path / "missing").mkdir()  # a folder is not a script either
    text = text.replace('name = "b"\n', 'name = "b"\nscript = "missing"\n')
    (tmp_path / "missing" / "train.py").write_text("", encoding="utf-8")
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, text))])
    assert result.exit_code == 2 and ": experiments[0].script: " in result.stderr and "not a file" in result.stderr
