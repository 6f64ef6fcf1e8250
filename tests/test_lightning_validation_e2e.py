"""Lightning with a validation loop and its default sanity check (issue 15, item 3 of "Why"): the sanity check
leaves the DDP wrapper in eval mode when training starts, and validation batches run between training steps. The
observer must still find the model and count every training sample, and only those."""

from __future__ import annotations

from typing import Any

import pytest

from ddpcli.rundir.slowness import SLOWNESS_CODES
from tests.test_observe_e2e import SCRIPTS, codes, launched_runs

pytestmark = pytest.mark.e2e

ARGS = '["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}", "--lr", "{lr}", ' \
    '"--steps", "{total_steps}", "--validate"]'  # fmt: skip
EXPERIMENTS = f"""
[defaults]
script = "{SCRIPTS / "lightning_train.py"}"
args = {ARGS}
per_device_batch_size = 8
lr = 0.05
max_steps = 6
dataset_size = 512
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "lightning-1"

[[experiments]]
name = "lightning-2x2"
nproc_per_node = 2
grad_accum_steps = 2
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launched_runs(tmp_path_factory.mktemp("lightning_validation"), EXPERIMENTS)


@pytest.mark.parametrize(("name", "world", "accumulation"), [("lightning-1", 1, 1), ("lightning-2x2", 2, 2)])
def test_the_true_batch_and_every_training_sample(
    runs: dict[str, dict[str, Any]], name: str, world: int, accumulation: int
) -> None:
    record = runs[name]["record"]
    assert record["status"] == "completed", record["failed_ranks"]
    observed = record["observed"]
    assert observed["per_device_batch_size"] == 8
    assert observed["grad_accum_steps"] == accumulation
    assert observed["global_batch_size"] == 8 * accumulation * world
    assert observed["data_parallel_size"] == world
    assert observed["optimizer_steps"] == 6
    assert observed["samples_seen"] == 6 * 8 * accumulation * world
    assert observed["sampler"] == ("DistributedSampler" if world > 1 else "RandomSampler")  # not the validation's
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == []  # speed on a shared CPU aside
