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


def test_reductions_before_the_first_optimizer_step_also_go_to_the_helpers_queue() -> None:
    """A fixed-point script (backward passes, no optimizer) has no step row to carry the norms: until a step the
    helper queues each reduction too (its ctx.log logs the EMAs); from the first step on only the observer has it."""
    queued: list[Reduction] = []

    def queue() -> Reduction:
        queued.append(Reduction())
        return queued[-1]

    watch = NoiseWatch(requested=False)
    watch.measure_for_runtime(None, queue)
    first = watch.new_reduction()
    assert queued == [first]
    watch.norms = measured(4.0, 2.0)
    assert watch.take(scaler=None) is not None and watch.stepped
    assert watch.new_reduction() is not queued[-1] and len(queued) == 1
    assert NoiseWatch(requested=True).new_reduction() is not None  # the observer alone: records of its own
