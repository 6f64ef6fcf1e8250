"""The observer: torch's public hooks where they exist, thin wrappers elsewhere, and nothing that changes training.

Per optimizer step (a global optimizer step hook): the backward passes since the last step (a wrapper around
torch.autograd.backward, which Tensor.backward, Lightning and accelerate all end in), the samples that fed them
(the leading dimension of the batch that reached the model's forward in training mode with grad enabled:
evaluation does not count), the loss that was back-propagated (with an AMP GradScaler's scale taken out), the lr of
each param group, the time. Per run: DDP and its options, the training DataLoaders' samplers and their epochs,
BatchNorm layers, AMP, a fingerprint of the first training batches (to tell whether ranks got different samples),
and at the end, from rank 0, the parameters the optimizer updated.

Costs: values stay on the device (ddpcli.worker.stream reads them in chunks); no collective, no synchronisation
per step. Until the first optimizer step every module call goes through a thin wrapper, to find the top-level
modules (the model, whatever wraps it); after it only those modules have a forward pre-hook. Any failure inside
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
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.worker import process_group
from ddpcli.worker.observer.attribution import skip_in_warnings
from ddpcli.worker.observer.noise import BucketNorms
from ddpcli.worker.observer.reading import (
    fingerprint,
    first_tensor,
    initial_lrs,
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
_SYNCHRONISED_BATCHNORM = ("SyncBatchNorm", "CrossProcessBatchNorm")

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
        self.micro_batches = 0
        self.samples = 0
        self.pending_samples = 0  # forwards since the last backward
        self.loss: torch.Tensor | None = None
        self.unscaled: dict[int, torch.Tensor] = {}  # id(scaler.scale(loss)) -> loss, until its backward
        self.optimizers: list[torch.optim.Optimizer] = []  # strong references: the final parameters live in them
        self.roots: dict[int, weakref.ref[nn.Module]] = {}
        self.discovering = True  # until the first step: every module call is seen, to find the top-level ones
        self.depth = 0
        self.forward_seen = False  # a training forward since the last backward
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
        self.timing = StepTiming(self)  # where each step's time goes (timing.py)
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.stream.add({"kind": "start", "rank": self.rank, "restart": restart, "pid": os.getpid()})

    # -- installing ----------------------------------------------------------------------------------------------

    def _patch(self) -> None:
        register_optimizer_step_post_hook(self._guard(self._after_step))
        self._original_call = nn.Module.__call__
        nn.Module.__call__ = self._discovering_call()
        wrap(torch.autograd, "backward", before=self._guard(self._before_backward))
        wrap(torch.amp.GradScaler, "scale", after=self._guard(self._scaled))
        wrap(DataLoader, "__iter__", after=self._guard(self._loader_iter))
        wrap(_BaseDataLoaderIter, "__next__", before=self._guard(self._loader_next))
        wrap(DistributedDataParallel, "__init__", after=self._guard(self._ddp_built))
        wrap(DistributedDataParallel, "register_comm_hook", before=self._guard(self._comm_hook_registered))
        wrap(dist, "init_process_group", after=self._guard(lambda *args, **kwargs: process_group.hold_world_group()))
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
        """nn.Module.__call__ until the first optimizer step: a call at depth 0 in training is a top-level module.
        (A plain function, not a bound method: it must bind to each module as __call__ does.)"""
        original, found_root = self._original_call, self._guard(self._found_root)

        def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self.depth == 0 and module.training and torch.is_grad_enabled():
                found_root(module, args, kwargs)
            self.depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                self.depth -= 1

        skip_in_warnings(call)
        return call

    def _found_root(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A top-level call. One without parameters (a loss module, `criterion(logits.view(-1, V), ...)`) is not the
        model: its leading dimension is no batch size."""
        if id(module) not in self.roots:
            if next(module.parameters(), None) is None:
                return
            self.roots[id(module)] = weakref.ref(module)
        if self.measure_noise and self.noise is None and isinstance(module, DistributedDataParallel):
            self._measure_noise(module)
        self._training_forward(module, args, kwargs)

    def _root_pre_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if module.training and torch.is_grad_enabled():
            self._training_forward(module, args, kwargs)

    def _training_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        batch = first_tensor((args, kwargs))
        self.timing.forward(module, batch)
        if batch is not None and batch.dim() > 0 and not self.forward_seen:
            # Several top-level calls before one backward (an encoder, then a head on its output, which may be
            # flattened to batch x tokens) see one batch: the first call's, the one that takes the input.
            self.pending_samples = batch.shape[0]
            if self.fingerprints < FINGERPRINT_BATCHES:
                self.fingerprints += 1
                values = fingerprint(tensors((args, kwargs)))
                self.stream.add({"kind": "fingerprint", "index": self.fingerprints, "values": values})
        self.forward_seen = True
        if self.last_loader is not None and self.last_loader in self.loaders:
            self.loaders[self.last_loader]["training"] = True
        if self.amp is None and torch.is_autocast_enabled(batch.device.type if batch is not None else "cpu"):
            device = batch.device.type if batch is not None else "cpu"
            self.amp = f"autocast {str(torch.get_autocast_dtype(device)).removeprefix('torch.')}"

    def _switch_to_root_hooks(self) -> None:
        """After the first step the top-level modules are known: hook them alone from now on (cheaper)."""
        nn.Module.__call__ = self._original_call
        self.discovering = False
        for ref in self.roots.values():
            module = ref()
            if module is not None:
                module.register_forward_pre_hook(self._guard(self._root_pre_forward), with_kwargs=True)

    # -- backward and step --------------------------------------------------------------------------------------

    def _before_backward(self, outputs: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(outputs, list | tuple) and len(outputs) == 1:
            outputs = outputs[0]  # torch.autograd.backward([loss])
        tensor = outputs if isinstance(outputs, torch.Tensor) else None
        if tensor is None or tensor.numel() != 1 or not tensor.requires_grad:
            return
        self.micro_batches += 1
        self.samples += self.pending_samples
        self.pending_samples = 0
        self.forward_seen = False
        loss = self.unscaled.pop(id(tensor), tensor).detach()
        loss = loss if loss.dim() == 0 else loss.reshape(())
        if self.unscaled:
            self.unscaled.clear()
        self.loss = loss if self.loss is None else self.loss + loss

    def _scaled(self, result: Any, scaler: Any, outputs: Any) -> None:
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and result is not outputs:
            self.unscaled[id(result)] = outputs
            self.scaler = scaler
            if self.amp is None or not self.amp.endswith("GradScaler"):
                self.amp = f"{self.amp or 'fp16'} + GradScaler"

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.optimizers:
            self.optimizers.append(optimizer)
        elif optimizer is not self.optimizers[0]:
            if all(optimizer is not known for known in self.optimizers):
                self.optimizers.append(optimizer)
            return  # the first optimizer that steps defines the optimizer step (a GAN's second one is extra)
        self.step += 1
        row = {
            "kind": "step",
            "step": self.step,
            "micro_batches": self.micro_batches,
            "samples": self.samples,
            "loss": self.loss,
            "lr": [snapshot(group["lr"]) for group in optimizer.param_groups],
            "time": round(time.perf_counter() - self.start, 6),
        }  # fmt: skip
        norms = self.noise.take() if self.noise is not None else None
        if norms is not None:
            row["sq_small"], row["sq_big"] = self._unscaled_norms(*norms)
        self.stream.add(row)
        self.micro_batches, self.samples, self.loss = 0, 0, None
        if self.discovering and self.roots:  # a step before any training forward (a warm-up call) finds nothing
            self._describe_run(optimizer)
            self._switch_to_root_hooks()
        self.timing.step_done()  # last: the observer's own one-off work at step 1 stays out of the timed steps

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

    def _describe_run(self, optimizer: torch.optim.Optimizer) -> None:
        params = [param for group in optimizer.param_groups for param in group["params"]]
        modules = [module for ref in self.roots.values() if (module := ref()) is not None]
        norms = [layer for module in modules for layer in module.modules() if isinstance(layer, _BatchNorm)]
        synchronised = sum(type(layer).__name__ in _SYNCHRONISED_BATCHNORM for layer in norms)
        self.stream.add({
            "kind": "run",
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
            "backend": str(dist.get_backend()) if dist.is_initialized() else None,
            "device": params[0].device.type if params else None,
            "ddp": bool(self.ddp) or any(isinstance(module, DistributedDataParallel) for module in modules),
            "ddp_options": self.ddp[0] if self.ddp else {},
            "models": [type(module).__name__ for module in modules],
            "batchnorm_layers": len(norms),
            "batchnorm_synchronized": synchronised,
            "amp": self.amp,
        })  # fmt: skip

    def finish(self) -> None:
        """Last rows (loaders, AMP, hooks), rank 0's final parameters, then the file is closed."""
        if self.finished:
            return
        self.finished = True
        try:
            if self.discovering and self.optimizers:  # it stepped, but no training forward was ever seen
                self._describe_run(self.optimizers[0])
            loaders = [info for info in self.loaders.values() if info.get("training")]
            self.timing.finish()
            self.stream.add({
                "kind": "end",
                "steps": self.step,
                "loaders": loaders,
                "initial_lr": initial_lrs(self.optimizers[0]) if self.optimizers else None,
                "amp": self.amp,
                "script_comm_hook": self.script_comm_hook,
                "noise_scale_requested": self.measure_noise,
                "noise_scale_by": "observer" if self.noise is not None else "runtime" if self.runtime_noise else None,
            })  # fmt: skip
            if self.rank == 0:
                self._save_params()
        except Exception as error:
            self.error(f"finish: {type(error).__name__}: {error}")
        self.stream.close()

    def _save_params(self) -> None:
        """The parameters the optimizers updated, in their order: keys `<optimizer>.<group>.<index>`, the same for
        a script run bare, under DDP, Lightning or accelerate. Not when the script saved its own (runtime)."""
        path = self.run_dir / PARAMS_FILE
        if path.exists() or not self.optimizers:
            return
        state = {
            f"{o}.{g}.{i}": param.detach().cpu().clone()
            for o, optimizer in enumerate(self.optimizers)
            for g, group in enumerate(optimizer.param_groups)
            for i, param in enumerate(group["params"])
        }
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(state, temp)
        os.replace(temp, path)
