"""Each difference from the plan comes with the cause that was observed (issue 15, item 3), on habits of published
scripts (tests/observe_scripts/habits.py): nanoGPT's accumulation divided by the world size, the DDP tutorial's
snapshot.pt left in the shared working directory by an earlier run, a model initialisation that is not seeded, and
the DDP tutorial's loss that is 0 whatever the model does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import codes, compare_json, compare_text, launch

pytestmark = pytest.mark.e2e

ARGS = '["--habit", "{habit}", "--batch-size", "{{per_device_batch_size}}", "--grad-accum", "{{grad_accum_steps}}", ' \
    '"--steps", "{{total_steps}}", "--lr", "{{lr}}"]'  # fmt: skip
EXPERIMENTS = f"""
[defaults]
script = "{SCRIPTS / "habits.py"}"
per_device_batch_size = 8
lr = 0.1
max_steps = 4
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "first"
args = {ARGS.format(habit="snapshot")}

[[experiments]]
name = "second"
max_steps = 6
args = {ARGS.format(habit="snapshot")}

[[experiments]]
name = "accum"
nproc_per_node = 2
grad_accum_steps = 2
args = {ARGS.format(habit="divide-accum")}

[[experiments]]
name = "one"
per_device_batch_size = 16
args = {ARGS.format(habit="unseeded")}

[[experiments]]
name = "two"
nproc_per_node = 2
args = {ARGS.format(habit="unseeded")}

[[experiments]]
name = "scaled"
nproc_per_node = 2
args = {ARGS.format(habit="scale-loss")}

[[experiments]]
name = "flat"
args = {ARGS.format(habit="one-class-loss")}
"""


@pytest.fixture(scope="module")
def habits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, EXPERIMENTS).runs()


def mismatch(record: dict[str, Any], field: str) -> dict[str, Any]:
    return next(f for f in record["findings"] if f["code"] == "plan_mismatch" and f["field"] == field)


def test_an_accumulation_divided_by_the_world_size_is_named(habits: dict[str, dict[str, Any]]) -> None:
    record = habits["accum"]["record"]
    finding = mismatch(record, "grad_accum_steps")
    assert (finding["planned"], finding["observed"]) == (2, 1)
    assert "divides its accumulation by the world size (1 = 2 / 2 processes)" in finding["message"]
    assert "pass it 4" in finding["message"]


def test_a_run_that_resumed_from_an_earlier_runs_snapshot_says_so(habits: dict[str, dict[str, Any]]) -> None:
    first, second = habits["first"]["record"], habits["second"]["record"]
    assert codes(first) == []  # it wrote snapshot.pt, it did not read one
    finding = mismatch(second, "total_steps")
    assert (finding["planned"], finding["observed"]) == (6, 2)
    assert "snapshot.pt before its first step" in finding["message"] and "resumed from it" in finding["message"]
    assert f"written by run first ({first['run_id']})" in finding["message"]
    assert "after this sweep began" in finding["message"]
    assert "resumed_from_other_run" in codes(second)


def test_unseeded_runs_are_told_they_started_from_different_parameters(habits: dict[str, dict[str, Any]]) -> None:
    one, two = habits["one"]["record"], habits["two"]["record"]
    assert one["observed"]["initial_params_fingerprint"] != two["observed"]["initial_params_fingerprint"]
    root = Path(habits["first"]["dir"]).parent.parent
    rows = {row["name"]: row for row in compare_json(root)}
    assert rows["two"]["equivalent_to"] == "one" and rows["two"]["verdict"] == "diverged"
    shown = compare_text(Path(habits["first"]["dir"]))
    text = " ".join(shown.split())
    note = text[text.index("two diverged from") :]
    cause = "The runs started from different initial parameters (the model initialisation is not seeded)."
    assert cause in note
    assert note.index(cause) < min(  # before any other guess
        (note.index(guess) for guess in ("likely causes", "sum-reduced") if guess in note), default=len(note)
    )


def test_a_loss_scaled_by_the_world_size_is_named(habits: dict[str, dict[str, Any]]) -> None:
    record = habits["scaled"]["record"]
    finding = next(f for f in record["findings"] if f["code"] == "loss_scaled_by_world_size")
    assert "2 x the loss the model returned" in finding["message"]
    assert "loss_scaled_by_world_size" not in codes(habits["two"]["record"])


def test_a_loss_that_never_moves_is_named_and_only_there(habits: dict[str, dict[str, Any]]) -> None:
    """The DDP tutorial's cross_entropy over a one-unit output: 0 at every step, which looked converged."""
    flat = habits["flat"]["record"]
    [finding] = [f for f in flat["findings"] if f["code"] == "loss_constant"]
    assert finding["message"].startswith("the loss was 0 at every one of the 4 optimizer steps:")
    assert [row["loss"] for row in habits["flat"]["metrics"].rows] == [0.0] * 4
    others = [name for name, run in habits.items() if name != "flat" and "loss_constant" in codes(run["record"])]
    assert others == []
