"""A plain DDP training script, the kind `ddpcli launch` is for: nothing of ddpcli in it, the observer records it.

    python -m ddpcli.examples.plain_ddp                                   # one process
    torchrun --standalone --nproc-per-node 4 -m ddpcli.examples.plain_ddp --batch-size 4
    ddpcli launch experiments.toml                                        # the bundled experiments

An MLP learns a fixed random teacher network from synthetic, seeded data (no download). What makes W processes x
batch B end with the same parameters as one process with batch W*B (up to float summation order), every line of it
plain torch:
  - DistributedSampler deals each process its share of one seeded permutation, and set_epoch(epoch) reshuffles;
  - DDP averages gradients over processes, and the loss is a mean, so a step is the mean over the global batch;
  - accumulation divides the loss by the micro-batch count and skips the all-reduce (no_sync) until the last one;
  - the lr schedule counts optimizer steps, not micro-batches.
`ddpcli.examples.regression` is the same job written with `ddpcli.runtime` (checkpoints, cross-process BatchNorm).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

TEACHER_SEED_OFFSET = 1_000_003  # the data never share a random stream with the student's initialisation


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps, over as many epochs as needed")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per process per micro-batch")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate after warmup")
    parser.add_argument("--warmup", type=int, default=0, help="optimizer steps of linear lr warmup")
    parser.add_argument("--dataset-size", type=int, default=2048, help="samples in the synthetic set")
    parser.add_argument("--seed", type=int, default=0, help="initialisation, data and sampling order")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units of the student MLP")
    parser.add_argument("--log-every", type=int, default=10, help="print rank 0's loss every N optimizer steps")
    return parser.parse_args(argv)


def make_dataset(size: int, inputs: int, seed: int) -> TensorDataset:
    """x ~ N(0, I); y = teacher(x) + noise, the teacher a random two-layer tanh network fixed by the seed."""
    generator = torch.Generator().manual_seed(seed + TEACHER_SEED_OFFSET)
    hidden_weight = torch.randn(inputs, 32, generator=generator) / inputs**0.5
    output_weight = torch.randn(32, 1, generator=generator) / 32**0.5
    x = torch.randn(size, inputs, generator=generator)
    y = torch.tanh(x @ hidden_weight) @ output_weight + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def micro_batches(loader: DataLoader, sampler: DistributedSampler) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every batch of every epoch, reshuffled per epoch (without set_epoch, each epoch repeats the first order)."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(args.seed)  # the same initial parameters on every process (DDP also broadcasts rank 0's)
    dataset = make_dataset(args.dataset_size, inputs=16, seed=args.seed)
    model: nn.Module = nn.Sequential(nn.Linear(16, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1)).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / max(args.warmup, 1)))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        global_batch = args.batch_size * args.grad_accum * world_size
        print(f"{world_size} processes x batch {args.batch_size} x {args.grad_accum} micro-batches = global batch "
              f"{global_batch}; {args.steps} optimizer steps at lr {args.lr:g}", flush=True)  # fmt: skip

    batches = micro_batches(loader, sampler)
    for step in range(1, args.steps + 1):
        for index in range(args.grad_accum):
            x, y = next(batches)
            last = index == args.grad_accum - 1
            # All-reduce once per optimizer step: the other micro-batches only add to the local gradients.
            syncing = contextlib.nullcontext() if last or not distributed else model.no_sync()  # type: ignore[operator]
            with syncing:
                loss = F.mse_loss(model(x.to(device)), y.to(device)) / args.grad_accum
                loss.backward()
        optimizer.step()
        warmup.step()
        optimizer.zero_grad(set_to_none=True)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step}: loss {loss.item() * args.grad_accum:.4f} (rank 0's last micro-batch)", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
