"""`ddpcli compare` on run directories made by real `ddpcli launch` runs of the bundled example (gloo, CPU).

The claim ddpcli exists to prove: 4 processes x 16 end with the parameters of 1 process x 64 when BatchNorm
statistics are cross-process, and differ visibly when each process normalises its own 16 samples.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import launched_root

pytestmark = pytest.mark.e2e

FILE = """
[defaults]
module = "ddpcli.examples.regression"
args = ["--steps", "{total_steps}", "--batch-size", "{per_device_batch_size}", "--lr", "{lr}",
        "--warmup", "{warmup_steps}", "--dataset-size", "{dataset_size}", "--seed", "{seed}", "--batchnorm",
        "--no-noise-scale"]
dataset_size = 1024
max_steps = 10
timeout_s = 180
env = { OMP_NUM_THREADS = "1" }

[baseline]
name = "1x16"
per_device_batch_size = 16
lr = 0.05
warmup_steps = 4

[[experiments]]
name = "1x64"
per_device_batch_size = 64

[[experiments]]
name = "4x16-syncbn"
nproc_per_node = 4
args = ["--steps", "{total_steps}", "--batch-size", "{per_device_batch_size}", "--lr", "{lr}",
        "--warmup", "{warmup_steps}", "--dataset-size", "{dataset_size}", "--seed", "{seed}", "--batchnorm",
        "--sync-bn", "--no-noise-scale"]

[[experiments]]
name = "4x16-bn"
nproc_per_node = 4
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return launched_root(tmp_path_factory.mktemp("compare-e2e"), FILE)


def compare(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpcli", "compare", *args], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_verdicts_on_real_runs(runs: Path) -> None:
    result = compare(runs, "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert next(iter(rows)) == "1x16" and set(rows) == {"1x16", "1x64", "4x16-syncbn", "4x16-bn"}
    synced, plain = rows["4x16-syncbn"], rows["4x16-bn"]
    assert (synced["equivalent_to"], synced["verdict"]) == ("1x64", "equivalent")
    assert synced["max_param_diff"] <= 1e-5
    assert (plain["equivalent_to"], plain["verdict"]) == ("1x64", "diverged")
    assert plain["max_param_diff"] > 1e-3
    assert rows["1x16"]["verdict"] is None and rows["1x64"]["verdict"] is None
    # Same global batch, lr and steps: both 4x16 runs saw 640 samples, 4 times the baseline's 160.
    assert {name: row["samples_seen"] for name, row in rows.items()} == {
        "1x16": 160, "1x64": 640, "4x16-syncbn": 640, "4x16-bn": 640
    }  # fmt: skip
    assert (synced["world_size"], synced["global_batch_size"], synced["lr"]) == (4, 64, pytest.approx(0.2))
    assert synced["scaling_efficiency"] == pytest.approx(synced["speedup"] / 4)
    # The baseline's loss at its own final sample count is its final loss.
    assert rows["1x16"]["loss_at_baseline_samples"] == pytest.approx(rows["1x16"]["final_loss"])
    assert rows["1x16"]["speedup"] == pytest.approx(1.0)


def test_table_explains_the_divergence(runs: Path) -> None:
    result = compare(runs)
    assert result.returncode == 0, result.stderr
    assert "equivalent" in result.stdout and "diverged" in result.stdout
    assert "BatchNorm" in result.stdout  # the note names the likely cause


def test_csv_and_plot(runs: Path) -> None:
    pytest.importorskip("matplotlib")
    result = compare(runs, "--csv", "rows.csv", "--plot", "loss.png")
    assert result.returncode == 0, result.stderr
    with (runs / "rows.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    verdicts = {row["name"]: row["verdict"] for row in rows}
    assert verdicts == {"1x16": "", "1x64": "", "4x16-syncbn": "equivalent", "4x16-bn": "diverged"}
    assert (runs / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
