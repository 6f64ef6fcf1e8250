"""The gradient noise scale of a DDP model: the one communication hook that measures it, and the observer's
bookkeeping around it (what `noise_scale = true` asks for).

A DDP communication hook sees each gradient bucket before the average-all-reduce (this rank's gradient over its
per_device_batch_size x grad_accum_steps samples: the small batch) and after it (the global batch's gradient: the
big batch). Per optimizer step the observer puts the two squared norms, still tensors on the device, into the
rank's stream; the host averages the small one over ranks, keeps the EMAs and computes B_simple after the run
(ddpcli.rundir.merged_rows, ddpcli.noise_scale). No host sync and no collective beyond the all-reduce DDP does
anyway. A script that asks the runtime helper for the noise scale of its DDP model gets this measurement too: under
`ddpcli launch` the helper asks the observer (NoiseWatch.measure_for_runtime), and without an observer its
NoiseMeter (ddpcli.worker.runtime.noise) registers this same hook class itself. A script that measures at a fixed
point (backward passes, no optimizer step) gives the observer no step to put the norms in: until the run's first
optimizer step the observer's hook hands each reduction to the helper's queue as well, and ctx.log logs their EMAs
(as the helper does without an observer); from the first step on the step rows carry them and the helper logs none.

No `from __future__ import annotations` here: DDP checks a comm hook's annotations against the real classes.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddpcli.worker.tensors import squared_norm


@dataclasses.dataclass
class Reduction:
    """One all-reduce of every bucket (one backward that synchronised): each bucket's squared norm before and after
    averaging, device tensors appended as the buckets go (the after-norms from gloo's callback threads)."""

    small: list[torch.Tensor] = dataclasses.field(default_factory=list)
    big: list[torch.Tensor] = dataclasses.field(default_factory=list)

    def complete(self) -> bool:
        return bool(self.small) and len(self.big) == len(self.small)


class BucketNorms:
    """The comm hook: DDP's default average-all-reduce plus the squared norm of each bucket before and after it.

    A reduction starts at bucket 0 (DDP reduces buckets in index order); `new_reduction` makes its record (the
    runtime's keeps the loss scale of that step and queues it). The observer takes only the last reduction before
    an optimizer step, which is the whole accumulated gradient when the script skips the others with no_sync()."""

    def __init__(self, new_reduction: Callable[[], Reduction] = Reduction) -> None:
        self.new_reduction = new_reduction
        self.current: Reduction | None = None

    def attach(self, model: DistributedDataParallel) -> None:
        model.register_comm_hook(None, self.comm_hook)

    def comm_hook(
        self, process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """Divide, then sum, as torch's allreduce_hook does (no fp16 overflow), measuring on either side."""
        group = process_group if process_group is not None else dist.group.WORLD
        if bucket.index() == 0 or self.current is None:
            self.current = self.new_reduction()
        reduction = self.current
        buffer = bucket.buffer()
        reduction.small.append(squared_norm(buffer))
        buffer.div_(group.size())

        def averaged(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            reduced = future.value()[0]
            reduction.big.append(squared_norm(reduced))  # list.append: safe from gloo's callback threads
            return reduced

        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(averaged)

    def take(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The last reduction's |G_small|^2 and |G_big|^2 as device tensors (no sync); None when none completed."""
        reduction, self.current = self.current, None
        if reduction is None or not reduction.complete():
            return None
        return torch.stack(reduction.small).sum(), torch.stack(reduction.big).sum()


class NoiseWatch:
    """Whether and by whom a run's noise scale is measured: the observer hooks the DDP model at its first training
    forward, late enough for a script (or Lightning, accelerate) to have registered a comm hook of its own, which
    then wins."""

    def __init__(self, requested: bool) -> None:
        self.requested = requested
        self.script_comm_hook = False  # the script registered a comm hook of its own (nothing is measured)
        self.by_runtime = False  # the runtime helper measures (one process: accumulation's micro-batches, no DDP)
        self.loss_scale: Any = None  # what the script told the runtime helper its loss is multiplied by
        self.norms: BucketNorms | None = None  # the observer's own hook, once attached
        self.stepless: Callable[[], Reduction] | None = None  # the helper's queue, for reductions before any step
        self.stepped = False  # an optimizer step took (or could have taken) a reduction: step rows carry them

    @property
    def by(self) -> str | None:
        """The end row's `noise_scale_by`."""
        return "observer" if self.norms is not None else "runtime" if self.by_runtime else None

    def measure_for_runtime(self, loss_scale: Any, stepless: Callable[[], Reduction] | None = None) -> None:
        """The runtime helper was asked for the noise scale of its DDP model (`runtime.init(noise_scale=True)`, or
        the run's flag): the observer measures it, whatever the run's flag said. loss_scale (a number, a tensor or
        a callable such as `scaler.get_scale`, from `ctx.wrap(grad_scale=...)`) is divided out where no GradScaler
        the observer saw carries the scale. stepless makes the record of each reduction before the run's first
        optimizer step, queued by the helper: a fixed-point measurement has no step rows to carry its norms."""
        self.requested = True
        self.loss_scale = loss_scale
        self.stepless = stepless

    def new_reduction(self) -> Reduction:
        """The record of a reduction starting: in the helper's queue too while no optimizer step has happened."""
        return self.stepless() if self.stepless is not None and not self.stepped else Reduction()

    def hook_registered(self, hook: Any) -> None:
        """A comm hook is being registered on a DDP model (the observer's own passes through here too)."""
        if self.norms is None or hook != self.norms.comm_hook:
            self.script_comm_hook = True

    def model_forward(self, model: Any) -> None:
        """A top-level module's training forward: a DDP model gets the hook, unless one is there already."""
        if not self.requested or self.norms is not None or not isinstance(model, DistributedDataParallel):
            return
        if self.script_comm_hook or self.by_runtime:
            return
        self.norms = BucketNorms(self.new_reduction)  # set first: the registration passes through hook_registered
        try:
            self.norms.attach(model)
        except Exception:
            self.norms = None
            raise

    def take(self, scaler: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        """This step's squared norms; under a GradScaler the buckets held gradients x scale, so both are divided by
        scale^2 (the scale tensor is read now, on the device, before the scaler's update changes it in place)."""
        self.stepped = True
        norms = self.norms.take() if self.norms is not None else None
        if norms is None:
            return None
        small, big = norms
        scale = getattr(scaler, "_scale", None) if scaler is not None else None
        if not isinstance(scale, torch.Tensor) and self.loss_scale is not None:
            scale = self.loss_scale() if callable(self.loss_scale) else self.loss_scale
        if not isinstance(scale, torch.Tensor | float | int) or isinstance(scale, bool):
            return small, big
        factor = torch.as_tensor(scale).detach().reshape(()).float().to(small.device).square()
        return small / factor, big / factor
