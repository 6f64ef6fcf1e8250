"""Measuring |G_small|^2 and |G_big|^2 once per optimizer step, for the gradient noise scale (ddpcli.noise_scale),
when a script asks the runtime helper for it and the observer cannot: a DDP model run without `ddpcli launch` (plain
torchrun) through the observer's comm hook class, and one process through parameter hooks on the micro-batches of
gradient accumulation (which no DDP hook sees). Under `ddpcli launch` a DDP model is the observer's to measure; its
hook hands this meter the reductions before the run's first optimizer step (a fixed-point measurement has none)."""

import dataclasses
import itertools
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddpcli import noise_scale as gns
from ddpcli.worker.observer.hooks import active
from ddpcli.worker.observer.noise import BucketNorms, NoiseWatch, Reduction
from ddpcli.worker.tensors import squared_norm

GradScale = float | torch.Tensor | Callable[[], float | torch.Tensor]


@dataclasses.dataclass
class _StepNorms(Reduction):
    """The squared norms one optimizer step produced, kept on the device until the next log reads them: per bucket
    (DDP, filled by the observer's comm hook class), or per parameter x micro-batch and per parameter (world size 1)."""

    scale_sq: float | torch.Tensor = 1.0  # the AMP loss scale squared, divided out when read
    small_factor: float = 1.0  # world size 1: puts micro-batch norms into the accumulated gradient's units


class NoiseMeter:
    """Measures |G_small|^2 and |G_big|^2 once per optimizer step for the gradient noise scale.

    With DDP (world size > 1), the observer's communication hook class (ddpcli.worker.observer.noise.BucketNorms,
    the one hook that measures) sees each gradient bucket before averaging: the squared norm of the local bucket
    is this rank's small-batch gradient, the squared norm after the average-all-reduce the global-batch gradient;
    each reduction is one optimizer step here, queued with the loss scale of its backward. Under gradient
    accumulation the hook fires only on the last micro-batch, whose buckets hold the whole accumulated local
    gradient, so the small batch is per_device_batch_size x grad_accum_steps samples (not one micro-batch), and
    B_big the global batch. At world size 1 with accumulation, parameter hooks see each micro-batch's gradient
    before it is added to .grad: the small batch is one micro-batch and the big one the accumulated step. The
    script's loss normalisation (dividing by the accumulation count or not) scales both norms alike, so it cancels
    in the ratio; the micro-batch norms are put in the accumulated gradient's units (x accum_steps^2) so that
    grad_sq_small and grad_sq_big compare.

    Cost per step: one dot product per bucket before and one after the all-reduce, no host sync and no extra
    collective. The norms stay on the device until ctx.log copies them out in one transfer and feeds them, step by
    step, to this rank's NoiseScaleTracker. Only the small-batch EMA differs between ranks; the merge averages it
    over ranks (averaging each rank's EMA equals the EMA of the rank average: the EMA is linear). Under AMP both
    norms are divided by the loss scale squared, read while the step's backward runs. A step with a non-finite norm
    (an AMP overflow) is left out.
    """

    MAX_PENDING_STEPS = 256  # read out at least this often, for scripts that log rarely

    def __init__(self, beta: float) -> None:
        self.tracker = gns.NoiseScaleTracker(beta)
        self.grad_scale: GradScale | None = None
        self._pending: list[_StepNorms] = []
        self._accumulating: _StepNorms | None = None  # world size 1: the step whose micro-batches run now
        self._params: list[nn.Parameter] = []
        self._watch: NoiseWatch | None = None  # the observer's, told when this meter measures a step itself
        self._observed_ddp = False  # the observer's hook measures this DDP model; this meter only before any step

    def attach(self, model: nn.Module, grad_scale: GradScale | None) -> None:
        """Measure `model`. A DDP model under `ddpcli launch` is the observer's to measure: its step rows
        carry the norms and the merge computes the noise scale; its hook hands this meter only the reductions
        before the run's first optimizer step, which no step row carries (a fixed-point measurement: backward
        passes, no optimizer), and ctx.log logs their EMAs until a step happens, then none."""
        self.grad_scale = grad_scale
        observer = active()
        self._watch = observer.noise if observer is not None else None
        if isinstance(model, DistributedDataParallel):
            if observer is not None:
                self._observed_ddp = True
                observer.noise.measure_for_runtime(grad_scale, self._begin_step)
                return
            BucketNorms(self._begin_step).attach(model)  # no observer: the same hook class, read by ctx.log
            return
        self._params = [param for param in model.parameters() if param.requires_grad]
        for param in self._params:
            param.register_hook(self._micro_batch_hook)

    def micro_batch_begins(self, micro_index: int, accum_steps: int) -> None:
        if self._params and accum_steps > 1 and micro_index == 0:
            self._accumulating = self._begin_step(small_factor=accum_steps)
            if self._watch is not None:
                self._watch.by_runtime = True  # the end row's noise_scale_by: what no observer hook could measure

    def local_step_ends(self) -> None:
        """World size 1: the step's micro-batches are done; .grad now holds the accumulated gradient."""
        step, self._accumulating = self._accumulating, None
        if step is not None:
            step.big.extend(squared_norm(param.grad) for param in self._params if param.grad is not None)

    def read(self) -> gns.NoiseScaleTracker:
        """This rank's EMAs, including every completed step; none once the observer's step rows carry them."""
        if self._observed_ddp and self._watch is not None and self._watch.stepped:
            self._pending.clear()
            return gns.NoiseScaleTracker(self.tracker.beta)
        self._drain()
        return self.tracker

    def _begin_step(self, small_factor: float = 1.0) -> _StepNorms:
        if len(self._pending) >= self.MAX_PENDING_STEPS:
            self._drain()
        step = _StepNorms(scale_sq=_current_scale(self.grad_scale) ** 2, small_factor=small_factor)
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
