"""Exact output of `ddpcli plan` and `ddpcli compare` (the real commands, through CliRunner) and of what `launch`
prints once its runs have ended (the command's own `_finish`), at 80 and 120 columns, colour off, from fixed
inputs: a fixed experiment file, and run directories written here with fixed run.json, metrics.jsonl and parameter
files (no torchrun). So a command that stops printing its notes or findings fails here. And, at any width and
piped, no table cuts a number or a run name.

The expected text lives in tests/golden/<name>-<width>.txt. After an intended change of the output, regenerate
every golden file with ONE command, then review the diff:

    DDPCLI_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py -p no:cacheprovider
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from ddpcli import compare as cmp
from ddpcli.cli.app import app
from ddpcli.cli.commands.launch import _finish, _summary_row
from ddpcli.cli.render.compare import comparison_tables
from ddpcli.cli.render.launch import launch_summary_tables
from ddpcli.cli.render.layout import print_bullets
from ddpcli.cli.render.plan import plan_tables
from ddpcli.experiment.outlook import batch_outlook
from ddpcli.experiment.planning import load_plan
from ddpcli.launch.argv import Rendezvous
from ddpcli.launch.supervisor import StopRequest
from ddpcli.launch.sweep import RunResult, SweepOptions, prepare
from ddpcli.rundir.params import param_diff
from ddpcli.rundir.record import FailedRank, Finding, RunRecord
from tests.builders import make_run, state
from tests.conftest import REPO
from tests.helpers import terminal_width

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DDPCLI_UPDATE_GOLDEN") == "1"
WIDTHS = (80, 120)
EXPERIMENTS = GOLDEN / "experiments.toml"  # the fixed experiment file (noise_scale = 100: outlook columns)


def render(width: int, tables: list[RenderableType], notes: tuple[str, list[str]] | None = None) -> str:
    """What a terminal of `width` columns shows, without colour (rich's own Console, writing to a string)."""
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, legacy_windows=False)
    for table in tables:
        console.print(table)
    if notes:
        print_bullets(console, *notes)
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a fresh directory holding the fixed experiment file: relative paths in the output stay fixed."""
    (tmp_path / "experiments.toml").write_text(EXPERIMENTS.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def command_output(args: list[str], width: int) -> str:
    with terminal_width(width):
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def plan_output(width: int) -> tuple[str, list[RenderableType]]:
    plan = load_plan(Path("experiments.toml"))
    outlooks = {run.name: batch_outlook(run, plan.baseline, None) for run in plan.runs}
    return command_output(["plan", "experiments.toml"], width), plan_tables(plan, plan.runs, outlooks, width)


MISMATCH = Finding(code="plan_mismatch", severity="warning", field="per_device_batch_size", planned=4, observed=8,
                   message="batch per process 8; the plan said 4")  # fmt: skip


def launch_results() -> list[RunResult]:
    """The plan's runs as `launch` leaves them: fixed run ids, records and metrics (the last run failed)."""
    plan = load_plan(Path("experiments.toml"))
    options = SweepOptions(runs_dir=Path("runs"), rendezvous=Rendezvous(run_id="20260101T000000Z-golden"),
                           name_by_rdzv_id=True)  # fmt: skip
    results = []
    for index, spec in enumerate(prepare(plan, plan.runs, options)):
        failed = spec.run.name == "2x8x4acc"
        record = RunRecord(
            run_id=spec.run_dir.name,
            name=spec.run.name,
            status="failed" if failed else "completed",
            wall_time_s=4.25 + index * 3.5,
            exit_code=1 if failed else 0,
            failed_ranks=[FailedRank(rank=1, exit_code=1, error="RuntimeError: CUDA out of memory", log_tail="")]
            if failed
            else [],
            findings=[MISMATCH] if spec.run.name == "4x4" else [],
        )
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        record.write(spec.run_dir / "run.json")
        rows = [{"step": step, "samples": step * 16, "loss": 1.0 / step + index / 1000} for step in range(1, 11)]
        (spec.run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        results.append(RunResult(spec, record))
    return results


def launch_output(width: int) -> tuple[str, list[RenderableType]]:
    """What `ddpcli launch` prints once its runs have ended: the summary, the findings, the failures (stderr)."""
    results = launch_results()
    out, err = io.StringIO(), io.StringIO()
    with terminal_width(width), redirect_stdout(out), redirect_stderr(err), pytest.raises(typer.Exit) as stopped:
        _finish(results, StopRequest())
    assert stopped.value.exit_code == 1  # one run failed
    tables = launch_summary_tables([_summary_row(result) for result in results], width)
    return out.getvalue() + "--- stderr ---\n" + err.getvalue(), tables


def compare_output(width: int) -> tuple[str, list[RenderableType]]:
    root = Path("runs")
    bn = ["torchrun", "--nproc-per-node=8", "-m", "train", "--batchnorm"]
    make_run(root, "1x16", steps=100, step_time=0.016, loss=lambda k: 2.0 - k / 100)
    make_run(root, "1x64", per_device=64, lr=0.2, steps=25, step_time=0.05, params=state(w=[0.0]))
    make_run(root, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02, params=state(w=[2.4e-7]))
    make_run(root, "8x8-batchnorm", nproc=8, per_device=8, lr=0.2, steps=25, step_time=0.0125, argv=bn,
             params=state(w=[1.0]))  # fmt: skip
    make_run(root, "2x8", nproc=2, per_device=8, steps=60, planned_steps=100, status="failed")
    metrics = root / "4x16" / "20260101T000000Z-aaaaaa" / "metrics.jsonl"
    *rows, last = metrics.read_text(encoding="utf-8").splitlines()
    rows.append(json.dumps({**json.loads(last), "noise_scale": 123.4}))  # measured: the noise-scale note
    metrics.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    records, warnings = cmp.collect_runs([root])
    comparison = cmp.compare_runs(records, param_diff=param_diff)
    assert not warnings and not comparison.warnings
    return command_output(["compare", "runs"], width), comparison_tables(comparison, width)


OUTPUTS = {"plan": plan_output, "launch": launch_output, "compare": compare_output}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_output_matches_the_golden_file(name: str, width: int, in_tmp: Path) -> None:
    text, _ = OUTPUTS[name](width)
    path = GOLDEN / f"{name}-{width}.txt"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: regenerate with DDPCLI_UPDATE_GOLDEN=1 (see this module's docstring)"
    assert text == path.read_text(encoding="utf-8")


def value_cells(tables: list[RenderableType]) -> Iterator[str]:
    """The plain text of every cell in a column that never wraps: numbers, names, statuses."""
    for table in tables:
        if not isinstance(table, Table):
            continue
        for column in table.columns:
            if column.no_wrap:
                for cell in column.cells:
                    yield cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 200])
@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_no_table_cuts_a_value(name: str, width: int, in_tmp: Path) -> None:
    output, tables = OUTPUTS[name](width)
    assert "…" not in output
    text = render(width, tables)  # the tables alone: messages under them are soft-wrapped by the terminal
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    for value in value_cells(tables):
        assert any(value in line for line in lines), f"{value!r} is not whole at width {width}:\n{text}"


@settings(max_examples=40, deadline=None)
@given(width=st.integers(min_value=30, max_value=160))
def test_the_plan_never_cuts_a_value_at_any_width(width: int) -> None:
    text, tables = plan_output_of(EXPERIMENTS, width)
    assert "…" not in text
    lines = text.splitlines()
    for value in value_cells(tables):
        assert any(value in line for line in lines), f"{value!r} is not whole at width {width}:\n{text}"


def plan_output_of(path: Path, width: int) -> tuple[str, list[RenderableType]]:
    plan = load_plan(path)
    outlooks = {run.name: batch_outlook(run, plan.baseline, None) for run in plan.runs}
    tables = plan_tables(plan, plan.runs, outlooks, width)
    return render(width, tables), tables


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_piped_output_cuts_no_value(command: str, in_tmp: Path) -> None:
    """Piped to a file, Rich assumes 80 columns: the narrow case every script and CI log gets."""
    if command == "compare":
        compare_output(80)  # writes the run directories
    env = {key: value for key, value in os.environ.items() if key not in {"COLUMNS", "LINES"}}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-m", "ddpcli", command], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 80
    assert "0.05" in result.stdout and "1x64" in result.stdout
