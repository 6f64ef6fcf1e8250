"""`ddpcli init` on the scripts of tests/init_scripts, and launching what it wrote, for the init tests."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ddpcli.cli.app import app
from tests.conftest import REPO

SCRIPTS = REPO / "tests" / "init_scripts"
runner = CliRunner()


def init(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["init", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def dry_run(path: Path) -> dict[str, list[str]]:
    """Each run's command line after the script, from `ddpcli launch --dry-run`, by run name."""
    result = runner.invoke(app, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 0, result.stderr
    commands: dict[str, list[str]] = {}
    name = ""
    for line in result.stdout.splitlines():
        if line.startswith("# ") and " -> " in line:
            name = line[2:].split(" -> ")[0]
        elif line and not line.startswith("#"):
            commands[name] = line.split()
    return commands


def script_args(argv: list[str], script: str) -> list[str]:
    return argv[next(index for index, word in enumerate(argv) if word.endswith(script)) + 1 :]


def launch_and_read(folder: Path, *names: str) -> dict[str, tuple[Path, dict]]:
    """`ddpcli launch --only NAME...` in `folder` (its experiments.toml), then each completed run's directory and
    record, by name."""
    import subprocess
    import sys

    from ddpcli.jsonvalues import read_json

    command = [sys.executable, "-m", "ddpcli", "launch", *(part for name in names for part in ("--only", name))]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {}
    for name in names:
        (run_dir,) = (folder / "runs" / name).iterdir()
        runs[name] = (run_dir, read_json(run_dir / "run.json"))
        assert runs[name][1]["status"] == "completed"
    return runs
