"""Lightning with a validation loop and its default sanity check (issue 15, item 3 of "Why"): the sanity check
leaves the DDP wrapper in eval mode when training starts, and validation batches run between training steps. The
observer must still find the model and count every training sample, and only those."""

from __future__ import annotations

from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.helpers import codes, launch
from tests.sweeps import FRAMEWORKS

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Lightning's runs of the frameworks sweep (tests/sweeps.py), which train with --validate."""
    return launch(tmp_path_factory, FRAMEWORKS).runs()


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
