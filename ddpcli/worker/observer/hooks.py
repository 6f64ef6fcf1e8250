"""The observer: torch's public hooks where they exist, thin wrappers elsewhere, and nothing that changes training.

Per optimizer step (a global optimizer step hook, or a step the script put on the instance: optimizers.py): the
micro-batches since the last step (backward passes, through a wrapper around torch.autograd.backward, which
Tensor.backward, Lightning and accelerate all end in, that reached a model's forward), the samples that fed them
(the leading dimension of the batch of the forwards a backward reached, whatever the model's training flag:
evaluation and forwards no backward reached do not count; forwards.py), the loss that was back-propagated (with
an AMP GradScaler's scale taken out), the lr of each param group, the time. Per run: DDP and its options, the
training DataLoaders' samplers and their epochs, BatchNorm layers, AMP, a fingerprint of the first training
batches (to tell whether ranks got different samples), a digest of the parameters before and after the first step
and at the end (parallel.py), and at the end, from rank 0, the parameters the optimizer updated (ending.py).

Costs: values stay on the device (ddpcli.worker.stream reads them in chunks); no collective, no synchronisation
per step. Until the first optimizer step every module call goes through a thin wrapper, to find the top-level
modules (the model, whatever wraps it: models.py); after it only those have a forward hook. Any failure inside
the observer is caught, recorded once as an `observer_error` row, and training goes on.
"""

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.worker.observer.collectives import ScriptCollectives
from ddpcli.worker.observer.ending import end_rows, run_row, save_params
from ddpcli.worker.observer.forwards import Counts, ForwardTracker
from ddpcli.worker.observer.habits import ScriptHabits
from ddpcli.worker.observer.hand_sgd import HandSteps
from ddpcli.worker.observer.models import FINGERPRINT_BATCHES, TopModules
from ddpcli.worker.observer.noise import NoiseWatch
from ddpcli.worker.observer.optimizers import replaces, watch_instance_steps
from ddpcli.worker.observer.outside import OutsideWatch
from ddpcli.worker.observer.parallel import params_row
from ddpcli.worker.observer.reading import (
    loader_info,
    sampler_epoch,
    snapshot,
    wants_noise_scale,
    wrap,
)
from ddpcli.worker.observer.sequence import BatchLayout
from ddpcli.worker.observer.stacks import StackWatch
from ddpcli.worker.observer.timing import StepTiming
from ddpcli.worker.stream import RankStream, rank_stream

_active: "Observer | None" = None


def active() -> "Observer | None":
    """The observer of this process, if `ddpcli launch` installed one (the runtime helper tells it its steps)."""
    return _active


class Observer:
    @classmethod
    def install(cls) -> "Observer | None":
        global _active
        stream = rank_stream()
        if stream is None:  # not under ddpcli launch: nowhere to write
            return None
        _active = cls(stream)
        try:
            _active._patch()
        except Exception as error:  # the script must run all the same
            _active.error(f"install: {type(error).__name__}: {error}")
        return _active

    def __init__(self, stream: RankStream) -> None:
        self.stream = stream
        self.rank = int(os.environ.get("RANK", "0"))
        self.run_dir = Path(os.environ["DDPCLI_RUN_DIR"])
        self.start = time.perf_counter()
        self.step = 0
        self.forwards = ForwardTracker(self.error)  # which forwards fed each backward: micro-batches, samples
        self.hooked_steps = 0  # optimizer steps seen through torch's hooks
        self.extra_optimizers: set[int] = set()  # optimizers over other parameters than the first (a GAN's)
        self.loss: torch.Tensor | None = None
        self.unscaled: dict[int, torch.Tensor] = {}  # id(scaler.scale(loss)) -> loss, until its backward
        self.optimizers: list[torch.optim.Optimizer] = []  # strong references: the final parameters live in them
        self.models = TopModules(self)  # which modules are the model; their forwards (models.py)
        self.fingerprints = 0
        self.loaders: dict[int, dict[str, Any]] = {}
        self.forwards.layout = BatchLayout(self.loaders)  # sequence-first models: the batch in dim 1 (sequence.py)
        self.last_loader: int | None = None
        self.amp: str | None = None
        self.ddp: list[dict[str, Any]] = []
        self.noise = NoiseWatch(wants_noise_scale())  # the noise scale's comm hook, or why there is none (noise.py)
        self.scaler: Any = None  # the GradScaler whose scale the step's gradients carry
        self.errors: set[str] = set()
        self.finished = False
        self.stepped = False  # the first optimizer step happened (its parameters were digested)
        self.habits = ScriptHabits(self.run_dir, lambda: self.stepped)
        self.timing = StepTiming(self)  # where each step's time goes (timing.py)
        self.collectives = ScriptCollectives(self)  # the script's own dist.all_reduce ... (collectives.py)
        self.stacks = StackWatch()  # the framework that stepped the optimizer and schedulers (stacks.py)
        self.outside = OutsideWatch(self.stream.add, self.stream.flush, self.run_dir)  # processes, files
        self.hand = HandSteps(self)  # steps of a hand-written update, no torch.optim (hand_sgd.py)
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.stream.add({"kind": "start", "rank": self.rank, "restart": restart, "pid": os.getpid()})

    # -- installing ----------------------------------------------------------------------------------------------

    def _patch(self) -> None:
        register_optimizer_step_pre_hook(self._guard(self._before_step))
        register_optimizer_step_post_hook(self._guard(self._after_step))
        self.models.install()
        wrap(torch.autograd, "backward", before=self._guard(self._before_backward),
             after=self._guard(self._after_backward))  # fmt: skip
        wrap(torch.amp.GradScaler, "scale", after=self._guard(self._scaled))
        wrap(DataLoader, "__iter__", after=self._guard(self._loader_iter))
        wrap(_BaseDataLoaderIter, "__next__", after=self._guard(self._loader_next))
        wrap(DistributedDataParallel, "__init__", after=self._guard(self._ddp_built))
        wrap(DistributedDataParallel, "register_comm_hook", before=self._guard(self._comm_hook_registered))
        self.habits.patch(self._guard)
        self.stacks.install(self._guard)
        self.outside.install(self._guard)
        self.timing.install()
        self.collectives.install()

    def _guard(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Observation must never break training: an error is recorded once per kind and otherwise ignored."""

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as error:
                self.error(f"{fn.__name__}: {type(error).__name__}: {error}")
                return None

        return guarded

    def error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.add(message)
            self.stream.add({"kind": "error", "message": message[:500]})

    # -- backward and step --------------------------------------------------------------------------------------

    def _before_backward(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        """A backward of tensors that need gradients: the forwards it reaches are counted (forwards.py); the loss is
        the sum of the scalars back-propagated (`torch.autograd.backward([l1, l2])`)."""
        given = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
        given = [tensor for tensor in given if isinstance(tensor, torch.Tensor) and tensor.requires_grad]
        if not given:
            return
        watch_instance_steps(self.habits.optimizers, self)
        self.hand.check()  # a hand-written update since the last backward is a step (before this one's counts)
        self.forwards.backward_started()
        for tensor in given:
            if tensor.numel() == 1:
                loss = self.unscaled.pop(id(tensor), tensor).detach().reshape(())
                self.loss = loss if self.loss is None else self.loss + loss
        self.unscaled.clear()

    def _after_backward(self, *args: Any, **kwargs: Any) -> None:
        self.forwards.backward_ended()
        self.hand.backward_ended()

    def _scaled(self, result: Any, scaler: Any, outputs: Any) -> None:
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and result is not outputs:
            self.unscaled[id(result)] = outputs
            self.scaler = scaler
            if self.amp is None or not self.amp.endswith("GradScaler"):
                self.amp = f"{self.amp or 'fp16'} + GradScaler"

    def _other_optimizer_stepped(self) -> None:
        """An optimizer over other parameters stepped (a GAN's generator after its discriminator): the backward
        passes since the last step were for it, so they are not micro-batches of the next counted step."""
        self.forwards.take()
        self.loss = None
        self.unscaled.clear()

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.optimizers:  # the run's first optimizer step: the parameters are still the initial ones
            self.stream.add(params_row([optimizer], self.models.modules(), "initial"))

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.hooked_steps += 1
        if not self.optimizers:
            self.optimizers.append(optimizer)
        elif optimizer is not self.optimizers[0]:
            if all(optimizer is not known for known in self.optimizers):
                self.optimizers.append(optimizer)
            if not replaces(optimizer, self.optimizers[0], self.extra_optimizers):
                self._other_optimizer_stepped()
                return  # the first optimizer that steps defines the optimizer step (a GAN's second one is extra)
            self.optimizers.remove(optimizer)  # a fresh optimizer over the same parameters (unfreezing) took over
            self.optimizers.insert(0, optimizer)
        self.step += 1
        counts = self.forwards.take()
        row = {
            "kind": "step",
            "step": self.step,
            "micro_batches": counts.micro_batches,
            "samples": counts.samples if counts.micro_batches else 0,
            "loss": self.loss,
            "lr": [snapshot(group["lr"]) for group in optimizer.param_groups],
            "time": round(time.perf_counter() - self.start, 6),
        }  # fmt: skip
        if counts.tokens and counts.micro_batches:
            row["tokens"] = counts.tokens  # token ids of [B, T] integer batches (a language model's)
        if counts.output_loss is not None:
            row["output_loss"] = counts.output_loss  # the model's own loss: the script may scale what it back-props
        norms = self.noise.take(self.scaler)
        if norms is not None:
            row["sq_small"], row["sq_big"] = norms
        self.stream.add(row)
        self._trained_on(counts)
        if not self.stepped:  # ranks that average their gradients hold the same parameters from here on
            self.stepped = True
            self.stream.add(params_row(self.optimizers, self.models.modules(), "first_step"))
        self.loss = None
        if self.models.discovering and self.models.roots:  # a step before any training forward finds nothing
            self._describe_run(optimizer)
            self.models.switch_to_root_hooks()
        # last: the observer's own one-off work at step 1 stays out of the timed steps
        self.timing.step_done(counts.micro_batches)

    def step_starting(self, optimizer: torch.optim.Optimizer) -> None:
        """A step replaced on the instance is about to run (optimizers.py): torch's hooks may not see it."""
        self._guard(self._before_step)(optimizer, (), {})

    def step_without_hooks(self, optimizer: torch.optim.Optimizer) -> None:
        self._guard(self._after_step)(optimizer, (), {})

    def _trained_on(self, counts: Counts) -> None:
        """The loaders and first batches of the forwards a backward reached: the training ones."""
        for loader in counts.loaders:
            if loader in self.loaders:
                self.loaders[loader]["training"] = True
        for record in self.forwards.first_trained:
            if self.fingerprints < FINGERPRINT_BATCHES:
                self.fingerprints += 1
                self.stream.add({"kind": "fingerprint", "index": self.fingerprints, "values": record.fingerprint})
        self.forwards.first_trained.clear()

    def resumed_at(self, step: int) -> None:
        """The runtime helper resumed from a checkpoint: the next optimizer step is step + 1."""
        self.step = step
        self.stream.add({"kind": "resume", "step": step})

    # -- data -----------------------------------------------------------------------------------------------------

    def _loader_iter(self, iterator: Any, loader: DataLoader) -> None:
        info = self.loaders.setdefault(id(loader), loader_info(loader))
        info["iterations"] += 1
        info["epochs"].append(sampler_epoch(loader))
        iterator._ddpcli_loader = id(loader)

    def _loader_next(self, batch: Any, iterator: Any) -> None:
        self.last_loader = getattr(iterator, "_ddpcli_loader", None)
        self.forwards.drew(batch)

    # -- DDP --------------------------------------------------------------------------------------------------------

    def _ddp_built(self, result: Any, model: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        options = {key: value for key, value in kwargs.items() if isinstance(value, bool | int | float | str)}
        self.ddp.append(options)

    def _comm_hook_registered(self, model: DistributedDataParallel, state: Any, hook: Any) -> None:
        self.noise.hook_registered(hook)

    # -- the run as a whole -----------------------------------------------------------------------------------------

    def _describe_run(self, optimizer: torch.optim.Optimizer) -> None:
        self.stream.add(run_row(self, optimizer))

    def finish(self) -> None:
        """Last rows (loaders, AMP, hooks, parameters), rank 0's final parameters, then the file is closed."""
        if self.finished:
            return
        self.finished = True
        try:
            self._guard(self.hand.check)()  # the last hand-written update
            if self.models.discovering and self.optimizers:  # it stepped, but no training forward was ever seen
                self._describe_run(self.optimizers[0])
            self.timing.finish()
            for row in end_rows(self):
                self.stream.add(row)
            save_params(self.optimizers, self.run_dir / PARAMS_FILE, self.rank)
        except Exception as error:
            self.error(f"finish: {type(error).__name__}: {error}")
        self.stream.close()
