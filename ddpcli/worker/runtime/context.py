"""Context: what one training process knows about its run, and the DDP-aware operations on it (made by init())."""

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ddpcli import noise_scale as gns
from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.worker import process_group
from ddpcli.worker.observer.hooks import active
from ddpcli.worker.runtime.checkpoints import announce_resume, load_checkpoint, restarted, save_checkpoint
from ddpcli.worker.runtime.data import EpochLoader
from ddpcli.worker.runtime.models import LocalModel, convert_batchnorm, unwrap
from ddpcli.worker.runtime.noise import GradScale, NoiseMeter
from ddpcli.worker.stream import rank_stream
from ddpcli.worker.tensors import save_atomic


def init(
    *, seed: int | None = None, backend: str | None = None, noise_scale: bool | None = None, noise_beta: float = 0.99
) -> "Context":
    """Join the process group torchrun describes (if any), pick the device, seed torch identically on every rank.

    seed: default RUN's `seed`, else 0. The same seed on every rank gives every replica the same initial model
    (DDP also broadcasts rank 0's) and every DistributedSampler the same permutation, which is what makes W x B
    and 1 x W*B see the same samples. backend: default nccl with CUDA, else gloo. noise_scale: measure the
    gradient noise scale (default RUN's `noise_scale`); noise_beta is the EMA factor of that measurement where the
    helper measures (one process, or no `ddpcli launch`): under `ddpcli launch` the observer measures a DDP model
    and the merge's EMAs use beta 0.99 (docs/contracts.md). Under plain `python` (no RANK in the environment) there
    is no process group at all: world size 1.
    """
    run = _run_from_env()
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before the process group, so NCCL binds this rank to its own GPU
    if "RANK" in os.environ and not dist.is_initialized():
        process_group.init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"))
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
        noise=NoiseMeter(noise_beta) if measure else None,
    )


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
        noise: "NoiseMeter | None",
    ) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device, self.seed, self.run, self.run_dir = device, seed, run, run_dir
        self.is_main = rank == 0
        # Known from the plan, else learnt from dataloader() and accumulate(): they give `samples` in the log.
        self.batch_size: int | None = (run or {}).get("per_device_batch_size")
        self.accum_steps: int = (run or {}).get("grad_accum_steps") or 1
        self._noise = noise
        self._start = time.perf_counter()

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
        """Record optimizer step `step` (1-based) with this rank's scalars: no collective and no device sync.

        Under `ddpcli launch` every rank's row goes to its observation file, tensors still on the device (read in
        chunks); the launcher merges the ranks after the run into metrics.jsonl (loss: the mean over ranks;
        samples: what the observer saw every rank consume). Without a run directory rank 0 prints its own row.
        Python numbers (the lr) are taken as they are. Returns this rank's row.
        """
        row: dict[str, Any] = {"step": step, "time": round(time.perf_counter() - self._start, 6)}
        if self.global_batch_size:
            row["samples"] = step * self.global_batch_size  # what this helper fed; the observer's count wins
        row.update(
            {key: value.detach() if isinstance(value, torch.Tensor) else value for key, value in scalars.items()}
        )
        if self._noise is not None:
            row.update(self._noise_row(self._noise.read()))
        stream = rank_stream()
        if stream is not None:
            stream.add({"kind": "log", **row})
        elif self.is_main:
            print(" ".join(f"{key}={_short(value)}" for key, value in row.items()), flush=True)
        return row

    # -- surviving failures -----------------------------------------------------------------------------------

    def checkpoint(self, step: int, *, model: nn.Module, optimizer: torch.optim.Optimizer, every: int) -> bool:
        """Every `every` optimizer steps, rank 0 saves what a restart needs to go on exactly; True if it saved.

        Model and optimizer state, the step (the data order is a function of it: see `EpochLoader.steps`), the
        RNG states and the logged time (runtime/checkpoints.py). Written to a temporary file and renamed, so a
        crash while saving leaves the previous checkpoint intact. Every rank must call it (it ends with a barrier,
        so that no rank runs on past a checkpoint the others could not resume from). Needs a run directory
        (`ddpcli launch`).
        """
        if every <= 0 or step % every or self.run_dir is None:
            return False
        if self.is_main:
            save_checkpoint(self.run_dir, step, time.perf_counter() - self._start, model, optimizer, self.device)
        if dist.is_initialized():
            dist.barrier()
        return True

    def resume(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """After a torchrun restart (TORCHELASTIC_RESTART_COUNT > 0) or `ddpcli launch --resume` (DDPCLI_RESUME=1):
        load the last checkpoint and return its step, from which the loop goes on (0: start from scratch).

        The observation files are told the step, so the rows logged after the checkpoint by the attempt that died
        are replaced by this attempt's (each step appears once). Call it after `wrap()` and before the loop, on
        every rank.
        """
        if not restarted() or self.run_dir is None:
            return 0
        step, elapsed = load_checkpoint(self.run_dir, model, optimizer, self.device)
        if elapsed is not None:
            self._start = time.perf_counter() - elapsed  # logged time goes on, minus the downtime
        announce_resume(step)
        if dist.is_initialized():
            dist.barrier()
        return step

    def finish(self, model: nn.Module | None = None) -> None:
        """Save rank 0's final parameters, wait for every rank, then tear the process group down.

        The barrier matters: with DDP on gloo, a rank destroying the group while rank 0 still saved hung in
        2 of 6 runs. final_params.pt holds the unwrapped state_dict on CPU, so it loads without DDP or a GPU.
        """
        if model is not None and self.is_main and self.run_dir is not None:
            state = {key: value.detach().cpu() for key, value in unwrap(model).state_dict().items()}
            save_atomic(state, self.run_dir / PARAMS_FILE)
        stream = rank_stream()
        if stream is not None and active() is not None:  # the observer writes its end rows later, then closes it
            stream.flush()
        elif stream is not None:
            stream.close()
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def _noise_row(self, tracker: gns.NoiseScaleTracker) -> dict[str, Any]:
        """This rank's noise-scale EMAs and batch sizes; nothing until a step has been measured. Only the small-batch
        EMA differs between ranks: the merge averages it over ranks (the EMA is linear, so the average of the EMAs
        is the EMA of the average) and computes noise_scale from it (ddpcli.rundir.merge)."""
        batches = self._noise_batch_sizes()
        if tracker.grad_sq_small is None or tracker.grad_sq_big is None or batches is None:
            return {}
        row: dict[str, Any] = {"grad_sq_small": tracker.grad_sq_small, "grad_sq_big": tracker.grad_sq_big}
        if self.world_size == 1:  # no merge may follow (plain python): say it here too
            value = tracker.noise_scale(*batches)
            row.update({"noise_scale": value} if value is not None else {})
        return {**row, "noise_batches": list(batches)}

    def _noise_batch_sizes(self) -> tuple[int, int] | None:
        """(B_small, B_big): per-rank and global batch with DDP; micro-batch and step batch at world size 1."""
        if self.batch_size is None:
            return None
        if self.world_size > 1:
            small = self.batch_size * self.accum_steps
            return small, small * self.world_size
        return (self.batch_size, self.batch_size * self.accum_steps) if self.accum_steps > 1 else None


def _short(value: Any) -> str:
    """A printed row's value: tensors as the numbers they hold (printing reads them anyway), floats to 6 digits."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return f"{value:.6g}" if isinstance(value, float) else str(value)
