"""What a script hard-codes or derives from the world size, read from its source: build-nanogpt's token budget
(`grad_accum_steps = total_batch_size // (B * T * ddp_world_size)`), the DDP tutorial's `bsz = 128 // size`, the
quickstart tutorial's module-level `batch_size = 64`, dataclass defaults, function-level and tuple assignments.
init plans every run as the script computes it; a script that keeps its global batch gets no invented batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan
from ddpcli.init.derived import derivations, derived_per_rank
from ddpcli.script.reader import Reader
from tests.conftest import REPO

runner = CliRunner()
SCRIPTS = REPO / "tests" / "init_scripts"


def init_text(tmp_path: Path, name: str, text: str | None = None) -> tuple[dict, str]:
    """name -> (world size, per-device, accumulation, global batch, stand-ins), and the file's text."""
    if text is None:
        shutil.copy(SCRIPTS / name, tmp_path / name)
    else:
        (tmp_path / name).write_text(text, encoding="utf-8")
    output = tmp_path / "experiments.toml"
    result = runner.invoke(app, ["init", str(tmp_path / name), "-o", str(output), "--nproc-per-node", "2,4"])
    assert result.exit_code == 0, result.stderr
    plan = load_plan(output)
    runs = {
        run.name: (run.plan.world_size, run.plan.per_device_batch_size, run.plan.grad_accum_steps,
                   run.plan.global_batch_size, run.stand_ins)
        for run in plan.runs
    }  # fmt: skip
    return runs, output.read_text(encoding="utf-8")


def test_build_nanogpts_published_token_budget_is_kept_in_every_run(tmp_path: Path) -> None:
    """B = 4, T = 32, total_batch_size = 524288 tokens: 4096 micro-batches at 1 process, 16384 sequences a step."""
    text = (
        (SCRIPTS / "gpt_tokens.py")
        .read_text(encoding="utf-8")
        .replace("total_batch_size = 2048", "total_batch_size = 524288")
    )
    runs, written = init_text(tmp_path, "train_gpt2.py", text)
    stand_ins = ("per_device_batch_size", "grad_accum_steps", "lr")
    assert runs == {
        "1x4-acc4096": (1, 4, 4096, 16384, stand_ins),
        "2x4-acc2048": (2, 4, 2048, 16384, stand_ins),
        "4x4-acc1024": (4, 4, 1024, 16384, stand_ins),
    }
    assert "a budget of 524288 tokens per optimizer step" in written
    assert "16384 sequences of 32 tokens" in written
    assert "total_batch_size // (B * T * ddp_world_size)" in written
    assert "not found in the source" not in written
    plan = load_plan(tmp_path / "experiments.toml")
    notes = {run.name: run.plan.notes for run in plan.runs}
    assert any("each optimizer step takes 524288 tokens (16384 x 32), 128 per micro-batch" in note
               for note in notes["2x4-acc2048"])  # fmt: skip


def test_the_dist_tutorials_bsz_over_world_size_keeps_its_global_batch(tmp_path: Path) -> None:
    runs, written = init_text(tmp_path, "dist_tuto.py")
    stand_ins = ("per_device_batch_size", "lr")
    assert runs == {
        "1x128": (1, 128, 1, 128, stand_ins), "2x64": (2, 64, 1, 128, stand_ins), "4x32": (4, 32, 1, 128, stand_ins)
    }  # fmt: skip
    assert "`bsz = 128 // size`" in written and "a global batch of 128 samples" in written


def test_the_quickstart_tutorials_module_level_batch_is_the_per_device_batch(tmp_path: Path) -> None:
    runs, written = init_text(tmp_path, "quickstart_ddp.py")
    stand_ins = ("per_device_batch_size", "lr")
    assert runs == {"1x64": (1, 64, 1, 64, stand_ins), "2x64": (2, 64, 1, 128, stand_ins),
                    "4x64": (4, 64, 1, 256, stand_ins)}  # fmt: skip
    assert "batch_size = 64 at line" in written and "not found in the source" not in written


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("from dataclasses import dataclass\n@dataclass\nclass Config:\n    batch_size: int = 48\n", "batch_size: 48"),
        ("def main():\n    batch_size = 48\n    return batch_size\n", "batch_size = 48"),
        ("config = {'batch_size': 48, 'lr': 0.1}\n", "{'batch_size': 48}"),
        ("batch_size, lr = 48, 0.1\n", "batch_size = 48"),
    ],
)
def test_hard_coded_batches_in_every_usual_place_are_read(tmp_path: Path, source: str, where: str) -> None:
    runs, written = init_text(tmp_path, "train.py", source)
    assert runs["1x48"][1] == 48 and where in written


def test_a_world_size_the_budget_does_not_divide_gets_no_run(tmp_path: Path) -> None:
    (derivation,) = derivations(Reader.read((SCRIPTS / "gpt_tokens.py").read_text(encoding="utf-8")))
    assert [derived_per_rank(derivation, size) for size in (1, 2, 3, 16, 32)] == [16, 8, None, 1, None]
    (tuto,) = derivations(Reader.read((SCRIPTS / "dist_tuto.py").read_text(encoding="utf-8")))
    assert (tuto.role, tuto.name, tuto.total, derived_per_rank(tuto, 3)) == ("per_device_batch_size", "bsz", 128, None)
    result = runner.invoke(app, ["init", str(SCRIPTS / "gpt_tokens.py"), "--print", "--nproc-per-node", "2,3"])
    assert result.exit_code == 0 and "no 3-process run" in result.stderr
    assert "2x4-acc8" in result.stdout and "3x" not in result.stdout
