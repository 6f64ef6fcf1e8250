"""The observer's noise bookkeeping (ddpcli.worker.observer.noise.NoiseWatch) without a process group: whose hook
measures, and which loss scale is divided out of the norms."""

from __future__ import annotations

import torch

from ddpcli.worker.observer.noise import BucketNorms, NoiseWatch, Reduction


def measured(small: float, big: float) -> BucketNorms:
    """A hook whose last reduction had these squared norms (as two buckets each)."""
    norms = BucketNorms()
    halves = [torch.tensor(small / 2), torch.tensor(small / 2)]
    norms.current = Reduction(halves, [torch.tensor(big), torch.tensor(0.0)])
    return norms


class Scaler:
    def __init__(self, scale: float) -> None:
        self._scale = torch.tensor(scale)


def test_the_runtime_helpers_loss_scale_is_divided_out_when_no_grad_scaler_carries_one() -> None:
    watch = NoiseWatch(requested=False)
    watch.measure_for_runtime(lambda: 4.0)
    assert watch.requested
    watch.norms = measured(32.0, 16.0)
    small, big = watch.take(scaler=None)
    assert (float(small), float(big)) == (2.0, 1.0)
    watch.norms = measured(32.0, 16.0)
    small, big = watch.take(scaler=Scaler(2.0))  # a GradScaler's own scale wins: it is what the gradients carry
    assert (float(small), float(big)) == (8.0, 4.0)
    assert watch.take(scaler=None) is None  # taken: the next step needs its own reduction


def test_an_incomplete_reduction_is_no_measurement() -> None:
    watch = NoiseWatch(requested=True)
    watch.norms = BucketNorms()
    watch.norms.current = Reduction([torch.tensor(1.0)], [])
    assert watch.take(scaler=None) is None


def test_only_the_observers_own_hook_leaves_the_model_measurable() -> None:
    watch = NoiseWatch(requested=True)
    watch.norms = BucketNorms()
    watch.hook_registered(watch.norms.comm_hook)
    assert not watch.script_comm_hook and watch.by == "observer"
    watch.hook_registered(BucketNorms().comm_hook)  # any other hook, even of this class, is the script's
    assert watch.script_comm_hook
    fresh = NoiseWatch(requested=True)
    assert fresh.by is None
    fresh.by_runtime = True
    assert fresh.by == "runtime"
