"""The example at the top of ddpcli/worker/runtime/__init__.py runs as written: it is the first thing people copy.

The test takes the code block from the docstring itself (so an edit there is tested), supplies the names it leaves
open (build_model, dataset, loss_fn, total_steps, accum_steps), runs it as `ddpcli launch` would start it at world
size 1 (DDPCLI_RUN and DDPCLI_RUN_DIR set: batch and lr from RUN) and as plain `python` would (neither: its own
defaults), and checks the rows and final parameters it wrote.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from ddpcli import runtime
from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.worker import runtime as runtime_package
from tests.conftest import merge_observations

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
TOTAL_STEPS, ACCUM_STEPS, BATCH, LR, SEED = 6, 2, 4, 0.05, 7


def docstring_example() -> str:
    """The indented block between the docstring's first line and the first paragraph after it."""
    doc = inspect.getdoc(runtime_package) or ""
    block = doc.split("\n\n", 1)[1].split("\n`ddpcli launch`", 1)[0]
    return textwrap.dedent(block)


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def make_dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(20, 3, generator=generator)
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in (*TORCHRUN_ENV, "DDPCLI_RUN", "DDPCLI_RESUME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DDPCLI_RUN_DIR", str(tmp_path))
    run = {"name": "1x4", "per_device_batch_size": BATCH, "lr": LR, "seed": SEED, "noise_scale": False}
    monkeypatch.setenv("DDPCLI_RUN", json.dumps({**run, "run_dir": str(tmp_path)}))
    return tmp_path


def test_the_example_block_is_found() -> None:
    example = docstring_example()
    assert example.startswith("from ddpcli import runtime\n") and example.rstrip().endswith("main()")


def test_the_docstring_example_trains_logs_and_saves(run_dir: Path) -> None:
    dataset = make_dataset()
    names = {
        "torch": torch,
        "build_model": build_model,
        "dataset": dataset,
        "loss_fn": nn.functional.mse_loss,
        "total_steps": TOTAL_STEPS,
        "accum_steps": ACCUM_STEPS,
    }
    runtime_main = runtime.main
    exec(compile(docstring_example(), "ddpcli/worker/runtime/__init__.py (docstring)", "exec"), names)
    assert runtime.main is runtime_main  # the example imported the real helper

    rows = merge_observations(run_dir)
    assert [row["step"] for row in rows] == list(range(1, TOTAL_STEPS + 1))
    assert [row["lr"] for row in rows] == [LR] * TOTAL_STEPS  # read from RUN, as the example does
    assert all(isinstance(row["loss"], float) and row["loss"] > 0 for row in rows)

    saved = torch.load(run_dir / PARAMS_FILE, weights_only=True)
    torch.manual_seed(SEED)  # what runtime.init did before the example built its model
    initial = build_model().state_dict()
    assert set(saved) == set(initial)  # unwrapped from the wrapper: the plain model's names
    assert all(saved[key].shape == value.shape for key, value in initial.items())
    assert any(not torch.equal(saved[key], value) for key, value in initial.items())  # it trained


def test_the_docstring_example_runs_under_plain_python(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """No torchrun, no ddpcli launch: ctx.run is None, the example's own batch and lr, rows printed by rank 0."""
    for key in (*TORCHRUN_ENV, "DDPCLI_RUN", "DDPCLI_RUN_DIR", "DDPCLI_RESUME"):
        monkeypatch.delenv(key, raising=False)
    names = {"torch": torch, "build_model": build_model, "dataset": make_dataset(), "loss_fn": nn.functional.mse_loss,
             "total_steps": TOTAL_STEPS, "accum_steps": ACCUM_STEPS}  # fmt: skip
    exec(compile(docstring_example(), "ddpcli/worker/runtime/__init__.py (docstring)", "exec"), names)
    lines = capfd.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [f"step={step}" for step in range(1, TOTAL_STEPS + 1)]
    assert all(line.endswith(" lr=0.1") for line in lines)
