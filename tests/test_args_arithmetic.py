"""Placeholder arithmetic (`{grad_accum_steps * world_size}`), `extra_args`, `workdir = "run"` and `stand_ins`:
what the experiment file can say for scripts such as nanoGPT (total accumulation over ranks, max_iters + 1
iterations) and the DDP tutorial (a snapshot.pt in the working directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.arithmetic import ExpressionError, evaluate
from ddpcli.errors import ConfigError
from ddpcli.experiment.placeholders import fill_placeholders
from ddpcli.experiment.planning import load_plan
from ddpcli.launch.argv import build_launch

VALUES = {"grad_accum_steps": 5, "world_size": 4, "total_steps": 100, "lr": 6e-4, "name": "4x8", "dataset_size": None}


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("--gradient_accumulation_steps={grad_accum_steps * world_size}", "--gradient_accumulation_steps=20"),
        ("--max_iters={total_steps - 1}", "--max_iters=99"),
        ("--min_lr={lr / 10:.2e}", "--min_lr=6.00e-05"),
        ("{total_steps // world_size}", "25"),
        ("{-(total_steps % 7) + 2}", "0"),
        ("{ grad_accum_steps*2 }", "10"),
        ("{lr}", "0.0006"),
    ],
)
def test_arithmetic_placeholders_fill(arg: str, expected: str) -> None:
    assert fill_placeholders([arg], VALUES, "f.toml") == [expected]


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("{__import__('os').getcwd()}", "not allowed"),
        ("{lr.real}", "not allowed"),
        ("{world_size ** 99}", "not allowed"),
        ("{VALUES[0]}", "not allowed"),
        ("{nope + 1}", "unknown key 'nope'"),
        ("{name * 2}", "not a number"),
        ("{dataset_size + 1}", "no value for this run"),
        ("{total_steps / 0}", "division by zero"),
        ("{True + 1}", "only numbers"),
        ("{lr * 1e308 * 1e308}", "not a finite number"),
        ("{total_steps * 10000000000 * 10000000000}", "beyond"),
    ],
)
def test_anything_but_arithmetic_over_the_runs_keys_is_refused(arg: str, message: str) -> None:
    with pytest.raises(ConfigError, match="args\\[0\\]") as error:
        fill_placeholders([arg], VALUES, "f.toml")
    assert message in str(error.value)


@given(st.integers(-(10**6), 10**6), st.integers(1, 10**6))
def test_integer_arithmetic_matches_python(a: int, b: int) -> None:
    values = {"a": a, "b": b}
    assert evaluate("a * b - a // b + a % b", values) == a * b - a // b + a % b
    with pytest.raises(ExpressionError):
        evaluate("a ** b", values)


FILE = """
[defaults]
script = "train.py"
args = ["--batch_size={per_device_batch_size}", "--gradient_accumulation_steps={grad_accum_steps * world_size}"]
extra_args = ["--compile=False"]
max_steps = 10
optimizer = "adamw"

[baseline]
name = "1x4"
per_device_batch_size = 4
grad_accum_steps = 2
lr = 0.001
extra_args = ["--max_iters={total_steps - 1}"]
stand_ins = ["warmup_steps"]

[[experiments]]
name = "2x4"
nproc_per_node = 2
workdir = "run"
extra_args = ["--tag={world_size}"]

[[experiments]]
name = "own"
nproc_per_node = 2
args = ["--only"]
"""


def test_extra_args_append_to_the_inherited_args_and_workdir_run_starts_in_the_run_directory(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    (tmp_path / "experiments.toml").write_text(FILE, encoding="utf-8")
    plan = load_plan(tmp_path / "experiments.toml")
    runs = {run.name: run for run in plan.runs}
    assert runs["1x4"].launch.args[2:] == ["--compile=False", "--max_iters={total_steps - 1}"]
    assert runs["2x4"].launch.args[2:] == ["--compile=False", "--max_iters={total_steps - 1}", "--tag={world_size}"]
    assert runs["own"].launch.args == ["--only", "--compile=False", "--max_iters={total_steps - 1}"]
    run_dir = tmp_path / "runs" / "2x4" / "ID"
    spec = build_launch(runs["2x4"], run_dir, plan.file, python="/py")
    assert spec.argv[-5:] == [
        "--batch_size=4", "--gradient_accumulation_steps=2", "--compile=False", "--max_iters=9", "--tag=2"
    ]  # fmt: skip
    assert spec.cwd == run_dir and spec.env_added["DDPCLI_EXPERIMENT_DIR"] == str(tmp_path.resolve())
    assert build_launch(runs["1x4"], run_dir, plan.file, python="/py").cwd is None
    # stand_ins: the baseline's warmup is the script's own, so the plan neither labels it 0 nor says "no warmup"
    assert any(note.startswith("Stand-ins") and "warmup_steps 0" in note for note in runs["2x4"].plan.notes)
    assert runs["2x4"].plan.warmup_steps == runs["1x4"].plan.warmup_steps == 0  # kept, not rescaled: no flag carries it
    assert not any("no warmup" in note for note in runs["2x4"].plan.notes)


def test_an_arithmetic_mistake_is_a_plan_error_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    (tmp_path / "experiments.toml").write_text(
        FILE.replace("{total_steps - 1}", "{total_steps - open}"), encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"baseline\.extra_args\[0\].*unknown key 'open'"):  # the field it is in
        load_plan(tmp_path / "experiments.toml")
