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
modules (the model, whatever wraps it); after it only those modules have a forward hook. Any failure inside
the observer is caught, recorded once as an `observer_error` row, and training goes on.
"""

import functools
import os
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.worker.observer.attribution import skip_in_warnings
from ddpcli.worker.observer.ending import end_rows, run_row, save_params
from ddpcli.worker.observer.forwards import Counts, ForwardTracker
from ddpcli.worker.observer.habits import ScriptHabits
from ddpcli.worker.observer.noise import BucketNorms
from ddpcli.worker.observer.optimizers import replaces, watch_instance_steps
from ddpcli.worker.observer.parallel import params_row
from ddpcli.worker.observer.reading import (
    fingerprint,
    first_tensor,
    loader_info,
    sampler_epoch,
    snapshot,
    tensors,
    wants_noise_scale,
    wrap,
)
from ddpcli.worker.observer.timing import StepTiming
from ddpcli.worker.stream import RankStream, rank_stream

FINGERPRINT_BATCHES = 4

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
        self.measure_noise = wants_noise_scale()
        self.start = time.perf_counter()
        self.step = 0
        self.forwards = ForwardTracker(self.error)  # which forwards fed each backward: micro-batches, samples
        self.hooked_steps = 0  # optimizer steps seen through torch's hooks
        self.extra_optimizers: set[int] = set()  # optimizers over other parameters than the first (a GAN's)
        self.loss: torch.Tensor | None = None
        self.unscaled: dict[int, torch.Tensor] = {}  # id(scaler.scale(loss)) -> loss, until its backward
        self.optimizers: list[torch.optim.Optimizer] = []  # strong references: the final parameters live in them
        self.roots: dict[int, weakref.ref[nn.Module]] = {}
        self.discovering = True  # until the first step: every module call is seen, to find the top-level ones
        self.depth = 0
        self.fingerprints = 0
        self.loaders: dict[int, dict[str, Any]] = {}
        self.last_loader: int | None = None
        self.amp: str | None = None
        self.ddp: list[dict[str, Any]] = []
        self.script_comm_hook = False  # the script registered a comm hook of its own (the noise scale is not measured)
        self.runtime_noise = False  # the runtime helper's NoiseMeter measures the noise scale (no double measurement)
        self.noise: BucketNorms | None = None
        self.scaler: Any = None  # the GradScaler whose scale the step's gradients carry
        self.errors: set[str] = set()
        self.finished = False
        self.stepped = False  # the first optimizer step happened (its parameters were digested)
        self.habits = ScriptHabits(self.run_dir, lambda: self.stepped)
        self.timing = StepTiming(self)  # where each step's time goes (timing.py)
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.stream.add({"kind": "start", "rank": self.rank, "restart": restart, "pid": os.getpid()})

    # -- installing ----------------------------------------------------------------------------------------------

    def _patch(self) -> None:
        register_optimizer_step_pre_hook(self._guard(self._before_step))
        register_optimizer_step_post_hook(self._guard(self._after_step))
        self._original_call = nn.Module.__call__
        nn.Module.__call__ = self._discovering_call()
        wrap(torch.autograd, "backward", before=self._guard(self._before_backward),
             after=self._guard(self.forwards.backward_ended))  # fmt: skip
        wrap(torch.amp.GradScaler, "scale", after=self._guard(self._scaled))
        wrap(DataLoader, "__iter__", after=self._guard(self._loader_iter))
        wrap(_BaseDataLoaderIter, "__next__", before=self._guard(self._loader_next))
        wrap(DistributedDataParallel, "__init__", after=self._guard(self._ddp_built))
        wrap(DistributedDataParallel, "register_comm_hook", before=self._guard(self._comm_hook_registered))
        self.habits.patch(self._guard)
        self.timing.install()

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

    # -- forward: which modules are the model, how many samples reach it -----------------------------------------

    def _discovering_call(self) -> Callable[..., Any]:
        """nn.Module.__call__ until the first optimizer step: a call at depth 0 with grad enabled is a top-level
        module, whatever its training flag (a backward decides whether it trained: forwards.py).
        (A plain function, not a bound method: it must bind to each module as __call__ does.)"""
        original, before, after = self._original_call, self._guard(self._root_called), self._guard(self._root_forward)

        def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            top = self.depth == 0 and torch.is_grad_enabled()
            if top:
                before(module, args, kwargs)
            self.depth += 1
            try:
                output = original(module, *args, **kwargs)
            finally:
                self.depth -= 1
            if top:
                after(module, args, kwargs, output)
            return output

        skip_in_warnings(call)
        return call

    def _root_called(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before a top-level call's forward. One without parameters (a loss module, `criterion(logits.view(-1, V),
        ...)`) is not the model: its leading dimension is no batch size."""
        if self.forwards.in_backward:  # activation checkpointing recomputes blocks inside the backward: no model
            return
        if id(module) not in self.roots and next(module.parameters(), None) is not None:
            self.roots[id(module)] = weakref.ref(module)
        if self.measure_noise and self.noise is None and isinstance(module, DistributedDataParallel):
            self._measure_noise(module)
        if id(module) in self.roots:
            self.timing.forward(module, first_tensor((args, kwargs)))

    def _root_pre_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After the first step: the start of a forward of the model, for the step's time breakdown."""
        if torch.is_grad_enabled() and not self.forwards.in_backward:
            self.timing.forward(module, first_tensor((args, kwargs)))

    def _root_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if id(module) not in self.roots or not torch.is_grad_enabled() or self.forwards.in_backward:
            return
        batch = first_tensor((args, kwargs))
        device = batch.device.type if batch is not None else "cpu"
        if self.amp is None and torch.is_autocast_enabled(device):
            self.amp = f"autocast {str(torch.get_autocast_dtype(device)).removeprefix('torch.')}"
        wanted = self.fingerprints + len(self.forwards.first_trained) < FINGERPRINT_BATCHES
        prints = (lambda: fingerprint(tensors((args, kwargs)))) if wanted and batch is not None else None
        self.forwards.forward(module, args, kwargs, output, self.last_loader, prints)

    def _switch_to_root_hooks(self) -> None:
        """After the first step the top-level modules are known: hook them alone from now on (cheaper)."""
        nn.Module.__call__ = self._original_call
        self.discovering = False
        for ref in self.roots.values():
            module = ref()
            if module is not None:
                module.register_forward_pre_hook(self._guard(self._root_pre_forward), with_kwargs=True)
                module.register_forward_hook(self._guard(self._root_forward), with_kwargs=True)

    # -- backward and step --------------------------------------------------------------------------------------

    def _before_backward(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        """A backward of tensors that need gradients: the forwards it reaches are counted (forwards.py); the loss is
        the sum of the scalars back-propagated (`torch.autograd.backward([l1, l2])`)."""
        given = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
        given = [tensor for tensor in given if isinstance(tensor, torch.Tensor) and tensor.requires_grad]
        if not given:
            return
        watch_instance_steps(self.habits.optimizers, self)
        self.forwards.backward_started()
        for tensor in given:
            if tensor.numel() == 1:
                loss = self.unscaled.pop(id(tensor), tensor).detach().reshape(())
                self.loss = loss if self.loss is None else self.loss + loss
        self.unscaled.clear()

    def _scaled(self, result: Any, scaler: Any, outputs: Any) -> None:
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and result is not outputs:
            self.unscaled[id(result)] = outputs
            self.scaler = scaler
            if self.amp is None or not self.amp.endswith("GradScaler"):
                self.amp = f"{self.amp or 'fp16'} + GradScaler"

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.optimizers:  # the run's first optimizer step: the parameters are still the initial ones
            self.stream.add(params_row([optimizer], self._modules(), "initial"))

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.hooked_steps += 1
        if not self.optimizers:
            self.optimizers.append(optimizer)
        elif optimizer is not self.optimizers[0]:
            if all(optimizer is not known for known in self.optimizers):
                self.optimizers.append(optimizer)
            if not replaces(optimizer, self.optimizers[0], self.extra_optimizers):
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
        if counts.output_loss is not None:
            row["output_loss"] = counts.output_loss  # the model's own loss: the script may scale what it back-props
        norms = self.noise.take() if self.noise is not None else None
        if norms is not None:
            row["sq_small"], row["sq_big"] = self._unscaled_norms(*norms)
        self.stream.add(row)
        self._trained_on(counts)
        if not self.stepped:  # ranks that average their gradients hold the same parameters from here on
            self.stepped = True
            self.stream.add(params_row(self.optimizers, self._modules(), "first_step"))
        self.loss = None
        if self.discovering and self.roots:  # a step before any training forward (a warm-up call) finds nothing
            self._describe_run(optimizer)
            self._switch_to_root_hooks()
        self.timing.step_done()  # last: the observer's own one-off work at step 1 stays out of the timed steps

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

    def _unscaled_norms(self, small: torch.Tensor, big: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Under a GradScaler the buckets held gradients x scale: divide the squared norms by scale^2 (the scale
        tensor is read now, on the device, before the scaler's update changes it in place)."""
        scale = getattr(self.scaler, "_scale", None) if self.scaler is not None else None
        if not isinstance(scale, torch.Tensor):
            return small, big
        factor = scale.detach().reshape(()).float().to(small.device).square()
        return small / factor, big / factor

    def resumed_at(self, step: int) -> None:
        """The runtime helper resumed from a checkpoint: the next optimizer step is step + 1."""
        self.step = step
        self.stream.add({"kind": "resume", "step": step})

    def log(self, step: int, scalars: dict[str, Any]) -> None:
        """The runtime helper's ctx.log: kept beside the observed step (tensors stay on the device)."""
        self.stream.add({"kind": "log", "step": step, **scalars})

    # -- data -----------------------------------------------------------------------------------------------------

    def _loader_iter(self, iterator: Any, loader: DataLoader) -> None:
        info = self.loaders.setdefault(id(loader), loader_info(loader))
        info["iterations"] += 1
        info["epochs"].append(sampler_epoch(loader))
        iterator._ddpcli_loader = id(loader)

    def _loader_next(self, iterator: Any) -> None:
        self.last_loader = getattr(iterator, "_ddpcli_loader", None)

    # -- DDP --------------------------------------------------------------------------------------------------------

    def _ddp_built(self, result: Any, model: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        options = {key: value for key, value in kwargs.items() if isinstance(value, bool | int | float | str)}
        self.ddp.append(options)

    def _comm_hook_registered(self, model: DistributedDataParallel, state: Any, hook: Any) -> None:
        from ddpcli.worker.runtime.noise import NoiseMeter

        if self.noise is not None and hook == self.noise.comm_hook:
            return
        if isinstance(getattr(hook, "__self__", None), NoiseMeter):
            self.runtime_noise = True  # the runtime helper measures and logs the noise scale itself
        else:
            self.script_comm_hook = True

    def _measure_noise(self, model: DistributedDataParallel) -> None:
        """At the DDP model's first training forward, before its first backward: late enough for a script (or
        Lightning, accelerate, the runtime helper) to have registered its own hook, which then wins."""
        if self.script_comm_hook or self.runtime_noise:
            return
        self.noise = BucketNorms()  # set first: the registration passes through _comm_hook_registered
        try:
            self.noise.attach(model)
        except Exception:
            self.noise = None
            raise

    # -- the run as a whole -----------------------------------------------------------------------------------------

    def _modules(self) -> list[nn.Module]:
        """The top-level modules a backward reached (all of them until one did)."""
        modules = [module for ref in self.roots.values() if (module := ref()) is not None]
        trained = [module for module in modules if id(module) in self.forwards.trained]
        return trained or modules

    def _describe_run(self, optimizer: torch.optim.Optimizer) -> None:
        self.stream.add(run_row(self, optimizer))

    def finish(self) -> None:
        """Last rows (loaders, AMP, hooks, parameters), rank 0's final parameters, then the file is closed."""
        if self.finished:
            return
        self.finished = True
        try:
            if self.discovering and self.optimizers:  # it stepped, but no training forward was ever seen
                self._describe_run(self.optimizers[0])
            self.timing.finish()
            for row in end_rows(self):
                self.stream.add(row)
            if self.rank == 0:
                save_params(self.optimizers, self.run_dir / PARAMS_FILE)
        except Exception as error:
            self.error(f"finish: {type(error).__name__}: {error}")
        self.stream.close()
