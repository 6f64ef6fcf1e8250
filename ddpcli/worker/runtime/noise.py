"""Measuring |G_small|^2 and |G_big|^2 once per optimizer step, for the gradient noise scale (ddpcli.noise_scale).

No `from __future__ import annotations` here: DDP checks a comm hook's annotations against the real classes.
"""

import dataclasses
import itertools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddpcli import noise_scale as gns
from ddpcli.worker.tensors import squared_norm

GradScale = float | torch.Tensor | Callable[[], float | torch.Tensor]


@dataclasses.dataclass
class _StepNorms:
    """The squared norms one optimizer step produced, kept on the device until the next log reads them."""

    scale_sq: float | torch.Tensor  # the AMP loss scale squared, divided out when read
    small_factor: float = 1.0  # world size 1: puts micro-batch norms into the accumulated gradient's units
    small: list[torch.Tensor] = dataclasses.field(default_factory=list)  # per bucket, or parameter x micro-batch
    big: list[torch.Tensor] = dataclasses.field(default_factory=list)  # one per bucket (DDP) or parameter


class NoiseMeter:
    """Measures |G_small|^2 and |G_big|^2 once per optimizer step for the gradient noise scale.

    With DDP (world size > 1), a communication hook sees each gradient bucket before averaging: the squared
    norm of the local bucket is this rank's small-batch gradient, the squared norm after the average-all-reduce
    the global-batch gradient. Under gradient accumulation the hook fires only on the last micro-batch, whose
    buckets hold the whole accumulated local gradient, so the small batch is per_device_batch_size x
    grad_accum_steps samples (not one micro-batch), and B_big the global batch. At world size 1 with
    accumulation, parameter hooks see each micro-batch's gradient before it is added to .grad: the small batch
    is one micro-batch and the big one the accumulated step. The script's loss normalisation (dividing by the
    accumulation count or not) scales both norms alike, so it cancels in the ratio; the micro-batch norms are
    put in the accumulated gradient's units (x accum_steps^2) so that grad_sq_small and grad_sq_big compare.

    Cost per step: one dot product per bucket before and one after the all-reduce, no host sync and no extra
    collective. The norms stay on the device until ctx.log (which syncs anyway) copies them out in one transfer
    and feeds them, step by step, to this rank's NoiseScaleTracker. Only the small-batch EMA differs between
    ranks; it rides in the log's all-reduce as one more number (averaging each rank's EMA equals the EMA of
    the rank average: the EMA is linear). Under AMP both norms are divided by the loss scale squared, read while
    the step's backward runs. A step with a non-finite norm (an AMP overflow) is left out.
    """

    MAX_PENDING_STEPS = 256  # read out at least this often, for scripts that log rarely

    def __init__(self, beta: float) -> None:
        self.tracker = gns.NoiseScaleTracker(beta)
        self.grad_scale: GradScale | None = None
        self._pending: list[_StepNorms] = []
        self._accumulating: _StepNorms | None = None  # world size 1: the step whose micro-batches run now
        self._params: list[nn.Parameter] = []

    def attach(self, model: nn.Module, grad_scale: GradScale | None) -> None:
        self.grad_scale = grad_scale
        if isinstance(model, DistributedDataParallel):
            model.register_comm_hook(None, self.comm_hook)
            return
        self._params = [param for param in model.parameters() if param.requires_grad]
        for param in self._params:
            param.register_hook(self._micro_batch_hook)

    def comm_hook(
        self, process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """DDP's default average-all-reduce, plus the squared norm of the bucket before and after it."""
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        step = self._begin_step() if bucket.index() == 0 else self._pending[-1]  # buckets run in index order
        step.small.append(squared_norm(buffer))
        buffer.div_(group.size())  # before the sum, as torch's allreduce_hook does (no fp16 overflow)

        def averaged(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            reduced = future.value()[0]
            step.big.append(squared_norm(reduced))  # list.append: safe from gloo's callback threads
            return reduced

        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(averaged)

    def micro_batch_begins(self, micro_index: int, accum_steps: int) -> None:
        if self._params and accum_steps > 1 and micro_index == 0:
            self._accumulating = self._begin_step(small_factor=accum_steps)

    def local_step_ends(self) -> None:
        """World size 1: the step's micro-batches are done; .grad now holds the accumulated gradient."""
        step, self._accumulating = self._accumulating, None
        if step is not None:
            step.big.extend(squared_norm(param.grad) for param in self._params if param.grad is not None)

    def read(self) -> gns.NoiseScaleTracker:
        """This rank's EMAs, including every completed step."""
        self._drain()
        return self.tracker

    def _begin_step(self, small_factor: float = 1.0) -> _StepNorms:
        if len(self._pending) >= self.MAX_PENDING_STEPS:
            self._drain()
        step = _StepNorms(_current_scale(self.grad_scale) ** 2, small_factor)
        self._pending.append(step)
        return step

    def _micro_batch_hook(self, grad: torch.Tensor) -> None:
        if self._accumulating is not None:
            self._accumulating.small.append(squared_norm(grad))

    def _drain(self) -> None:
        """Copy the completed steps' norms to the host in one transfer and feed them to the tracker in order."""
        steps = [step for step in self._pending if step is not self._accumulating]
        self._pending = [step for step in self._pending if step is self._accumulating]
        if not steps:
            return
        values = iter(torch.stack([norm for step in steps for norm in (*step.small, *step.big)]).tolist())
        for step in steps:
            small = sum(itertools.islice(values, len(step.small)))
            big = sum(itertools.islice(values, len(step.big)))
            scale_sq = float(step.scale_sq)
            self.tracker.update(step.small_factor * small / scale_sq, big / scale_sq)


def _current_scale(grad_scale: GradScale | None) -> float | torch.Tensor:
    value = grad_scale() if callable(grad_scale) else grad_scale
    return 1.0 if value is None else value
