"""The helper a training script imports: the DDP details that silently change results, done once.

    from ddpcli import runtime

    @runtime.main
    def main() -> None:
        ctx = runtime.init()
        model = ctx.wrap(ctx.sync_batchnorm(build_model()))
        loader = ctx.dataloader(dataset)
        for step, micro_batches in loader.steps(total_steps, accum_steps):
            for index, (x, y) in enumerate(micro_batches):
                with ctx.accumulate(model, index, len(micro_batches)):
                    (loss_fn(model(x), y) / len(micro_batches)).backward()
            optimizer.step()
            optimizer.zero_grad()
            ctx.log(step, loss=loss.detach(), lr=lr)
        ctx.finish(model)

Each piece exists because the plain version has a trap: a sampler whose epoch is never set repeats one order,
a forward outside `no_sync()` all-reduces every micro-batch, a loss logged from rank 0 alone is a quarter of the
story, BatchNorm on CPU cannot be synchronised by `nn.SyncBatchNorm`, and a rank that tears down the process
group while rank 0 still saves can hang. The same script runs under `ddpcli launch`, plain `torchrun` and plain
`python` (world size 1, no process group). The file names and RUN keys follow docs/contracts.md.

This is the only ddpcli module (with the examples) that imports torch; nothing else imports it at import time.
No `from __future__ import annotations` here: DDP checks a comm hook's annotations against the real classes.
"""

import atexit
import collections
import contextlib
import dataclasses
import gc
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar

import torch
import torch.distributed as dist

# Imported before init() creates the process group, on purpose. Its functions take `group=group.WORLD` as a
# default argument, so a first import after init_process_group (torch._dynamo makes it, and torch.optim and
# DDP's forward import torch._dynamo) captures the default group for good: destroy_process_group can then not
# free it, its gloo threads outlive the interpreter and a worker aborts at exit ("terminate called without an
# active exception", 1 run in 10 of the bundled 4-process example before this import).
import torch.distributed.nn.functional
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ddpcli.core import noise_scale as gns
from ddpcli.core.records import CHECKPOINT_FILE, METRICS_FILE, PARAMS_FILE, parse_row

__all__ = [
    "Context",
    "CrossProcessBatchNorm",
    "EpochLoader",
    "LocalModel",
    "convert_batchnorm",
    "init",
    "main",
    "unwrap",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")
GradScale = float | torch.Tensor | Callable[[], float | torch.Tensor]


def main(fn: Callable[_P, _R]) -> Callable[_P, _R | None]:
    """Decorate the script's entry point: torchrun then writes each failing rank's traceback to its error.json.

    Without it torchrun's failure report says `error_file: <N/A>` and the traceback is only in that rank's
    stderr. This is `torch.distributed.elastic.multiprocessing.errors.record`; outside torchrun it only re-raises.
    """
    return record(fn)


def init(
    *, seed: int | None = None, backend: str | None = None, noise_scale: bool | None = None, noise_beta: float = 0.99
) -> "Context":
    """Join the process group torchrun describes (if any), pick the device, seed torch identically on every rank.

    seed: default RUN's `seed`, else 0. The same seed on every rank gives every replica the same initial model
    (DDP also broadcasts rank 0's) and every DistributedSampler the same permutation, which is what makes W x B
    and 1 x W*B see the same samples. backend: default nccl with CUDA, else gloo. noise_scale: measure the
    gradient noise scale (default RUN's `noise_scale`); noise_beta is the EMA factor of that measurement.
    Under plain `python` (no RANK in the environment) there is no process group at all: world size 1.
    """
    run = _run_from_env()
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before the process group, so NCCL binds this rank to its own GPU
    if "RANK" in os.environ and not dist.is_initialized():
        _init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"))
    seed = seed if seed is not None else int((run or {}).get("seed", 0))
    torch.manual_seed(seed)
    measure = noise_scale if noise_scale is not None else bool((run or {}).get("noise_scale", False))
    run_dir = os.environ.get("DDPCLI_RUN_DIR")
    return Context(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        seed=seed,
        run=run,
        run_dir=Path(run_dir) if run_dir else None,
        noise=_NoiseMeter(noise_beta) if measure else None,
    )


_held_groups: list[dist.ProcessGroup] = []  # see _init_process_group


def _init_process_group(backend: str) -> None:
    """init_process_group, plus one reference to the group that is dropped at exit, after the model's.

    Why: a finished collective can still be waiting in one of gloo's worker threads to be freed, and freeing its
    Python-owned tensors takes the GIL. DDP's Reducer holds the group, and when the model is freed the Reducer
    destroys the group, joining those threads while holding the GIL: a deadlock (seen in 3 of 17 runs of the
    bundled 4-process example). With this reference the Reducer is never the last holder; the exit handler drops
    it from Python, whose binding releases the GIL while the threads are joined.
    """
    dist.init_process_group(backend)
    _held_groups.append(dist.group.WORLD)
    atexit.register(_release_groups)


def _release_groups() -> None:
    gc.collect()  # a model caught in a reference cycle lets go of the group now, not during interpreter teardown
    _held_groups.clear()


def _run_from_env() -> dict[str, Any] | None:
    text = os.environ.get("DDPCLI_RUN")
    return json.loads(text) if text else None


class Context:
    """What one training process knows about its run, and the DDP-aware operations on it. Made by `init()`."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        local_rank: int,
        device: torch.device,
        seed: int,
        run: dict[str, Any] | None,
        run_dir: Path | None,
        noise: "_NoiseMeter | None",
    ) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device, self.seed, self.run, self.run_dir = device, seed, run, run_dir
        self.is_main = rank == 0
        # Known from the plan, else learnt from dataloader() and accumulate(): they give `samples` in the log.
        self.batch_size: int | None = (run or {}).get("per_device_batch_size")
        self.accum_steps: int = (run or {}).get("grad_accum_steps") or 1
        self._noise = noise
        self._start = time.perf_counter()
        self._metrics: IO[str] | None = None

    @property
    def global_batch_size(self) -> int | None:
        """Samples per optimizer step over the processes that actually joined: an elastic run may have fewer
        nodes than the plan's maximum, so the plan's per-process numbers times the real world size."""
        run = self.run or {}
        if run.get("per_device_batch_size") and run.get("grad_accum_steps"):
            return int(run["per_device_batch_size"]) * int(run["grad_accum_steps"]) * self.world_size
        return self.batch_size * self.accum_steps * self.world_size if self.batch_size else None

    # -- data ------------------------------------------------------------------------------------------------

    def dataloader(
        self, dataset: Dataset, batch_size: int | None = None, shuffle: bool = True, **loader_kwargs: Any
    ) -> "EpochLoader":
        """A DataLoader over this rank's shard: DistributedSampler with the run's seed and drop_last.

        The sampler is used at world size 1 too, so one process and N processes draw from the same seeded
        permutation (rank r takes its indices r, r+W, ...): 4 x 16 and 1 x 64 see the same 64 samples per step.
        batch_size defaults to RUN's per_device_batch_size.
        """
        batch_size = batch_size or self.batch_size
        if batch_size is None:
            raise ValueError("dataloader() needs batch_size when the script is not started by ddpcli launch")
        drop_last = bool((self.run or {}).get("drop_last", False))
        sampler = DistributedSampler(
            dataset, num_replicas=self.world_size, rank=self.rank, shuffle=shuffle, seed=self.seed, drop_last=drop_last
        )
        self.batch_size = batch_size
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_kwargs)
        return EpochLoader(loader, sampler)

    # -- model -----------------------------------------------------------------------------------------------

    def sync_batchnorm(self, model: nn.Module) -> nn.Module:
        """BatchNorm statistics over the whole group instead of each process's micro-batch. Call before wrap().

        CUDA: `nn.SyncBatchNorm`. CPU: `CrossProcessBatchNorm`, because DDP refuses a CPU module holding
        SyncBatchNorm. At world size 1 the statistics are already global, so the model is returned unchanged.
        """
        if self.world_size == 1:
            return model
        if self.device.type == "cuda":
            return nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return convert_batchnorm(model)

    def wrap(self, model: nn.Module, *, grad_scale: GradScale | None = None, **ddp_kwargs: Any) -> nn.Module:
        """Move to the device and wrap: DistributedDataParallel when world_size > 1, else `LocalModel`.

        Both offer `.module` and `no_sync()`, so the script has one code path. grad_scale (the AMP loss scale,
        a number or a callable such as `scaler.get_scale`) is only needed for the noise-scale measurement.
        """
        model = model.to(self.device)
        if self.world_size == 1:
            wrapped: nn.Module = LocalModel(model)
        else:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = DistributedDataParallel(model, device_ids=device_ids, **ddp_kwargs)
        if self._noise is not None:
            self._noise.attach(wrapped, grad_scale)
        return wrapped

    @contextlib.contextmanager
    def accumulate(self, model: nn.Module, micro_index: int, accum_steps: int) -> Iterator[None]:
        """Run one micro-batch's forward AND backward inside this block.

        Micro-batches before the last run under `model.no_sync()`: DDP would otherwise all-reduce after every
        one of them. The forward must be inside too, because DDP decides at forward time whether the coming
        backward synchronises. The last micro-batch runs normally and carries the accumulated gradient.
        """
        self.accum_steps = accum_steps
        final = micro_index == accum_steps - 1
        noise = self._noise
        if noise is not None:
            noise.micro_batch_begins(micro_index, accum_steps)
        with contextlib.nullcontext() if final else model.no_sync():
            yield
        if final and noise is not None:
            noise.local_step_ends()

    # -- metrics and teardown --------------------------------------------------------------------------------

    def log(self, step: int, **scalars: float | torch.Tensor) -> dict[str, Any]:
        """Record optimizer step `step` (1-based): tensors averaged over ranks, rank 0 writes the row.

        Every rank must call it with the same keys (it all-reduces, once for all scalars together). Python
        numbers (the lr) are taken as they are. Rank 0 appends a flushed line to $DDPCLI_RUN_DIR/metrics.jsonl,
        or prints it when there is no run directory. Returns the row on every rank.
        """
        reduced = {key: value for key, value in scalars.items() if isinstance(value, torch.Tensor)}
        # Only this rank's small-batch EMA differs between ranks: the big-batch norm comes from the averaged
        # gradient, identical everywhere. One more number, not three: on gloo every element of a small
        # all-reduce costs (4 ranks on 2 cores: ~0.9 ms for 1 float, ~3.5 ms for 4).
        noise = self._noise.read() if self._noise is not None else None
        values = self._mean_over_ranks(list(reduced.values()), [noise.ema_small] if noise is not None else [])
        row: dict[str, Any] = {"step": step}
        if self.global_batch_size:
            row["samples"] = step * self.global_batch_size
        row["time"] = round(time.perf_counter() - self._start, 6)
        averaged = dict(zip(reduced, values, strict=False))
        row.update({key: averaged.get(key, value) for key, value in scalars.items()})
        if noise is not None:
            row.update(self._noise_row(dataclasses.replace(noise, ema_small=values[-1])))
        if self.is_main:
            self._write(row)
        return row

    # -- surviving failures -----------------------------------------------------------------------------------

    def checkpoint(self, step: int, *, model: nn.Module, optimizer: torch.optim.Optimizer, every: int) -> bool:
        """Every `every` optimizer steps, rank 0 saves what a restart needs to go on exactly; True if it saved.

        Model and optimizer state, the step (the data order is a function of it: see `EpochLoader.steps`), the
        RNG states and the logged time. Written to a temporary file and renamed, so a crash while saving leaves
        the previous checkpoint intact. Every rank must call it (it ends with a barrier, so that no rank runs on
        past a checkpoint the others could not resume from). Needs a run directory (`ddpcli launch`).
        """
        if every <= 0 or step % every or self.run_dir is None:
            return False
        if self.is_main:
            state = {
                "step": step,
                "time": time.perf_counter() - self._start,
                "model": unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else [],
            }
            _save_atomic(state, self.run_dir / CHECKPOINT_FILE)
        if dist.is_initialized():
            dist.barrier()
        return True

    def resume(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """After a torchrun restart (TORCHELASTIC_RESTART_COUNT > 0) or `ddpcli launch --resume` (DDPCLI_RESUME=1):
        load the last checkpoint and return its step, from which the loop goes on (0: start from scratch).

        Rank 0 also drops the metrics rows logged after the checkpoint, so each step appears once. Call it after
        `wrap()` and before the loop, on every rank.
        """
        restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0 or os.environ.get("DDPCLI_RESUME") == "1"
        path = self.run_dir / CHECKPOINT_FILE if self.run_dir is not None else None
        if not restarted or path is None:
            return 0
        state = torch.load(path, map_location=self.device, weights_only=True) if path.exists() else None
        step = int(state["step"]) if state is not None else 0
        if state is not None:
            unwrap(model).load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"].cpu())
            if state["cuda_rng"]:
                torch.cuda.set_rng_state_all([value.cpu() for value in state["cuda_rng"]])
            self._start = time.perf_counter() - float(state["time"])  # logged time goes on, minus the downtime
        if self.is_main:
            _drop_rows_after(self.run_dir / METRICS_FILE, step)
        if dist.is_initialized():
            dist.barrier()  # nobody logs before rank 0 has cut the metrics file
        return step

    def finish(self, model: nn.Module | None = None) -> None:
        """Save rank 0's final parameters, wait for every rank, then tear the process group down.

        The barrier matters: with DDP on gloo, a rank destroying the group while rank 0 still saved hung in
        2 of 6 runs. final_params.pt holds the unwrapped state_dict on CPU, so it loads without DDP or a GPU.
        """
        if model is not None and self.is_main and self.run_dir is not None:
            state = {key: value.detach().cpu() for key, value in unwrap(model).state_dict().items()}
            _save_atomic(state, self.run_dir / PARAMS_FILE)
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def _mean_over_ranks(self, tensors: Sequence[torch.Tensor], numbers: Sequence[float] = ()) -> list[float]:
        """The scalars (tensors, then numbers) averaged over ranks, in one all-reduce."""
        parts = [tensor.detach().reshape(1).float().to(self.device) for tensor in tensors]
        if numbers:
            parts.append(torch.tensor(numbers, dtype=torch.float32, device=self.device))
        if not parts:
            return []
        flat = torch.cat(parts)
        if self.world_size > 1:
            dist.all_reduce(flat)
            flat /= self.world_size
        return flat.tolist()

    def _noise_row(self, averaged: gns.NoiseScaleTracker) -> dict[str, float]:
        """The logged noise-scale values; nothing until a step has been measured."""
        batches = self._noise_batch_sizes()
        if averaged.grad_sq_small is None or averaged.grad_sq_big is None or batches is None:
            return {}
        value = averaged.noise_scale(*batches)
        row = {"noise_scale": value} if value is not None else {}
        return {**row, "grad_sq_small": averaged.grad_sq_small, "grad_sq_big": averaged.grad_sq_big}

    def _noise_batch_sizes(self) -> tuple[int, int] | None:
        """(B_small, B_big): per-rank and global batch with DDP; micro-batch and step batch at world size 1."""
        if self.batch_size is None:
            return None
        if self.world_size > 1:
            small = self.batch_size * self.accum_steps
            return small, small * self.world_size
        return (self.batch_size, self.batch_size * self.accum_steps) if self.accum_steps > 1 else None

    def _write(self, row: dict[str, Any]) -> None:
        if self.run_dir is None:
            print(" ".join(f"{key}={_short(value)}" for key, value in row.items()), flush=True)
            return
        if self._metrics is None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._metrics = (self.run_dir / METRICS_FILE).open("a", encoding="utf-8")
        # Strict JSON: a non-finite value (a diverged loss) is written as null, not as NaN, which JSON lacks.
        strict = {
            key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in row.items()
        }
        self._metrics.write(json.dumps(strict, allow_nan=False) + "\n")
        self._metrics.flush()  # `ddpcli launch` follows the file while the run goes on


def _short(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _drop_rows_after(path: Path, step: int) -> None:
    """Keep the metrics rows of steps up to `step` (atomically): the steps after it will be logged again."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = parse_row(line)  # None for a line cut short by the crash
        if row is not None and isinstance(row.get("step"), int) and row["step"] <= step:
            kept.append(line)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    os.replace(temp, path)


def _save_atomic(state: dict[str, Any], path: Path) -> None:
    """Write beside the target and rename, so a reader never loads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(state, temp)
    os.replace(temp, path)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DistributedDataParallel or LocalModel wrapper (or the model itself)."""
    return model.module if isinstance(model, DistributedDataParallel | LocalModel) else model


class LocalModel(nn.Module):
    """World-size-1 stand-in for DistributedDataParallel: the same `.module` and `no_sync()`, no communication.

    Keeping the wrapper (rather than returning the bare model) keeps state_dict keys, `.module` access and the
    accumulation code identical at every world size.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        yield


class EpochLoader:
    """A DataLoader that sets the sampler's epoch itself: forgetting `set_epoch` repeats one order every epoch.

    Iterating it gives one epoch (epoch 0, then 1, ...). `steps()` goes on over epochs for a number of
    optimizer steps, grouping micro-batches for gradient accumulation.
    """

    def __init__(self, loader: DataLoader, sampler: DistributedSampler) -> None:
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.sampler.set_epoch(self.epoch)  # the permutation is seeded with seed + epoch
        self.epoch += 1
        return iter(self.loader)

    def steps(self, total: int, accum_steps: int = 1, start: int = 0) -> Iterator[tuple[int, list[Any]]]:
        """Yield (step, micro_batches) for optimizer steps start+1 .. total (1-based), epoch after epoch.

        A step takes `accum_steps` micro-batches; the last step of an epoch takes what is left (with drop_last
        it is skipped instead), the count `ddpcli plan` gives as steps_per_epoch. Micro-batches of one step
        never mix two epochs. `start` (from `ctx.resume`) goes on where a checkpoint left off: the data order is
        a function of the step, so the resumed run sees the samples the uninterrupted one would have.
        """
        needed = accum_steps if self.loader.drop_last else 1
        if len(self) < needed:
            raise ValueError(f"an epoch has {len(self)} micro-batches, fewer than one step of {accum_steps}")
        per_epoch = len(self) // accum_steps if self.loader.drop_last else -(-len(self) // accum_steps)
        self.epoch, skip = divmod(start, per_epoch)
        step = start
        while step < total:
            batches, left = iter(self), len(self)
            if skip:  # resuming mid-epoch: pass over the micro-batches of the steps already done
                collections.deque(itertools.islice(batches, skip * accum_steps), maxlen=0)
                left, skip = left - skip * accum_steps, 0
            while left >= needed and step < total:
                count = min(accum_steps, left)
                left -= count
                step += 1
                yield step, list(itertools.islice(batches, count))


# -- BatchNorm across processes on CPU ---------------------------------------------------------------------


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks: the backward sums the incoming gradients over ranks too.

    Same maths as `torch.distributed.nn.functional.all_reduce`, which torch 2.13 deprecates (its suggested
    replacement is differentiable only in recent releases); ten lines keep every supported torch working.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor)
        return tensor

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class CrossProcessBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover the batch of every process: nn.SyncBatchNorm for CPU/gloo.

    One differentiable all-reduce of (sum x, sum x^2, count) per forward gives the global mean and biased
    variance; gradients flow back through it to every rank's inputs, so 4 x 16 trains like 1 x 64. Running
    statistics follow nn.BatchNorm (momentum, or a cumulative average when momentum is None; unbiased variance);
    eval mode uses them without communicating.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of at least 2 dimensions (N, C, ...), got {input.dim()}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not self.training and self.running_mean is not None:
            assert self.running_var is not None
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        mean, var, count = self._global_moments(input)
        if self.training and self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), count.detach())
        shape = (1, -1) + (1,) * (input.dim() - 2)
        output = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.weight is not None and self.bias is not None:
            output = output * self.weight.view(shape) + self.bias.view(shape)
        return output

    def _global_moments(self, input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dims = [0, *range(2, input.dim())]
        channels = input.size(1)
        count = input.new_full((1,), input.numel() // channels)
        stats = _AllReduceSum.apply(torch.cat([input.sum(dims), input.square().sum(dims), count]))
        total = stats[-1]
        mean = stats[:channels] / total
        var = (stats[channels : 2 * channels] / total - mean.square()).clamp_min(0.0)
        return mean, var, total

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * count / (count - 1).clamp_min(1.0)
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


def convert_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every BatchNorm layer by a CrossProcessBatchNorm sharing its parameters and running buffers."""
    if isinstance(module, _BatchNorm) and not isinstance(module, CrossProcessBatchNorm):
        converted = CrossProcessBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        if module.track_running_stats:
            converted.running_mean, converted.running_var = module.running_mean, module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return converted
    for name, child in module.named_children():
        module.add_module(name, convert_batchnorm(child))
    return module


# -- gradient noise scale ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _StepNorms:
    """The squared norms one optimizer step produced, kept on the device until the next log reads them."""

    scale_sq: float | torch.Tensor  # the AMP loss scale squared, divided out when read
    small_factor: float = 1.0  # world size 1: puts micro-batch norms into the accumulated gradient's units
    small: list[torch.Tensor] = dataclasses.field(default_factory=list)  # per bucket, or parameter x micro-batch
    big: list[torch.Tensor] = dataclasses.field(default_factory=list)  # one per bucket (DDP) or parameter


class _NoiseMeter:
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
        step.small.append(_squared_norm(buffer))
        buffer.div_(group.size())  # before the sum, as torch's allreduce_hook does (no fp16 overflow)

        def averaged(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            reduced = future.value()[0]
            step.big.append(_squared_norm(reduced))  # list.append: safe from gloo's callback threads
            return reduced

        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(averaged)

    def micro_batch_begins(self, micro_index: int, accum_steps: int) -> None:
        if self._params and accum_steps > 1 and micro_index == 0:
            self._accumulating = self._begin_step(small_factor=accum_steps)

    def local_step_ends(self) -> None:
        """World size 1: the step's micro-batches are done; .grad now holds the accumulated gradient."""
        step, self._accumulating = self._accumulating, None
        if step is not None:
            step.big.extend(_squared_norm(param.grad) for param in self._params if param.grad is not None)

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
            self._accumulating.small.append(_squared_norm(grad))

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


def _squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """|t|^2 as one fp32 dot product: the cheapest form, and this runs for every bucket of every step."""
    flat = tensor.reshape(-1)
    flat = flat if flat.dtype == torch.float32 else flat.float()
    return torch.dot(flat, flat)


def _current_scale(grad_scale: GradScale | None) -> float | torch.Tensor:
    value = grad_scale() if callable(grad_scale) else grad_scale
    return 1.0 if value is None else value
